"""The reference model behind the engine contract (development, debugging, CPU machines without a compiler), and
the manifest of a model's caches that every engine built from it shares."""

from __future__ import annotations

from dataclasses import asdict

import torch

from dayzero.contract import PAGE, SLOT, CacheTensorSpec, EngineManifest, ScoredRows, StepEngine, StepMeta
from dayzero.model.caches import CacheFormat, LayerCache, allocate_caches
from dayzero.model.config import GDN, GQA, KDA, ModelConfig
from dayzero.model.hybrid import HybridModel
from dayzero.model.step import GQACache, KDACache, MLACache


def cache_tensor_specs(cfg: ModelConfig, dtype: torch.dtype, fmt: CacheFormat) -> tuple[CacheTensorSpec, ...]:
    """The model's caches flattened layer by layer: MLA (latent_kv[, index_k]) and GQA (kv) per page and a pooled
    indexer's index_window per slot, KDA and gated DeltaNet (state, conv) per slot."""
    specs = []
    for layer, cache in enumerate(allocate_caches(cfg, 1, 1, dtype, "meta", fmt)):
        for name, tensor in _named_tensors(cache):
            unit = SLOT if isinstance(cache, KDACache) or name == "index_window" else PAGE
            stored = str(tensor.dtype).removeprefix("torch.")
            specs.append(CacheTensorSpec(layer, name, unit, tuple(tensor.shape[1:]), stored))
    return tuple(specs)


def _named_tensors(cache: LayerCache) -> list[tuple[str, torch.Tensor]]:
    if isinstance(cache, KDACache):
        return [("state", cache.state), ("conv", cache.conv)]
    if isinstance(cache, GQACache):
        return [("kv", cache.kv)]
    return [(name, t) for name, t in (("latent_kv", cache.latent_kv), ("index_k", cache.index_k),
                                      ("index_window", cache.index_window)) if t is not None]


def layer_caches(model: HybridModel, flat: list[torch.Tensor]) -> list[LayerCache]:
    """Regroup the flat cache list into the model's per-layer cache objects (views, no copies)."""
    caches, i = [], 0
    for layer, kind in enumerate(model.config.layer_kinds):
        if kind in (KDA, GDN):
            caches.append(KDACache(state=flat[i], conv=flat[i + 1]))
            i += 2
        elif kind == GQA:
            caches.append(GQACache(kv=flat[i]))
            i += 1
        elif model.config.owns_indexer(layer) and model.config.indexer.pooled:
            caches.append(MLACache(latent_kv=flat[i], index_k=flat[i + 1], index_window=flat[i + 2]))
            i += 3
        elif model.config.owns_indexer(layer):
            caches.append(MLACache(latent_kv=flat[i], index_k=flat[i + 1]))
            i += 2
        else:
            caches.append(MLACache(latent_kv=flat[i], index_k=None))
            i += 1
    return caches


def config_manifest(cfg: ModelConfig, dtype: torch.dtype, fmt: CacheFormat, max_batch: int,
                    max_len: int | None = None, num_draft: int = 0, device: str = "meta") -> EngineManifest:
    """The manifest of an engine built from `cfg` (no model needed: what `dayzero inspect` sizes caches by)."""
    return EngineManifest(
        backend="eager", device=device, dtype=str(dtype).removeprefix("torch."),
        vocab_size=cfg.vocab_size, max_len=max_len or cfg.max_position_embeddings, max_batch=max_batch,
        num_draft=num_draft, cache_format=asdict(fmt), cache_tensors=cache_tensor_specs(cfg, dtype, fmt),
    )


def eager_manifest(model: HybridModel, fmt: CacheFormat, max_batch: int, max_len: int | None = None,
                   num_draft: int = 0) -> EngineManifest:
    return config_manifest(model.config, model.dtype, fmt, max_batch, max_len, num_draft, str(model.device))


class EagerEngine(StepEngine):
    """The reference model behind the engine contract."""

    scores_prompts = True

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
