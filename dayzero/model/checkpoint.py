"""Read-only view of a HF safetensors checkpoint directory: sharded or single-file, memory-mapped, no pickle."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from dayzero.errors import DayzeroError
from dayzero.plugins.quant.reference import mxfp4_dequantize

INDEX_FILE = "model.safetensors.index.json"
EMBEDDING = "model.embed_tokens.weight"


class CheckpointReader:
    """Maps tensor names to their files. Names are given as dayzero spells them; `layouts` are the (prefix, stored
    prefix) renames a checkpoint may use (K3's `language_model.`, ...), and the first under which the embedding is
    stored is the checkpoint's."""

    def __init__(self, directory: str | Path, layouts: tuple[tuple[str, str], ...] = (("", ""),)):
        self.directory = Path(directory)
        self._handles: dict[str, object] = {}
        self.files = self._weight_map()
        self.layout = self._detect_layout(layouts)

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

    def _detect_layout(self, layouts: tuple[tuple[str, str], ...]) -> tuple[str, str]:
        for layout in layouts:
            if _renamed(EMBEDDING, layout) in self.files:
                return layout
        spelled = " or ".join(repr(_renamed(EMBEDDING, layout)) for layout in layouts)
        raise DayzeroError(f"{self.directory}: no {spelled} in the checkpoint; is it a checkpoint of the architecture "
                           "config.json names?")

    def stored(self, name: str) -> str:
        """The name as the checkpoint spells it."""
        return _renamed(name, self.layout)

    def _open(self, file: str):
        if file not in self._handles:
            path = self.directory / file
            try:
                self._handles[file] = safe_open(str(path), framework="pt", device="cpu")
            except (FileNotFoundError, SafetensorError, OSError) as err:
                raise DayzeroError(f"cannot read {path} ({err}); the checkpoint is incomplete or corrupt") from None
        return self._handles[file]

    def has(self, name: str) -> bool:
        return self.stored(name) in self.files

    def has_mxfp4(self, name: str) -> bool:
        """`*.weight` stored as MXFP4 `*.weight_packed` + `*.weight_scale`."""
        base = name.removesuffix(".weight")
        return self.has(base + ".weight_packed") and self.has(base + ".weight_scale")

    def shape(self, name: str) -> tuple[int, ...]:
        full = self.stored(name)
        return tuple(self._open(self.files[full]).get_slice(full).get_shape())

    def get(self, name: str, index: tuple[int | slice, ...] = ()) -> torch.Tensor:
        """The tensor `name`, or its part `index` (read without the rest); MXFP4 weights are dequantized to fp32."""
        if not self.has(name) and self.has_mxfp4(name):
            base = name.removesuffix(".weight")
            return mxfp4_dequantize(self.get(base + ".weight_packed"), self.get(base + ".weight_scale"))
        full = self.stored(name)
        try:
            handle = self._open(self.files[full])
            return handle.get_slice(full)[index] if index else handle.get_tensor(full)
        except SafetensorError as err:
            raise DayzeroError(f"cannot read tensor {full!r} from {self.files[full]} ({err}); the file is corrupt") \
                from None


def _renamed(name: str, layout: tuple[str, str]) -> str:
    old, new = layout
    return new + name.removeprefix(old) if name.startswith(old) else name
