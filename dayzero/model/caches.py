"""Allocation of the per-layer caches in the layouts of ARCHITECTURE.md (plain, unquantized formats)."""

from __future__ import annotations

import torch

from dayzero.model.config import KDA, ModelConfig
from dayzero.model.step import KDACache, MLACache
from dayzero.plugins.paged_cache import PAGE_SIZE

LayerCache = MLACache | KDACache


def allocate_caches(
    cfg: ModelConfig, num_pages: int, num_slots: int, dtype: torch.dtype, device: torch.device | str = "cpu",
) -> list[LayerCache]:
    """One cache per layer: `num_pages` pages of latent KV (+ index keys) per MLA layer, `num_slots` state slots
    per KDA layer. Fresh slots are zero, which is the state of an empty sequence."""
    return [_layer_cache(cfg, kind, num_pages, num_slots, dtype, device) for kind in cfg.layer_kinds]


def _layer_cache(cfg: ModelConfig, kind: str, num_pages: int, num_slots: int, dtype, device) -> LayerCache:
    if kind == KDA:
        kda = cfg.kda
        return KDACache(
            state=torch.zeros(num_slots, kda.num_heads, kda.head_dim, kda.head_dim, dtype=torch.float32, device=device),
            conv=torch.zeros(num_slots, 3, kda.conv_size - 1, kda.proj_dim, dtype=dtype, device=device),
        )
    index_k = None
    if cfg.indexer is not None:
        index_k = torch.zeros(num_pages, PAGE_SIZE, cfg.indexer.head_dim, dtype=dtype, device=device)
    return MLACache(latent_kv=torch.zeros(num_pages, PAGE_SIZE, cfg.mla.latent_dim, dtype=dtype, device=device),
                    index_k=index_k)
