"""The engine weights file: tied tensors are stored once and come back under every name; a damaged file is a
clear error; non-contiguous weights are refused (compiled code assumes the traced strides)."""

from __future__ import annotations

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.export.engine_weights import load_engine_weights, save_engine_weights


def test_tied_tensors_are_written_once_and_load_under_both_names(tmp_path):
    embed = torch.randn(7, 5)
    weights = {"embed.weight": embed, "lm_head.weight": embed, "norm.weight": torch.rand(5) + 0.5}
    path = save_engine_weights(weights, tmp_path / "w.safetensors")
    untied = save_engine_weights({k: v.clone() for k, v in weights.items()}, tmp_path / "u.safetensors")
    assert path.stat().st_size < untied.stat().st_size
    loaded = load_engine_weights(path, "cpu")
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[k], v) for k, v in weights.items())


def test_a_truncated_file_says_to_export_again(tmp_path):
    path = save_engine_weights({"w": torch.randn(64, 64)}, tmp_path / "w.safetensors")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DayzeroError, match="export again"):
        load_engine_weights(path, "cpu")


def test_non_contiguous_weights_are_refused(tmp_path):
    with pytest.raises(DayzeroError, match="not contiguous"):
        save_engine_weights({"w": torch.randn(4, 6).t()}, tmp_path / "w.safetensors")
