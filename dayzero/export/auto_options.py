"""What `--device auto` and `--dtype auto` mean: the GPU when torch sees one, and the checkpoint's own dtype."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dayzero.errors import DayzeroError
from dayzero.export.options import DTYPES

# vLLM's dtype names (and torch's) -> dayzero's
DTYPE_NAMES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
               "float32": "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def checkpoint_dtype(checkpoint: Path) -> str:
    """config.json's torch_dtype (or dtype), at its top or in its text_config; float32 when it names none."""
    config_file = Path(checkpoint) / "config.json"
    if not config_file.is_file():
        return "float32"
    try:
        data = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise DayzeroError(f"{config_file} is not valid JSON ({err}); fix or re-download it") from err
    for fields in (data, data.get("text_config") or {}):
        for key in ("torch_dtype", "dtype"):
            if fields.get(key) is not None:
                return dtype_name(fields[key], f"{config_file}'s {key}")
    return "float32"


def dtype_name(value, where: str) -> str:
    """dayzero's name of a dtype given by vLLM's or torch's name."""
    name = DTYPE_NAMES.get(value)
    if name is None:
        raise DayzeroError(f"{where} is {value!r}; dayzero runs auto, {', '.join(DTYPES)} (or half, float)")
    return name
