"""Routed experts stored as MXFP4 (K3's release format) held packed: the network holds uint8 weights and scales,
computes what the dequantized network computes, shards over tensor-parallel ranks by whole scale blocks, and is
planned at its packed size."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from dayzero.cli import cli
from dayzero.errors import DayzeroError
from dayzero.export.build import load_rank_model
from dayzero.export.options import ExportOptions
from dayzero.export.rank_plan import RankPlan
from dayzero.export.sizing import rank_weights
from dayzero.model import load
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import checkpoint_config, with_mxfp4_experts
from dayzero.model.moe import ExpertBank, PackedExpertBank
from dayzero.paths import resolve_config
from dayzero.plugins.quant.reference import mxfp4_dequantize
from tests.helpers import TINY_CONFIG, tiny_config_dict


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("mxfp4")
    config = root / "wide.json"
    config.write_text(json.dumps(tiny_config_dict(moe_intermediate_size=64)))
    return write_random_checkpoint(config, root / "ckpt", torch.float32, seed=5, mxfp4_experts=True)


def _banks(model):
    return [layer.block_sparse_moe.experts for layer in model.model.layers if hasattr(layer, "block_sparse_moe")]


def test_the_checkpoint_stores_experts_packed(checkpoint):
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        packed = f.get_tensor("model.layers.1.block_sparse_moe.experts.3.w2.weight_packed")
    assert "model.layers.1.block_sparse_moe.experts.3.w2.weight_scale" in names
    assert not any(".experts." in n and n.endswith(".weight") for n in names)
    assert packed.dtype == torch.uint8 and packed.shape == (64, 32)  # [D_latent, I / 2]
    assert len(packed.unique()) > 8  # random codes, not a constant


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_experts_compute_what_the_dequantized_ones_do(checkpoint, dtype):
    packed, dense = load(checkpoint, dtype=dtype), load(checkpoint, dtype=dtype, keep_mxfp4=False)
    assert all(isinstance(b, PackedExpertBank) for b in _banks(packed)) and _banks(packed)
    assert all(isinstance(b, ExpertBank) for b in _banks(dense))
    for p, d in zip(_banks(packed), _banks(dense)):
        assert p.w2_packed.dtype == torch.uint8
        assert torch.equal(mxfp4_dequantize(p.w2_packed, p.w2_scale, dtype=dtype), d.w2)
    ids = torch.randint(0, packed.config.vocab_size, (2, 19), generator=torch.Generator().manual_seed(0))
    assert torch.equal(packed.logits(ids), dense.logits(ids))
    nbytes = [sum(p.numel() * p.element_size() for p in m.parameters()) for m in (packed, dense)]
    assert nbytes[0] < nbytes[1]


def test_tensor_parallel_ranks_hold_slices_of_the_packed_experts(checkpoint):
    whole = _banks(load(checkpoint, dtype=torch.float32))[0]
    for rank in range(2):
        options = ExportOptions(backend="eager", tp=2)
        bank = _banks(load_rank_model(checkpoint, options, rank))[0]
        assert isinstance(bank, PackedExpertBank)
        assert torch.equal(bank.w1_packed, whole.w1_packed.chunk(2, dim=1)[rank])
        assert torch.equal(bank.w2_packed, whole.w2_packed.chunk(2, dim=2)[rank])
        assert torch.equal(bank.w2_scale, whole.w2_scale.chunk(2, dim=2)[rank])


def test_a_split_inside_a_scale_block_is_refused_with_the_ways_out(tmp_path):
    narrow = write_random_checkpoint(TINY_CONFIG, tmp_path / "narrow", torch.float32, mxfp4_experts=True)
    with pytest.raises(DayzeroError, match="not a multiple of its 32-wide scale blocks.*--ep.*--dequantize-experts"):
        RankPlan(2, 0).local_config(checkpoint_config(narrow))
    assert RankPlan(2, 0, ep=2).local_config(checkpoint_config(narrow)).moe.local_experts == 4
    assert not checkpoint_config(narrow, keep_mxfp4=False).moe.mxfp4_experts


def test_plan_counts_packed_experts_at_4_25_bits():
    cfg = ModelConfig.from_hf(resolve_config("kimi-k3.1"))
    moe, plan = cfg.moe, RankPlan(8, 0, ep=8)
    dense, packed = rank_weights(cfg, plan), rank_weights(with_mxfp4_experts(cfg), plan)
    expert_weights = cfg.mlp_kinds.count("moe") * moe.local_experts // 8 * 3 * moe.intermediate_size * (
        moe.latent_size or cfg.hidden_size)
    assert packed.params == dense.params
    assert dense.bytes - packed.bytes == expert_weights * 2 - expert_weights * 17 // 32
    result = CliRunner().invoke(cli, ["plan", "kimi-k3.1", "--tp", "16", "--ep", "16", "--mxfp4-experts"],
                                catch_exceptions=False)
    assert "routed experts in MXFP4" in result.output and "2779.66 B parameters" in result.output


def test_init_checkpoint_writes_mxfp4_experts(tmp_path):
    out = tmp_path / "ck"
    result = CliRunner().invoke(cli, ["init-checkpoint", "tiny-hybrid", str(out), "--mxfp4-experts"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    assert checkpoint_config(out).moe.mxfp4_experts
