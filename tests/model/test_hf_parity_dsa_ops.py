"""Parity with transformers for the DeepSeek-V3.2 family through the plugin ops: every op dispatched on the CPU to
its Triton body (interpreter) gives transformers' fp32 logits (the checkpoints: dsa_checkpoints.py)."""

from __future__ import annotations

import pytest
import torch

from dayzero.model import load
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.dsa_checkpoints import ARCHITECTURES, TOPK, VOCAB, write_checkpoint
from tests.plugins.triton_env import ON_GPU, needs_triton

pytestmark = [needs_triton, pytest.mark.skipif(ON_GPU, reason="the interpreter run is the CPU check")]


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def checkpoint(request, tmp_path_factory):
    # a dense and a MoE layer: the interpreter runs each launch slowly
    return write_checkpoint(request.param, tmp_path_factory.mktemp(request.param), num_hidden_layers=2)


def test_plugin_ops_logits_match_transformers(checkpoint, triton_bodies_on_cpu):
    directory, hf = checkpoint
    # three rows past the indexer's Top-K
    ids = torch.randint(0, VOCAB, (1, TOPK + 3))
    got = load(directory, dtype=torch.float32).logits(ids)
    assert rel_err(got, expected_logits(hf, ids)) < 1e-4
