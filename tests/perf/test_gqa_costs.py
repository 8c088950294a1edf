"""Gated GQA layers in the cost models: every K / V row read per decode step, causal attention work in prefill,
their ops named in `dayzero inspect` with kernels of their own."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import PAGE
from dayzero.model.caches import CacheFormat
from dayzero.model.config import GQA
from dayzero.model.eager_engine import config_manifest
from dayzero.perf import layer_ops
from dayzero.perf.decode_traffic import cache_bytes_per_sequence, decode_traffic
from dayzero.perf.inspect import InspectOptions, profile
from dayzero.perf.inspect_table import render
from dayzero.perf.prefill_work import attention_flops
from tests.model.test_gated_attention import CFG, gqa_model_config


@pytest.mark.parametrize("fmt", [CacheFormat(), CacheFormat(kv_fp8=True)], ids=["bf16", "fp8"])
def test_a_decode_step_reads_every_kv_row_of_its_context(fmt):
    cfg = gqa_model_config()
    manifest = config_manifest(cfg, torch.bfloat16, fmt, max_batch=4)
    per_token = manifest.unit_bytes(PAGE) / manifest.page_size
    assert cache_bytes_per_sequence(cfg, manifest, 5000) == pytest.approx(5000 * per_token)
    assert decode_traffic(cfg, manifest, batch=3, context=100).cache_bytes == pytest.approx(300 * per_token)


def test_prefill_attention_work_is_the_causal_prefix():
    tokens = 1000
    expected = 2 * CFG.num_heads * 2 * CFG.head_dim * tokens * (tokens + 1) / 2
    assert attention_flops(gqa_model_config(), 0, tokens) == pytest.approx(expected)


def test_inspect_names_the_gqa_ops_and_their_cache():
    cfg = gqa_model_config()
    pieces = layer_ops.pieces((layer_ops.MIXER, GQA), cfg, CacheFormat())
    assert [(p.prefill, p.decode) for p in pieces] == [("write_kv", "write_kv"),
                                                       ("gqa_prefill_paged", "gqa_decode_paged")]
    text = render(profile(cfg, "gqa", InspectOptions(kv_cache="fp8")))
    assert "gated GQA" in text and "K/V fp8" in text and "reference only (" not in text
