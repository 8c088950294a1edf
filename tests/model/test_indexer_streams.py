"""The two-stream indexer input preparation (CUDA eager) gives the same selection and cache as one stream."""

from __future__ import annotations

import math

import pytest
import torch

from dayzero.model.indexer import use_indexer_streams
from dayzero.model.step import contiguous_meta
from tests.helpers import layer_pattern, random_model, tiny_config_dict
from tests.plugins.triton_env import gpu_only


@pytest.mark.parametrize("length", [pytest.param(n, marks=gpu_only) for n in (7, 300)])
def test_two_streams_match_one_stream(length):
    model = random_model(tiny_config_dict(linear_attn_config=layer_pattern("mm"), num_hidden_layers=2)).cuda()
    ids = torch.randint(0, 256, (2, length), device="cuda")
    pages = math.ceil(length / 64)
    meta = contiguous_meta([0, 0], [length, length], pages, device="cuda")
    results = []
    for enabled in (False, True):
        assert use_indexer_streams(model, enabled) == 2
        caches = model.allocate_caches(2 * pages, 2)
        with torch.inference_mode():
            logits = model.prefill(ids.flatten(), meta, caches)
        torch.cuda.synchronize()
        results.append((logits, caches[0].index_k.clone()))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=0)
    assert torch.equal(results[1][1], results[0][1])
