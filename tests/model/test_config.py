from __future__ import annotations

import json

import pytest

from dayzero.errors import DayzeroError
from dayzero.model.config import KDA, MLA, MOE, ModelConfig
from tests.helpers import ROOT, tiny_config_dict


@pytest.mark.parametrize("name", ["tiny-hybrid", "kimi-linear-48b-a3b", "kimi-k3.1", "h200-slice", "deepseek-v3.2",
                                  "deepseek-v3.2-slice", "glm-5", "qwen3-next-80b-a3b", "qwen3-next-slice"])
def test_bundled_configs_parse(name):
    cfg = ModelConfig.from_hf(ROOT / "dayzero" / "configs" / name)
    assert cfg.num_layers == len(cfg.layer_kinds) == len(cfg.mlp_kinds)


def test_kimi_linear_layout():
    cfg = ModelConfig.from_hf(ROOT / "dayzero" / "configs" / "kimi-linear-48b-a3b")
    assert [i for i, k in enumerate(cfg.layer_kinds) if k == MLA] == [3, 7, 11, 15, 19, 23, 26]
    assert cfg.mlp_kinds[0] == "dense" and set(cfg.mlp_kinds[1:]) == {MOE}
    assert cfg.kda.gate_lower_bound is None and not cfg.kda.full_rank_output_gate
    assert cfg.indexer is None and cfg.attn_res_block_size is None and cfg.mla.q_lora_rank is None


def test_kimi_k31_layout():
    cfg = ModelConfig.from_hf(ROOT / "dayzero" / "configs" / "kimi-k3.1")
    assert cfg.layer_kinds.count(KDA) == 69 and cfg.layer_kinds.count(MLA) == 24
    assert cfg.indexer.topk == 2048 and cfg.indexer.num_heads == 32 and cfg.indexer.head_dim == 128
    assert cfg.moe.latent_size == 3584 and cfg.moe.num_experts == 896 and cfg.moe.top_k == 16
    assert cfg.kda.gate_lower_bound == -5.0 and cfg.kda.full_rank_output_gate
    assert cfg.hidden_act == "situ" and cfg.act_params == {"beta": 4.0, "linear_beta": 25.0}


def test_dsa_config_block_and_aliases():
    data = tiny_config_dict(index_topk=None, index_n_heads=None, index_head_dim=None,
                            dsa_config={"index_n_heads": 4, "index_head_dim": 64, "index_topk": 32},
                            num_experts=None, num_local_experts=8, num_experts_per_token=None, num_experts_per_tok=2)
    cfg = ModelConfig.from_dict(data)
    assert (cfg.indexer.num_heads, cfg.indexer.head_dim, cfg.indexer.topk) == (4, 64, 32)
    assert cfg.moe.num_experts == 8 and cfg.moe.top_k == 2


def test_top_level_text_fields_and_ignored_extras():
    data = tiny_config_dict()["text_config"]
    data.update(model_type="kimi_linear", initializer_range=0.02, attention_dropout=0.1, use_cache=True,
                layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
                mlp_layer_types=["dense"] + ["sparse"] * 5)
    cfg = ModelConfig.from_dict(data)
    assert cfg.layer_kinds == (KDA, KDA, MLA, KDA, KDA, MLA)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hidden_size": None}, "'hidden_size' is missing"),
        ({"hidden_size": "big"}, "'hidden_size' must be an integer"),
        ({"hidden_act": "gelu"}, "'hidden_act' must be one of"),
        ({"layer_types": ["full_attention"] * 6}, "'layer_types' disagrees"),
        ({"mlp_layer_types": ["sparse"] * 6}, "'mlp_layer_types' disagrees"),
        ({"linear_num_heads": 7}, "'linear_num_heads' (7) disagrees"),
        ({"num_experts_per_token": 9}, "exceeds num_experts"),
        ({"linear_attn_config": {"head_dim": 32, "num_heads": 2, "kda_layers": [1, 2, 9], "full_attn_layers": [3]}},
         "outside 1..num_hidden_layers"),
        ({"linear_attn_config": {"head_dim": 32, "num_heads": 2, "kda_layers": [1, 2], "full_attn_layers": [2]}},
         "in both kda_layers and full_attn_layers"),
        ({"rope_scaling": {"type": "yarn", "factor": 4}}, "rope_scaling"),
    ],
)
def test_bad_fields_name_the_field(overrides, message):
    with pytest.raises(DayzeroError) as err:
        ModelConfig.from_dict(tiny_config_dict(**overrides))
    assert message in str(err.value)


def test_unknown_model_type_names_the_supported_ones():
    with pytest.raises(DayzeroError, match="'model_type' must be one of") as err:
        ModelConfig.from_dict({"model_type": "llama"})
    for model_type in ("kimi_linear", "kimi_k3", "deepseek_v32", "glm_moe_dsa"):
        assert repr(model_type) in str(err.value)


def test_malformed_json_names_file_and_position(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "kimi_linear",\n "hidden_size": 12,,}')
    with pytest.raises(DayzeroError, match=r"config.json is not valid JSON .* line 2"):
        ModelConfig.from_hf(tmp_path)


def test_missing_config_file(tmp_path):
    with pytest.raises(DayzeroError, match="no config.json"):
        ModelConfig.from_hf(tmp_path)


def test_config_round_trips_through_json(tmp_path):
    data = tiny_config_dict()
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert ModelConfig.from_hf(tmp_path) == ModelConfig.from_dict(data)


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 10**7), ("hidden_size", 10**9), ("vocab_size", 10**10),
                                          ("num_experts", 10**8), ("max_position_embeddings", 10**15),
                                          ("moe_intermediate_size", 10**12)])
def test_absurd_sizes_are_refused_by_name(field, value):
    with pytest.raises(DayzeroError, match=rf"field '{field}' must be an integer from 1 to \d+, got {value}"):
        ModelConfig.from_dict(tiny_config_dict(**{field: value}))


def test_every_layer_must_be_listed():
    with pytest.raises(DayzeroError, match=r"layers \[7, 8\] of num_hidden_layers \(8\) are in neither kda_layers "
                                           "nor full_attn_layers"):
        ModelConfig.from_dict(tiny_config_dict(num_hidden_layers=8))
