"""What the runtime knows of an engine: its shapes, dtypes and cache tensors (docs/architecture.md, "The engine
contract").

`caches` is a flat list of tensors, mutated in place, described by `EngineManifest.cache_tensors`: each tensor is
indexed by page (latent KV / index keys / GQA K and V, 64 tokens a page) or by state slot (KDA recurrent state /
conv windows).
The runtime allocates and resets them from the manifest alone, never from model code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from dayzero.plugins.paged_cache import PAGE_SIZE

PAGE, SLOT = "page", "slot"
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.bfloat16, torch.float16, torch.uint8)}


@dataclass(frozen=True)
class CacheTensorSpec:
    """One cache tensor: shape [num_units, *unit_shape] where a unit is a page or a state slot."""

    layer: int
    name: str  # latent_kv | index_k | index_window | kv | state | conv
    unit: str  # PAGE | SLOT
    unit_shape: tuple[int, ...]
    dtype: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def unit_bytes(self) -> int:
        return torch.Size(self.unit_shape).numel() * torch.empty((), dtype=self.torch_dtype).element_size()


@dataclass(frozen=True)
class EngineManifest:
    """What the runtime needs to know about an engine, JSON-serializable (stored in the compilation cache)."""

    backend: str  # eager | aoti | onnx
    device: str
    dtype: str
    vocab_size: int
    max_len: int  # longest sequence (prompt + generated) the engine accepts
    max_batch: int
    num_draft: int  # decode steps carry 1 + num_draft tokens per sequence
    cache_format: dict  # CacheFormat fields
    cache_tensors: tuple[CacheTensorSpec, ...]
    page_size: int = PAGE_SIZE
    extra: dict = field(default_factory=dict)

    def unit_bytes(self, unit: str) -> int:
        """Bytes of one page (all layers' paged caches) or one state slot (all layers' KDA state)."""
        return sum(t.unit_bytes for t in self.cache_tensors if t.unit == unit)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> EngineManifest:
        tensors = tuple(CacheTensorSpec(**{**t, "unit_shape": tuple(t["unit_shape"])}) for t in data["cache_tensors"])
        return cls(**{**data, "cache_tensors": tensors})


def allocate_flat_caches(manifest: EngineManifest, num_pages: int, num_slots: int,
                         device: torch.device | str | None = None) -> list[torch.Tensor]:
    """Zeroed cache tensors in manifest order (a zero state slot is the state of an empty sequence)."""
    device = device or manifest.device
    counts = {PAGE: num_pages, SLOT: num_slots}
    return [torch.zeros(counts[t.unit], *t.unit_shape, dtype=t.torch_dtype, device=device)
            for t in manifest.cache_tensors]


def slot_tensors(manifest: EngineManifest, caches: list[torch.Tensor]) -> list[torch.Tensor]:
    """The caches indexed by state slot (KDA state and conv windows), in manifest order."""
    return [tensor for tensor, spec in zip(caches, manifest.cache_tensors) if spec.unit == SLOT]
