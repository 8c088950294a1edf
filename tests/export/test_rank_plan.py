"""The tensor-parallel rank plan: local configs, weight shards, which sublayers reduce, collective order."""

from __future__ import annotations

import pytest
import torch
import torch.distributed._functional_collectives as funcol

from dayzero.errors import DayzeroError
from dayzero.export.rank_plan import RankPlan
from dayzero.export.sizing import rank_weights
from dayzero.model.collectives import unordered_collectives
from dayzero.model.config import ModelConfig
from dayzero.model.kda import KDAttention
from dayzero.model.mla import MLAttention
from dayzero.model.mlp import GatedMLP
from dayzero.model.moe import MoE
from dayzero.model.weights import build_empty
from tests.helpers import tiny_config_dict


def test_local_config_holds_a_share_of_heads_and_neurons():
    cfg = ModelConfig.from_dict(tiny_config_dict())
    local = RankPlan(2, 1).local_config(cfg)
    assert (local.kda.num_heads, local.mla.num_heads) == (cfg.kda.num_heads // 2, cfg.mla.num_heads // 2)
    assert (local.intermediate_size, local.moe.intermediate_size) == (cfg.intermediate_size // 2,
                                                                      cfg.moe.intermediate_size // 2)
    # whole on every rank
    assert (local.moe.num_experts, local.moe.latent_size, local.hidden_size) == (
        cfg.moe.num_experts, cfg.moe.latent_size, cfg.hidden_size)
    assert local.indexer == cfg.indexer and local.mla.kv_lora_rank == cfg.mla.kv_lora_rank


def test_expert_parallel_ranks_hold_whole_experts():
    cfg = ModelConfig.from_dict(tiny_config_dict())
    plan = RankPlan(2, 1, ep=2)
    local = plan.local_config(cfg)
    assert local.moe.intermediate_size == cfg.moe.intermediate_size
    assert (local.moe.local_experts, local.moe.num_experts) == (cfg.moe.num_experts // 2, cfg.moe.num_experts)
    assert local.moe.shared_size == cfg.moe.shared_size // 2
    model = build_empty(local, torch.float32, "cpu")
    plan.mark_reductions(model)
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    assert moes and all(m.first_expert == cfg.moe.num_experts // 2 and m.experts.w1.shape[0] == 4 for m in moes)
    assert all(m.gate.weight.shape[0] == cfg.moe.num_experts for m in moes)  # the router sees every expert
    with pytest.raises(DayzeroError, match=r"--ep 2 must be 1 \(each expert's neurons split .* or equal --tp 4"):
        RankPlan(4, 0, ep=2)


def test_a_tp_that_does_not_divide_names_every_field():
    cfg = ModelConfig.from_dict(tiny_config_dict())
    with pytest.raises(DayzeroError, match=r"--tp 3 does not divide.*linear_attn_config.num_heads = 2.*"
                                           r"num_attention_heads = 2"):
        RankPlan(3, 0).local_config(cfg)
    with pytest.raises(DayzeroError, match="rank 2 is outside"):
        RankPlan(2, 2)


def test_shard_takes_this_ranks_chunk_of_the_shrunk_dim():
    whole = torch.randn(6, 8)
    assert torch.equal(RankPlan(2, 1).shard(whole, torch.Size([6, 4])), whole[:, 4:])
    assert torch.equal(RankPlan(3, 2).shard(whole, torch.Size([2, 8])), whole[4:])
    assert RankPlan(2, 0).shard(whole, whole.shape) is whole
    with pytest.raises(DayzeroError, match="cannot shard"):
        RankPlan(2, 0).shard(whole, torch.Size([3, 4]))
    with pytest.raises(DayzeroError, match="cannot shard"):
        RankPlan(2, 0).shard(whole, torch.Size([6, 3]))


def test_every_partial_sum_reduces_once():
    plan = RankPlan(2, 0)
    model = build_empty(plan.local_config(ModelConfig.from_dict(tiny_config_dict())), torch.float32, "cpu")
    plan.mark_reductions(model)
    marked = {type(m).__name__ for m in model.modules() if getattr(m, "tp_group", None) == plan.group}
    assert marked == {"KDAttention", "MLAttention", "MoE", "GatedMLP"}
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    assert moes and all(m.shared_experts.tp_group is None for m in moes)
    dense = [m for m in model.modules() if isinstance(m, GatedMLP) and m.tp_group is not None]
    assert len(dense) == 1  # tiny-hybrid's first layer; shared experts are reduced by their MoE
    assert all(m.tp_group is not None for m in model.modules() if isinstance(m, KDAttention | MLAttention))


class _TwoIndependentReductions(torch.nn.Module):
    def forward(self, x, y):
        a = funcol.all_reduce(x * 2, "sum", "0")
        b = funcol.all_reduce(y + 1, "sum", "0")
        return funcol.all_reduce(a + b, "sum", "0")


def test_independent_collectives_are_found():
    program = torch.export.export(_TwoIndependentReductions(), (torch.randn(3), torch.randn(3)))
    assert unordered_collectives(program.graph) == [("all_reduce", "all_reduce_1")]


@pytest.mark.parametrize("ep", [1, 2])
def test_rank_weights_add_up_to_the_model(ep):
    cfg = ModelConfig.from_dict(tiny_config_dict())
    whole = rank_weights(cfg, RankPlan(1, 0))
    share = rank_weights(cfg, RankPlan(2, 1, ep))
    assert whole.replicated_bytes == whole.bytes and share.bytes < whole.bytes
    # the split parts of the two ranks plus one copy of what both hold make the model
    assert 2 * (share.bytes - share.replicated_bytes) + share.replicated_bytes == whole.bytes
    assert whole.params == sum(p.numel() for p in build_empty(cfg, torch.float32, "meta").parameters())
