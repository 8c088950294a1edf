"""The Qwen3-Next adapter (`qwen3_next`): the released config's layer kinds and shapes, the fields that place gated
DeltaNet / gated-attention and dense / MoE layers, what is refused, a tensor-parallel rank's share, transformers' fused
expert banks, and dayzero's own random checkpoints of the architecture."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from dayzero.cli import cli
from dayzero.errors import DayzeroError
from dayzero.export.rank_plan import RankPlan
from dayzero.model import load
from dayzero.model.caches import cache_bytes
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.config import DENSE, GDN, GQA, MOE, ModelConfig
from tests.helpers import ROOT
from tests.model.qwen3_next_checkpoints import SHAPES, write_checkpoint

CONFIGS = ROOT / "dayzero" / "configs"


def qwen3_next_config(**overrides) -> dict:
    """The released config.json at the test checkpoint's shapes."""
    data = json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text())
    data.update(SHAPES, **overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_released_qwen3_next_layout():
    cfg = ModelConfig.from_hf(CONFIGS / "qwen3-next-80b-a3b")
    assert cfg.layer_kinds == (GDN, GDN, GDN, GQA) * 12 and cfg.mlp_kinds == (MOE,) * 48
    gdn, gqa, moe = cfg.gdn, cfg.gqa, cfg.moe
    assert (gdn.num_key_heads, gdn.num_value_heads, gdn.key_head_dim, gdn.value_head_dim) == (16, 32, 128, 128)
    assert gdn.conv_dim == 8192 and gdn.conv_size == 4
    assert (gqa.num_heads, gqa.num_kv_heads, gqa.head_dim, gqa.rotary_dim, gqa.rope_theta) == (16, 2, 256, 64, 1e7)
    assert gqa.output_gate and gqa.zero_centered_norm and cfg.zero_centered_norm
    assert (moe.num_experts, moe.top_k, moe.intermediate_size, moe.shared_size) == (512, 10, 512, 512)
    assert moe.router_activation == "softmax" and not moe.router_bias and moe.shared_expert_gate and moe.renormalize
    assert cfg.rms_norm_eps == 1e-6 and cfg.eos_token_id == 151645
    # per sequence: 36 layers of 32 fp32 states [128, 128] and conv windows of 3 rows of 8192 channels
    assert cache_bytes(cfg, torch.bfloat16).per_slot == 36 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)


@pytest.mark.parametrize("name, billions", [("qwen3-next-80b-a3b", 79.67), ("qwen3-next-slice", 7.21)])
def test_plan_of_the_bundled_sizes(name, billions):
    result = CliRunner().invoke(cli, ["plan", name], catch_exceptions=False)
    assert f"{billions:.2f} B parameters" in result.output


def test_the_slice_is_one_interval_at_full_width():
    cfg = ModelConfig.from_hf(CONFIGS / "qwen3-next-slice")
    assert cfg.layer_kinds == (GDN, GDN, GDN, GQA) and cfg.moe.num_experts == 512


@pytest.mark.parametrize("fields, kinds, mlp", [
    ({"full_attention_interval": 2, "layer_types": None}, (GDN, GQA, GDN, GQA), (MOE, DENSE, MOE, MOE)),
    ({"layer_types": ["full_attention"] + ["linear_attention"] * 3}, (GQA, GDN, GDN, GDN), (MOE, DENSE, MOE, MOE)),
    ({"mlp_only_layers": [], "decoder_sparse_step": 2}, None, (DENSE, MOE, DENSE, MOE)),
    ({"mlp_only_layers": [0, 3], "num_experts": 0}, None, (DENSE,) * 4),
])
def test_fields_that_place_the_layer_kinds(fields, kinds, mlp):
    cfg = ModelConfig.from_dict(qwen3_next_config(**fields))
    assert cfg.layer_kinds == (kinds or (GDN, GDN, GQA, GDN)) and cfg.mlp_kinds == mlp
    assert (cfg.moe is None) == (MOE not in mlp)


@pytest.mark.parametrize("overrides, message", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "RoPE type 'yarn' is not supported"),
    ({"attention_bias": True}, "'attention_bias' is true"),
    ({"layer_types": ["linear_attention", "sliding_attention"] * 2}, "'layer_types' must list 4 of"),
    ({"linear_num_value_heads": 5}, r"linear_num_value_heads \(5\) must be a multiple"),
])
def test_what_dayzero_cannot_run_is_refused(overrides, message):
    with pytest.raises(DayzeroError, match=message):
        ModelConfig.from_dict(qwen3_next_config(**overrides))


def test_tensor_parallel_shares_are_whole_heads():
    cfg = ModelConfig.from_dict(qwen3_next_config())
    local = RankPlan(2, 0).local_config(cfg)
    assert (local.gdn.num_key_heads, local.gdn.num_value_heads, local.gqa.num_heads, local.gqa.num_kv_heads) == (
        1, 3, 2, 1)
    assert (local.moe.intermediate_size, local.moe.shared_size) == (20, 28)
    with pytest.raises(DayzeroError, match=r"--tp 4 does not divide this model \(.*linear_num_key_heads = 2"):
        RankPlan(4, 0).local_config(cfg)


def fuse_experts(tensors: dict) -> None:
    """Transformers' in-memory form: gate_up_proj [E, 2I, D] (gate rows first) and down_proj [E, D, I]."""
    for layer in (0, 2, 3):
        base = f"model.layers.{layer}.mlp.experts"
        pop = [[tensors.pop(f"{base}.{e}.{w}.weight") for e in range(5)] for w in ("gate_proj", "up_proj", "down_proj")]
        tensors[f"{base}.gate_up_proj"] = torch.cat([torch.stack(pop[0]), torch.stack(pop[1])], dim=1)
        tensors[f"{base}.down_proj"] = torch.stack(pop[2])


def test_fused_expert_banks_load_the_same_model(tmp_path):
    checkpoint, _ = write_checkpoint(tmp_path / "a")
    fused = tmp_path / "b"
    fused.mkdir()
    (fused / "config.json").write_text((checkpoint / "config.json").read_text())
    tensors = load_file(checkpoint / "model.safetensors")
    fuse_experts(tensors)
    save_file(tensors, str(fused / "model.safetensors"))
    reference, other = load(checkpoint, dtype=torch.float32), load(fused, dtype=torch.float32)
    for (name, a), (_, b) in zip(reference.named_parameters(), other.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_a_random_checkpoint_of_dayzero_carries_the_checkpoint_names(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(qwen3_next_config()))
    directory = write_random_checkpoint(tmp_path, tmp_path / "ckpt", dtype=torch.float32, seed=2)
    names = set(load_file(directory / "model.safetensors"))
    assert {"model.layers.0.linear_attn.in_proj_qkvz.weight", "model.layers.0.linear_attn.conv1d.weight",
            "model.layers.2.self_attn.q_norm.weight", "model.layers.3.mlp.shared_expert_gate.weight",
            "model.layers.3.mlp.shared_expert.up_proj.weight", "model.layers.3.mlp.experts.4.down_proj.weight",
            "model.layers.1.mlp.gate_proj.weight"} <= names
    assert not any("block_sparse_moe" in n or "e_score_correction_bias" in n for n in names)
    model = load(directory, dtype=torch.float32)
    logits = model.logits(torch.randint(0, 301, (1, 9)))
    assert torch.isfinite(logits).all() and logits.std() > 0.1
