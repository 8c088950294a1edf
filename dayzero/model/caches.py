"""Allocation and sizing of the per-layer caches in the layouts of docs/ops.md ("Cache layouts").

MLA layers keep paged caches (latent KV and, with a DSA indexer, index keys) and GQA layers paged K/V, whose size
grows per token; KDA and gated DeltaNet layers keep a fixed state (+ conv window) per sequence slot. Formats: latent
KV plain (model dtype) or FP8 records, index keys plain or MXFP8 (dayzero/plugins/paged_cache/formats.py), GQA K/V
plain or FP8 with per-(token, head) scales (dayzero/plugins/gqa/cache_layout.py); `kv_fp8` picks FP8 for latent KV
and GQA K/V.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.model.config import GDN, GQA, KDA, ModelConfig
from dayzero.model.step import GQACache, KDACache, MLACache
from dayzero.plugins import gqa
from dayzero.plugins.paged_cache import PAGE_SIZE, formats

LayerCache = MLACache | KDACache | GQACache


@dataclass(frozen=True)
class CacheFormat:
    kv_fp8: bool = False
    index_mxfp8: bool = False


PLAIN_CACHE = CacheFormat()


@dataclass(frozen=True)
class CacheBytes:
    """Capacity planning: bytes per cached token (all MLA and GQA layers) and per sequence slot (all KDA and gated
    DeltaNet layers, and the pooled indexers' windows); pooled index keys count their page's rows over its 64
    tokens, rounded down."""

    per_token_latent: int
    per_token_index: int
    per_slot_state: int
    per_slot_conv: int
    per_token_kv: int = 0

    @property
    def per_token(self) -> int:
        return self.per_token_latent + self.per_token_index + self.per_token_kv

    @property
    def per_slot(self) -> int:
        return self.per_slot_state + self.per_slot_conv


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def cache_bytes(cfg: ModelConfig, dtype: torch.dtype, fmt: CacheFormat = PLAIN_CACHE) -> CacheBytes:
    """Sizes summed over the model's layers (divide by the layer count of a kind for one layer; index keys: by the
    layers that run an indexer)."""
    num_mla, num_kda = cfg.layer_kinds.count("mla"), cfg.layer_kinds.count(KDA)
    num_indexers = sum(cfg.owns_indexer(layer) for layer in range(cfg.num_layers))
    latent = index = state = conv = window = 0
    if num_mla:
        latent = formats.latent_cache_shape(1, cfg.mla.kv_lora_rank, cfg.mla.qk_rope_head_dim, fmt.kv_fp8)[-1]
        latent *= 1 if fmt.kv_fp8 else _element_size(dtype)
        if cfg.indexer is not None:
            dim, kpool = cfg.indexer.head_dim, cfg.indexer.kpool
            index = formats.mxfp8_row_bytes(dim) if fmt.index_mxfp8 else dim * _element_size(dtype)
            index = index * formats.pooled_rows_per_page(kpool) // PAGE_SIZE
            window = (kpool - 1) * 2 * dim * _element_size(dtype)
    if num_kda:
        kda = cfg.kda
        state = kda.num_heads * kda.head_dim * kda.head_dim * 4
        conv = 3 * (kda.conv_size - 1) * kda.proj_dim * _element_size(dtype)
    state, conv = state * num_kda + window * num_indexers, conv * num_kda
    num_gdn = cfg.layer_kinds.count(GDN)
    if num_gdn:
        gdn = cfg.gdn
        state += num_gdn * gdn.num_value_heads * gdn.key_head_dim * gdn.value_head_dim * 4
        conv += num_gdn * (gdn.conv_size - 1) * gdn.conv_dim * _element_size(dtype)
    return CacheBytes(latent * num_mla, index * num_indexers, state, conv,
                      _gqa_token_bytes(cfg, dtype, fmt) * cfg.layer_kinds.count(GQA))


def _gqa_token_bytes(cfg: ModelConfig, dtype: torch.dtype, fmt: CacheFormat) -> int:
    """K and V of one token in one GQA layer (FP8: with their scales)."""
    if cfg.gqa is None:
        return 0
    shape = gqa.kv_cache_shape(1, cfg.gqa.num_kv_heads, cfg.gqa.head_dim, fmt.kv_fp8)
    return torch.Size(shape).numel() * (1 if fmt.kv_fp8 else _element_size(dtype)) // PAGE_SIZE


def allocate_caches(
    cfg: ModelConfig, num_pages: int, num_slots: int, dtype: torch.dtype, device: torch.device | str = "cpu",
    fmt: CacheFormat = PLAIN_CACHE,
) -> list[LayerCache]:
    """One cache per layer: `num_pages` pages of latent KV (+ index keys) per MLA layer and of K/V per GQA layer,
    `num_slots` state slots per KDA or gated DeltaNet layer. Fresh slots are zero, which is the state of an empty
    sequence."""
    return [_layer_cache(cfg, layer, num_pages, num_slots, dtype, device, fmt) for layer in range(cfg.num_layers)]


def _layer_cache(cfg: ModelConfig, layer: int, num_pages, num_slots, dtype, device, fmt: CacheFormat) -> LayerCache:
    if cfg.layer_kinds[layer] == GQA:
        shape = gqa.kv_cache_shape(num_pages, cfg.gqa.num_kv_heads, cfg.gqa.head_dim, fmt.kv_fp8)
        return GQACache(kv=torch.zeros(shape, dtype=torch.uint8 if fmt.kv_fp8 else dtype, device=device))
    if cfg.layer_kinds[layer] == KDA:
        kda = cfg.kda
        return KDACache(
            state=torch.zeros(num_slots, kda.num_heads, kda.head_dim, kda.head_dim, dtype=torch.float32, device=device),
            conv=torch.zeros(num_slots, 3, kda.conv_size - 1, kda.proj_dim, dtype=dtype, device=device),
        )
    if cfg.layer_kinds[layer] == GDN:
        return _gdn_cache(cfg, num_slots, dtype, device)
    mla = cfg.mla
    latent_shape = formats.latent_cache_shape(num_pages, mla.kv_lora_rank, mla.qk_rope_head_dim, fmt.kv_fp8)
    latent = torch.zeros(latent_shape, dtype=torch.uint8 if fmt.kv_fp8 else dtype, device=device)
    index_k = window = None
    if cfg.owns_indexer(layer):
        indexer = cfg.indexer
        index_shape = formats.index_cache_shape(num_pages, indexer.head_dim, fmt.index_mxfp8, indexer.kpool)
        index_k = torch.zeros(index_shape, dtype=torch.uint8 if fmt.index_mxfp8 else dtype, device=device)
        if indexer.pooled:
            window = torch.zeros(num_slots, indexer.kpool - 1, 2 * indexer.head_dim, dtype=dtype, device=device)
    return MLACache(latent_kv=latent, index_k=index_k, index_window=window)


def _gdn_cache(cfg: ModelConfig, num_slots: int, dtype: torch.dtype, device) -> KDACache:
    gdn = cfg.gdn
    return KDACache(
        state=torch.zeros(num_slots, gdn.num_value_heads, gdn.key_head_dim, gdn.value_head_dim, dtype=torch.float32,
                          device=device),
        conv=torch.zeros(num_slots, 1, gdn.conv_size - 1, gdn.conv_dim, dtype=dtype, device=device),
    )
