"""Read-only view of a HF safetensors checkpoint directory: sharded or single-file, memory-mapped, no pickle."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from dayzero.errors import DayzeroError
from dayzero.plugins.quant.reference import mxfp4_dequantize

INDEX_FILE = "model.safetensors.index.json"
TEXT_PREFIXES = ("", "language_model.")


class CheckpointReader:
    """Maps tensor names to their files; `prefix` is detected ("" or K3's "language_model.")."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._handles: dict[str, object] = {}
        self.files = self._weight_map()
        self.prefix = self._detect_prefix()

    def _weight_map(self) -> dict[str, str]:
        index = self.directory / INDEX_FILE
        if index.exists():
            try:
                return dict(json.loads(index.read_text())["weight_map"])
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise DayzeroError(f"{index} is malformed ({err}); re-download the checkpoint's index") from None
        shards = sorted(self.directory.glob("*.safetensors"))
        if not shards:
            raise DayzeroError(f"no *.safetensors files in {self.directory}; is this a HF checkpoint directory?")
        return {name: shard.name for shard in shards for name in self._open(shard.name).keys()}

    def _detect_prefix(self) -> str:
        for prefix in TEXT_PREFIXES:
            if f"{prefix}model.embed_tokens.weight" in self.files:
                return prefix
        raise DayzeroError(f"{self.directory}: no 'model.embed_tokens.weight' (or 'language_model.' variant) in "
                           "the checkpoint; is it a Kimi-Linear / Kimi K3 checkpoint?")

    def _open(self, file: str):
        if file not in self._handles:
            path = self.directory / file
            try:
                self._handles[file] = safe_open(str(path), framework="pt", device="cpu")
            except (FileNotFoundError, SafetensorError, OSError) as err:
                raise DayzeroError(f"cannot read {path} ({err}); the checkpoint is incomplete or corrupt") from None
        return self._handles[file]

    def has(self, name: str) -> bool:
        return self.prefix + name in self.files

    def has_mxfp4(self, name: str) -> bool:
        """`*.weight` stored as MXFP4 `*.weight_packed` + `*.weight_scale`."""
        base = name.removesuffix(".weight")
        return self.has(base + ".weight_packed") and self.has(base + ".weight_scale")

    def shape(self, name: str) -> tuple[int, ...]:
        full = self.prefix + name
        return tuple(self._open(self.files[full]).get_slice(full).get_shape())

    def get(self, name: str) -> torch.Tensor:
        """The tensor `name` (without prefix); MXFP4 weights are dequantized to fp32."""
        if not self.has(name) and self.has_mxfp4(name):
            base = name.removesuffix(".weight")
            return mxfp4_dequantize(self.get(base + ".weight_packed"), self.get(base + ".weight_scale"))
        full = self.prefix + name
        try:
            return self._open(self.files[full]).get_tensor(full)
        except SafetensorError as err:
            raise DayzeroError(f"cannot read tensor {full!r} from {self.files[full]} ({err}); the file is corrupt") \
                from None
