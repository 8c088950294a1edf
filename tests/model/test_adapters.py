"""Architecture adapters: one per file, found by listing the folder; the DeepSeek-V3.2 family's config fields
(GLM's layers that share an earlier layer's Top-K) and tensor names (per-expert or fused experts, multimodal
prefixes, FP8 block-scaled weights, multi-token-prediction layers); what is refused."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from dayzero.cli import cli
from dayzero.errors import DayzeroError
from dayzero.model import load
from dayzero.model.adapters import ADAPTERS
from dayzero.model.caches import allocate_caches, cache_bytes
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.config import MLA, MOE, ModelConfig
from tests.helpers import ROOT

ADAPTER_DIR = ROOT / "dayzero" / "model" / "adapters"
CONFIGS = ROOT / "dayzero" / "configs"


def deepseek_config(**overrides) -> dict:
    """A small DeepSeek-V3.2 config.json: 3 layers (a dense one, two MoE), YaRN, one MTP layer; the dense MLP is two
    FP8 blocks tall."""
    data = json.loads((CONFIGS / "deepseek-v3.2" / "config.json").read_text())
    data.update(vocab_size=97, hidden_size=40, intermediate_size=136, moe_intermediate_size=24, num_hidden_layers=3,
                first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=20, kv_lora_rank=32,
                qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2,
                n_group=2, topk_group=1, index_n_heads=4, index_head_dim=16, index_topk=8)
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_every_adapter_file_is_registered_under_its_model_type():
    files = {p.stem for p in ADAPTER_DIR.glob("*.py")} - {"__init__", "base", "sections"}
    assert set(ADAPTERS) == files == {"kimi_linear", "kimi_k3", "deepseek_v32", "glm_moe_dsa", "glm5_next",
                                      "qwen3_next"}


def test_released_deepseek_v32_layout():
    cfg = ModelConfig.from_hf(CONFIGS / "deepseek-v3.2")
    assert cfg.layer_kinds == (MLA,) * 61 and cfg.mlp_kinds == ("dense",) * 3 + (MOE,) * 58 and cfg.kda is None
    mla, indexer, moe = cfg.mla, cfg.indexer, cfg.moe
    assert not mla.use_nope and mla.rope_interleaved and mla.q_lora_rank == 1536
    assert (indexer.num_heads, indexer.head_dim, indexer.topk, indexer.rope_dim) == (64, 128, 2048, 64)
    assert not indexer.rope_interleaved
    assert (moe.num_experts, moe.top_k, moe.num_groups, moe.topk_group, moe.scaling) == (256, 8, 8, 4, 2.5)
    assert mla.rope_scaling.cos_sin_factor == 1.0
    assert math.isclose(mla.softmax_scale, 192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2)
    assert cfg.num_mtp_layers == 1 and cfg.rms_norm_eps == 1e-6


def test_released_glm5_layout():
    cfg = ModelConfig.from_hf(CONFIGS / "glm-5")
    assert cfg.layer_kinds == (MLA,) * 78 and cfg.mlp_kinds.count(MOE) == 75
    assert cfg.indexer.rope_interleaved and cfg.mla.rope_interleaved and cfg.mla.rope_scaling is None
    assert cfg.mla.rope_theta == 1e6 and cfg.mla.qk_head_dim == 256 and cfg.eos_token_id == 154820


@pytest.mark.parametrize("name, billions", [("deepseek-v3.2", 671.88), ("glm-5", 743.91),
                                            ("deepseek-v3.2-slice", 37.01)])
def test_plan_of_the_released_sizes(name, billions):
    result = CliRunner().invoke(cli, ["plan", name, "--tp", "8", "--ep", "8"], catch_exceptions=False)
    assert f"{billions:.2f} B parameters" in result.output


def test_the_slice_fits_one_gpu():
    cfg = ModelConfig.from_hf(CONFIGS / "deepseek-v3.2-slice")
    assert cfg.mlp_kinds == ("dense", MOE, MOE, MOE) and cfg.moe.num_experts == 256


@pytest.mark.parametrize("overrides, message", [
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "RoPE type 'dynamic' is not supported"),
    ({"attention_bias": True}, "'attention_bias' is true"),
    ({"layer_types": ["linear_attention"] * 3}, "'layer_types' must list 3 of"),
    ({"index_topk": None}, "'index_topk' is missing"),
])
def test_what_dayzero_cannot_run_is_refused(overrides, message):
    with pytest.raises(DayzeroError, match=message):
        ModelConfig.from_dict(deepseek_config(**overrides))


@pytest.mark.parametrize("fields, shared", [
    ({"indexer_types": ["full", "shared", "full"]}, (1,)),
    ({"index_topk_pattern": "FSS"}, (1, 2)),
    ({"index_topk_freq": 2, "index_skip_topk_offset": 1}, (1,)),
    ({}, ()),
])
def test_glm_layers_that_share_an_earlier_top_k(fields, shared):
    cfg = ModelConfig.from_dict(deepseek_config(model_type="glm_moe_dsa", **fields))
    assert cfg.index_shared_layers == shared
    assert [cfg.owns_indexer(layer) for layer in range(3)] == [layer not in shared for layer in range(3)]
    caches = allocate_caches(cfg, 1, 1, torch.float32, "meta")
    assert [c.index_k is not None for c in caches] == [layer not in shared for layer in range(3)]
    assert cache_bytes(cfg, torch.float32).per_token_index == 16 * 4 * (3 - len(shared))


@pytest.mark.parametrize("fields, message", [
    ({"indexer_types": ["shared", "full", "full"]}, "none comes before it"),
    ({"indexer_types": ["full", "sometimes", "full"]}, "must give 'full' or 'shared'"),
])
def test_glm_sharing_that_cannot_run_is_refused(fields, message):
    with pytest.raises(DayzeroError, match=message):
        ModelConfig.from_dict(deepseek_config(model_type="glm_moe_dsa", **fields))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("deepseek")
    (root / "config.json").write_text(json.dumps(deepseek_config()))
    return write_random_checkpoint(root, root / "ckpt", dtype=torch.float32, seed=1)


def rewritten(checkpoint: Path, out: Path, edit) -> Path:
    out.mkdir()
    (out / "config.json").write_text((checkpoint / "config.json").read_text())
    tensors = load_file(checkpoint / "model.safetensors")
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def fuse_experts(tensors: dict) -> None:
    """Transformers' in-memory form: gate_up_proj [E, 2I, D] (gate rows first) and down_proj [E, D, I]."""
    for layer in (1, 2):
        base = f"model.layers.{layer}.mlp.experts"
        pop = [[tensors.pop(f"{base}.{e}.{w}.weight") for e in range(8)] for w in ("gate_proj", "up_proj", "down_proj")]
        tensors[f"{base}.gate_up_proj"] = torch.cat([torch.stack(pop[0]), torch.stack(pop[1])], dim=1)
        tensors[f"{base}.down_proj"] = torch.stack(pop[2])


def under_language_model(tensors: dict) -> None:
    for name in [n for n in tensors if n.startswith("model.")]:
        tensors["model.language_model." + name.removeprefix("model.")] = tensors.pop(name)


def with_mtp_layer(tensors: dict) -> None:
    tensors["model.layers.3.eh_proj.weight"] = torch.zeros(40, 80)


def test_checkpoint_names_are_deepseeks(checkpoint):
    names = set(load_file(checkpoint / "model.safetensors"))
    assert {"model.layers.1.mlp.experts.7.up_proj.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
            "model.layers.2.mlp.shared_experts.down_proj.weight", "model.layers.0.mlp.gate_proj.weight",
            "model.layers.0.self_attn.indexer.k_norm.bias"} <= names
    assert not any("block_sparse_moe" in n for n in names)


@pytest.mark.parametrize("edit", [fuse_experts, under_language_model, with_mtp_layer])
def test_other_layouts_load_the_same_model(checkpoint, tmp_path, edit):
    reference = load(checkpoint, dtype=torch.float32)
    other = load(rewritten(checkpoint, tmp_path / "c", edit), dtype=torch.float32)
    for (name, a), (_, b) in zip(reference.named_parameters(), other.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_mtp_layers_are_named_in_the_load_log(checkpoint, caplog):
    with caplog.at_level(logging.INFO, logger="dayzero.model.weights"):
        load(checkpoint, dtype=torch.float32)
    assert "1 multi-token-prediction layer(s) after layer 2 are not loaded" in caplog.text


def test_fp8_weights_with_block_scales_are_dequantized(checkpoint, tmp_path):
    """DeepSeek's release format: e4m3 weights, one fp32 `weight_scale_inv` per 128 x 128 block."""
    name = "model.layers.0.mlp.gate_proj.weight"
    scale = torch.tensor([[0.5], [4.0]])

    def to_fp8(tensors):
        weight = tensors.pop(name)
        tensors[name] = (weight / scale.repeat_interleave(128, 0)[:136]).to(torch.float8_e4m3fn)
        tensors[name + "_scale_inv"] = scale

    other = rewritten(checkpoint, tmp_path / "c", to_fp8)
    stored = load_file(other / "model.safetensors")[name].float() * scale.repeat_interleave(128, 0)[:136]
    model = load(other, dtype=torch.float32)
    assert torch.equal(model.model.layers[0].mlp.gate_proj.weight, stored)
    reference = load(checkpoint, dtype=torch.float32).model.layers[0].mlp.gate_proj.weight
    assert 0 < (stored - reference).abs().max() < 0.1 * reference.abs().max()


def test_a_fused_bank_of_another_width_names_its_shape(checkpoint, tmp_path):
    def wider(tensors):
        fuse_experts(tensors)
        bank = tensors["model.layers.1.mlp.experts.gate_up_proj"]
        tensors["model.layers.1.mlp.experts.gate_up_proj"] = torch.cat([bank, bank], dim=1)

    with pytest.raises(DayzeroError, match=r"gate_up_proj' .* has shape \[8, 96, 40\], but config.json implies "
                                           r"\[8, 48, 40\]"):
        load(rewritten(checkpoint, tmp_path / "c", wider), dtype=torch.float32)


@pytest.mark.parametrize("model_type", ["deepseek_v32", "glm_moe_dsa"])
@pytest.mark.parametrize("name", ["indexed_attention", "deepseek_sparse_attention"])
def test_the_layer_types_mirror_of_every_transformers_release_is_read(model_type, name):
    """Older transformers releases write deepseek_sparse_attention where newer ones write indexed_attention."""
    cfg = ModelConfig.from_dict(deepseek_config(model_type=model_type, layer_types=[name] * 3))
    assert cfg.layer_kinds == (MLA,) * 3


def test_released_glm5_3_flash_layout():
    cfg = ModelConfig.from_hf(CONFIGS / "glm-5.3-flash")
    assert cfg.layer_kinds.count("kda") == 34 and cfg.layer_kinds[3::4] == (MLA,) * 11
    assert cfg.mlp_kinds == ("dense",) * 3 + (MOE,) * 42 and cfg.index_shared_layers == ()
    mla, indexer, hc = cfg.mla, cfg.indexer, cfg.hyper_connections
    assert (mla.qk_head_dim, mla.q_lora_rank, mla.latent_dim, mla.norm_eps) == (256, 1536, 512, 1e-5)
    assert (indexer.num_heads, indexer.head_dim, indexer.topk, indexer.kpool, indexer.picks) == (32, 128, 2048, 16,
                                                                                               2063)
    assert (cfg.moe.num_experts, cfg.moe.top_k, cfg.moe.num_shared_experts) == (288, 8, 1)
    assert (hc.mult, hc.sinkhorn_iters, hc.eps) == (4, 20, 1e-6) and cfg.kda.gate_lower_bound == -5.0
    assert cfg.hidden_act == "clamped_silu" and cfg.act_params == {"limit": 10.0}
    assert len(cfg.ignored_parts) == 1 and "vision tower" in cfg.ignored_parts[0]
    # a pooled page: 4 keys of 128 (16 bytes a token in bf16), and a window of 15 rows a sequence
    assert cache_bytes(cfg, torch.bfloat16).per_token_index == 11 * 16
    assert cache_bytes(cfg, torch.bfloat16).per_slot_state == 34 * 64 * 128 * 128 * 4 + 11 * 15 * 256 * 2


def glm5_config(**text) -> dict:
    data = json.loads((CONFIGS / "glm-5.3-flash" / "config.json").read_text())
    layers = dict(num_hidden_layers=4, layer_types=["linear_attention", "indexed_attention", "indexed_attention",
                                                    "linear_attention"],
                  indexer_types=["full", "full", "shared", "full"],
                  mlp_layer_types=["dense", "sparse", "sparse", "dense"])
    data["text_config"].update({**layers, **text})
    return data


def test_glm5_3_flash_defaults_and_shared_layers():
    cfg = ModelConfig.from_dict(glm5_config())
    assert cfg.index_shared_layers == (2,) and [cfg.owns_indexer(layer) for layer in range(4)] == [False, True,
                                                                                                    False, False]
    text = glm5_config()["text_config"]
    for field in ("layer_types", "mlp_layer_types", "indexer_types", "hc_mult", "index_kpool", "linear_lower_bound"):
        text.pop(field)
    cfg = ModelConfig.from_dict({**text, "model_type": "glm5_next"})
    assert cfg.layer_kinds == ("kda", "kda", "kda", MLA) and cfg.mlp_kinds == ("dense",) * 3 + (MOE,)
    assert cfg.hyper_connections.mult == 4 and cfg.indexer.kpool == 16 and cfg.kda.gate_lower_bound == -5.0
    assert cfg.ignored_parts == ()


@pytest.mark.parametrize("text, message", [
    ({"index_kpool_always_select_tail": False}, "'index_kpool_always_select_tail' is false"),
    ({"indexer_types": ["full", "shared", "full", "full"]}, "layer 1 reuses the previous layer's Top-K"),
    ({"qk_rope_head_dim": 64}, "'qk_rope_head_dim' must be 0"),
    ({"index_topk": 2040}, "must be a multiple of index_kpool"),
    ({"layer_types": ["linear_attention"] * 3 + ["sliding"]}, "'layer_types' must give one of"),
    ({"mlp_layer_types": ["dense"] * 3}, "'mlp_layer_types' must give 'dense' or 'sparse'"),
])
def test_glm5_3_flash_what_cannot_run_is_refused(text, message):
    with pytest.raises(DayzeroError, match=message):
        ModelConfig.from_dict(glm5_config(**text))
