"""Read-only view of a HF safetensors checkpoint directory: sharded or single-file, memory-mapped, no pickle."""

from __future__ import annotations

import json
import struct
from pathlib import Path, PurePosixPath

import torch
from safetensors import SafetensorError, safe_open

from dayzero.errors import DayzeroError
from dayzero.plugins.quant.reference import mxfp4_dequantize

INDEX_FILE = "model.safetensors.index.json"
EMBEDDING = "model.embed_tokens.weight"
# DeepSeek's FP8 release format: e4m3 weights with one fp32 `weight_scale_inv` per 128 x 128 block
FP8_BLOCK = 128


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
                files = dict(json.loads(index.read_text())["weight_map"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise DayzeroError(f"{index} is malformed ({err}); re-download the checkpoint's index") from None
            for file in set(files.values()):
                self._inside(file, index)
            return files
        shards = sorted(self.directory.glob("*.safetensors"))
        if not shards:
            raise DayzeroError(f"no *.safetensors files in {self.directory}; is this a HF checkpoint directory?")
        return {name: shard.name for shard in shards for name in self._open(shard.name).keys()}

    def _inside(self, file: object, index: Path) -> None:
        """Refuse, before anything is opened, a shard named outside the checkpoint directory: an absolute path, a
        `..` component, or a symlink leading out (except into the HF cache's `blobs/`, where its snapshots point)."""
        parts = PurePosixPath(file).parts if isinstance(file, str) else ()
        if not parts or file.startswith(("/", "\\")) or ":" in parts[0] or any(p in ("..", ".") for p in parts):
            raise DayzeroError(f"{index} names shard {file!r}, outside {self.directory}; a checkpoint's shards are "
                               "files in its own directory: fix or re-download the index")
        target = (self.directory / file).resolve()
        roots = [self.directory.resolve()]
        if self.directory.parent.name == "snapshots":
            roots.append((self.directory.parent.parent / "blobs").resolve())
        if not any(target.is_relative_to(root) for root in roots):
            raise DayzeroError(f"{index} names shard {file!r}, a link to {target} outside {self.directory}; copy "
                               "the shard into the checkpoint directory")

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
            safetensors_header_length(path)
            try:
                self._handles[file] = safe_open(str(path), framework="pt", device="cpu")
            except (FileNotFoundError, SafetensorError, OSError) as err:
                raise DayzeroError(f"cannot read {path} ({err}); the checkpoint is incomplete or corrupt") from None
        return self._handles[file]

    def stored_bytes(self) -> int:
        """The size of the checkpoint's safetensors files together."""
        try:
            return sum((self.directory / file).stat().st_size for file in set(self.files.values()))
        except OSError as err:
            raise DayzeroError(f"cannot read {err.filename} ({err.strerror}); the checkpoint is incomplete") from None

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
        """The tensor `name`, or its part `index` (read without the rest); MXFP4 weights and FP8 weights with block
        scales are dequantized to fp32."""
        if not self.has(name) and self.has_mxfp4(name):
            base = name.removesuffix(".weight")
            return mxfp4_dequantize(self.get(base + ".weight_packed"), self.get(base + ".weight_scale"))
        if self.has(name + "_scale_inv") and not index:
            return fp8_block_dequantize(self._read(name, ()), self._read(name + "_scale_inv", ()), self.stored(name))
        return self._read(name, index)

    def _read(self, name: str, index: tuple[int | slice, ...]) -> torch.Tensor:
        full = self.stored(name)
        try:
            handle = self._open(self.files[full])
            return handle.get_slice(full)[index] if index else handle.get_tensor(full)
        except SafetensorError as err:
            raise DayzeroError(f"cannot read tensor {full!r} from {self.files[full]} ({err}); the file is corrupt") \
                from None


def safetensors_header_length(path: Path) -> int:
    """The length field at the start of a safetensors file, refused (naming the file) when the file cannot hold it:
    nothing is read or allocated for a header the file does not contain."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
        size = path.stat().st_size
    except OSError as err:
        raise DayzeroError(f"cannot read {path} ({err.strerror}); the checkpoint is incomplete or corrupt") from None
    length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else None
    if length is None or length > size - 8:
        raise DayzeroError(f"{path} is not a safetensors file: its header length field ({length}) exceeds the file "
                           f"({size} bytes); the file is truncated or corrupt, re-download it")
    return length


def _renamed(name: str, layout: tuple[str, str]) -> str:
    old, new = layout
    return new + name.removeprefix(old) if name.startswith(old) else name


def fp8_block_dequantize(weight: torch.Tensor, scale_inv: torch.Tensor, name: str) -> torch.Tensor:
    """weight e4m3 [R, C] times scale_inv fp32 [ceil(R / 128), ceil(C / 128)], one scale a block -> fp32."""
    rows, cols = weight.shape
    if tuple(scale_inv.shape) != (-(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)):
        raise DayzeroError(f"{name!r} [{rows}, {cols}] has block scales of shape {list(scale_inv.shape)}, not one per "
                           f"{FP8_BLOCK} x {FP8_BLOCK} block; dequantize the checkpoint to bf16 first")
    scale = scale_inv.float().repeat_interleave(FP8_BLOCK, 0)[:rows].repeat_interleave(FP8_BLOCK, 1)[:, :cols]
    return weight.float() * scale
