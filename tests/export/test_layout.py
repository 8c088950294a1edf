"""Weight pre-layout keeps the model's logits (prefill and cached decode) and really changes the weights."""

from __future__ import annotations

import pytest
import torch

from dayzero.export.layout import lay_out
from dayzero.model.mlp import GatedMLP
from tests.helpers import random_model, rel_err, tiny_config_dict
from tests.model.test_cache_consistency import decode_logits

VARIANTS = {"tiny-hybrid": {}, "kimi-linear-gate": {"use_full_rank_gate": False, "gate_lower_bound": None}}


@pytest.mark.parametrize("variant", VARIANTS)
def test_laid_out_model_matches_reference(variant):
    overrides = VARIANTS[variant]
    if overrides:
        base = tiny_config_dict()["text_config"]["linear_attn_config"]
        overrides = {"linear_attn_config": {**base, **overrides}}
    model = random_model(tiny_config_dict(**overrides))
    ids = torch.randint(0, 256, (2, 40))
    full, decoded = model.logits(ids), decode_logits(model, ids, prefix=33)
    counts = lay_out(model)
    kinds = model.config.layer_kinds
    low_rank_gates = 0 if model.config.kda.full_rank_output_gate else kinds.count("kda")
    assert counts == {"kda_fused_input_projection": kinds.count("kda"), "kda_stacked_convs": kinds.count("kda"),
                      "kda_stacked_gate_up": low_rank_gates,
                      "gdn_fused_input_projection": 0,
                      "mla_absorbed_weights": kinds.count("mla"), "attnres_folded_norms": 2 * len(kinds) + 1,
                      "mlp_fused_gate_up": sum(isinstance(m, GatedMLP) for m in model.modules())}
    kda = next(m for m in model.modules() if hasattr(m, "in_proj"))
    assert not hasattr(kda, "q_proj") and kda.in_proj.weight.shape[0] == sum(kda.in_proj_sizes)
    assert not hasattr(kda, "q_conv1d") and kda.qkv_conv1d.weight.shape == (3, kda.in_proj_sizes[0], 4)
    mlp = next(m for m in model.modules() if isinstance(m, GatedMLP))
    assert not hasattr(mlp, "gate_proj") and mlp.gate_up_proj.weight.shape[0] == 2 * mlp.down_proj.weight.shape[1]
    assert rel_err(model.logits(ids), full) < 1e-5
    assert rel_err(decode_logits(model, ids, prefix=33), decoded) < 1e-5
    assert lay_out(model) == dict.fromkeys(counts, 0) | {"attnres_folded_norms": counts["attnres_folded_norms"]}
