"""The engine contract between export and the runtime (ARCHITECTURE.md, "The step functions").

An engine is anything with the two step functions over explicit inputs:

    prefill(input_ids[T], meta, caches) -> logits[N, vocab]        (each sequence's last new token)
    decode(input_ids[B, 1+d], meta, caches) -> logits[B, 1+d, vocab]

`caches` is a flat list of tensors, mutated in place, described by `EngineManifest.cache_tensors`: each tensor
is indexed by page (latent KV / index keys, 64 tokens a page) or by state slot (KDA recurrent state / conv
windows). The runtime allocates and resets them from the manifest alone, never from model code. `meta` is a
`StepMeta` (block_table, slot_mapping, state_slots, num_accepted, positions, cu_seqlens) built by the runtime.

`EagerEngine` serves the contract with the reference model (development, debugging, CPU machines without a
compiler); the AOTInductor engine (aoti.py) serves it with compiled packages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

import torch

from dayzero.model.caches import CacheFormat, LayerCache, allocate_caches
from dayzero.model.config import KDA
from dayzero.model.hybrid import HybridModel
from dayzero.model.scoring import ScoredRows
from dayzero.model.step import KDACache, MLACache, StepMeta
from dayzero.plugins.paged_cache import PAGE_SIZE

__all__ = ["CacheTensorSpec", "EagerEngine", "EngineManifest", "SplitEngine", "StepEngine", "StepMeta",
           "allocate_flat_caches"]

PAGE, SLOT = "page", "slot"
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.bfloat16, torch.float16, torch.uint8)}


@dataclass(frozen=True)
class CacheTensorSpec:
    """One cache tensor: shape [num_units, *unit_shape] where a unit is a page or a state slot."""

    layer: int
    name: str  # latent_kv | index_k | state | conv
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


class StepEngine(Protocol):
    manifest: EngineManifest

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor: ...

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor: ...


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


def cache_tensor_specs(model: HybridModel, fmt: CacheFormat) -> tuple[CacheTensorSpec, ...]:
    """The model's caches flattened layer by layer: MLA (latent_kv[, index_k]) per page, KDA (state, conv) per slot."""
    specs = []
    for layer, cache in enumerate(allocate_caches(model.config, 1, 1, model.dtype, "meta", fmt)):
        unit = SLOT if isinstance(cache, KDACache) else PAGE
        for name, tensor in _named_tensors(cache):
            dtype = str(tensor.dtype).removeprefix("torch.")
            specs.append(CacheTensorSpec(layer, name, unit, tuple(tensor.shape[1:]), dtype))
    return tuple(specs)


def _named_tensors(cache: LayerCache) -> list[tuple[str, torch.Tensor]]:
    if isinstance(cache, KDACache):
        return [("state", cache.state), ("conv", cache.conv)]
    return [(name, t) for name, t in (("latent_kv", cache.latent_kv), ("index_k", cache.index_k)) if t is not None]


def layer_caches(model: HybridModel, flat: list[torch.Tensor]) -> list[LayerCache]:
    """Regroup the flat cache list into the model's per-layer cache objects (views, no copies)."""
    caches, i = [], 0
    for kind in model.config.layer_kinds:
        if kind == KDA:
            caches.append(KDACache(state=flat[i], conv=flat[i + 1]))
            i += 2
        elif model.config.indexer is not None:
            caches.append(MLACache(latent_kv=flat[i], index_k=flat[i + 1]))
            i += 2
        else:
            caches.append(MLACache(latent_kv=flat[i], index_k=None))
            i += 1
    return caches


def eager_manifest(model: HybridModel, fmt: CacheFormat, max_batch: int, max_len: int | None = None,
                   num_draft: int = 0) -> EngineManifest:
    cfg = model.config
    return EngineManifest(
        backend="eager", device=str(model.device), dtype=str(model.dtype).removeprefix("torch."),
        vocab_size=cfg.vocab_size, max_len=max_len or cfg.max_position_embeddings, max_batch=max_batch,
        num_draft=num_draft, cache_format=asdict(fmt), cache_tensors=cache_tensor_specs(model, fmt),
    )


class EagerEngine:
    """The reference model behind the engine contract."""

    def __init__(self, model: HybridModel, manifest: EngineManifest):
        self.model = model.eval()
        self.manifest = manifest

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self.model.prefill(input_ids, meta, layer_caches(self.model, caches))

    @torch.inference_mode()
    def prefill_scored(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor],
                       targets: torch.Tensor, num_top: int) -> tuple[torch.Tensor, ScoredRows]:
        """prefill, and the log-probabilities of the prompt's own next tokens (HybridModel.prefill_scored); the
        compiled engines have no such entry point."""
        return self.model.prefill_scored(input_ids, meta, layer_caches(self.model, caches), targets, num_top)

    @torch.inference_mode()
    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self.model.decode(input_ids, meta, layer_caches(self.model, caches))


class SplitEngine:
    """One engine's prefill with another's decode over the same caches (the ONNX graph carries decode only)."""

    def __init__(self, manifest: EngineManifest, prefill: StepEngine, decode: StepEngine):
        self.manifest = manifest
        self._prefill, self._decode = prefill, decode

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._prefill.prefill(input_ids, meta, caches)

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._decode.decode(input_ids, meta, caches)
