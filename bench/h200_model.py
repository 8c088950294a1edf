"""An h200-slice model with random weights built directly on the GPU (no checkpoint on disk), optionally with fewer
layers (the first k of its KDA / MLA pattern), for the export and runtime benchmarks."""

from __future__ import annotations

import json

import torch

from dayzero.model.config import ModelConfig
from dayzero.model.random_init import init_random_
from dayzero.model.weights import build_empty
from dayzero.paths import bundled_config


def h200_slice_config(num_layers: int | None = None) -> ModelConfig:
    data = json.loads(bundled_config("h200-slice").read_text())
    text = data["text_config"]
    if num_layers is not None:
        attn = text["linear_attn_config"]
        pattern = ["kda" if i + 1 in attn["kda_layers"] else "mla" for i in range(text["num_hidden_layers"])]
        # keep both layer kinds: the first KDA layers, then the first MLA layer
        kinds = [k for k in pattern if k == "kda"][: max(1, num_layers - 1)] + ["mla"]
        attn["kda_layers"] = [i + 1 for i, k in enumerate(kinds) if k == "kda"]
        attn["full_attn_layers"] = [i + 1 for i, k in enumerate(kinds) if k == "mla"]
        text["num_hidden_layers"] = len(kinds)
        for key in ("layer_types", "mlp_layer_types"):
            text.pop(key, None)
    return ModelConfig.from_dict(data)


def h200_slice_model(num_layers: int | None = None, seed: int = 0):
    cfg = h200_slice_config(num_layers)
    model = build_empty(cfg, torch.bfloat16, "cuda")
    init_random_(model, seed)
    return model.eval()
