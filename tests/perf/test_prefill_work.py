"""The prefill work model: 2 x active weights a token (top-k of the routed experts, no embedding) plus absorbed MLA
attention over the keys each position sees (capped at top-k under DSA) and the indexer over the whole prefix."""

from __future__ import annotations

import pytest

from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import with_mxfp4_experts
from dayzero.perf.prefill_work import _keys_seen, active_weights_per_token, prefill_flops
from tests.helpers import random_model, tiny_config_dict


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def test_active_weights_count_top_k_of_the_routed_experts(model):
    moe = model.config.moe
    expected = 0.0
    for name, p in model.named_parameters():
        if "embed_tokens" not in name:
            expected += p.numel() * (moe.top_k / moe.num_experts if ".block_sparse_moe.experts." in name else 1)
    assert active_weights_per_token(model.config) == pytest.approx(expected)


@pytest.mark.parametrize("tokens, cap", [(1, None), (10, None), (10, 4), (10, 10), (3, 50)])
def test_keys_seen_sums_the_visible_prefix(tokens, cap):
    assert _keys_seen(tokens, cap) == sum(min(p + 1, cap or tokens) for p in range(tokens))


def test_attention_work_grows_quadratically_without_a_cap_and_linearly_with_one(model):
    cfg = model.config
    linear = [prefill_flops(cfg, t) for t in (100, 200, 300)]
    # past top-k (8 in tiny-hybrid) only the indexer's scores grow quadratically
    second = (linear[2] - linear[1]) - (linear[1] - linear[0])
    num_mla = cfg.layer_kinds.count("mla")
    assert second == pytest.approx(num_mla * 2 * cfg.indexer.num_heads * cfg.indexer.head_dim * 100 * 100)
    assert prefill_flops(cfg, 1) == pytest.approx(2 * active_weights_per_token(cfg) + num_mla * 2 * (
        cfg.mla.num_heads * (cfg.mla.latent_dim + cfg.mla.kv_lora_rank) + cfg.indexer.num_heads * cfg.indexer.head_dim))


def test_packed_experts_do_the_work_of_the_dequantized_ones():
    cfg = ModelConfig.from_dict(tiny_config_dict())
    assert active_weights_per_token(with_mxfp4_experts(cfg)) == active_weights_per_token(cfg)
