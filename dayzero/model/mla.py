"""MLA layer in absorbed form over a paged latent cache, with an optional DSA indexer (docs/models.md, "MLA with the
DSA indexer").

The cache row of a token is [c_kv | k_pe]; W_UK is folded into the query and W_UV applied after attention, so
the attention op sees q [T, H, kv_lora_rank + rope] and returns o [T, H, kv_lora_rank].
"""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model.collectives import reduce_partial
from dayzero.model.config import IndexerConfig, MLAConfig
from dayzero.model.indexer import Indexer
from dayzero.model.norm import RMSNorm, linear
from dayzero.model.pooled_indexer import PooledIndexer
from dayzero.model.rope import Rope
from dayzero.model.step import MLACache
from dayzero.model.zigzag import ContextShard, rows_of_all_ranks
from dayzero.plugins import paged_cache, sparse_mla


class MLAttention(nn.Module):
    def __init__(self, hidden_size: int, cfg: MLAConfig, indexer: IndexerConfig | None, shares_picks: bool = False):
        """`shares_picks`: attend over the Top-K picks of an earlier layer (GLM's IndexShare) instead of running an
        indexer."""
        super().__init__()
        self.cfg = cfg
        heads = cfg.num_heads
        if cfg.q_lora_rank is None:
            self.q_proj = linear(hidden_size, heads * cfg.qk_head_dim)
        else:
            self.q_a_proj = linear(hidden_size, cfg.q_lora_rank)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
            self.q_b_proj = linear(cfg.q_lora_rank, heads * cfg.qk_head_dim)
        self.kv_a_proj_with_mqa = linear(hidden_size, cfg.latent_dim)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.norm_eps)
        self.kv_b_proj = linear(cfg.kv_lora_rank, heads * (cfg.qk_nope_head_dim + cfg.v_head_dim))
        self.o_proj = linear(heads * cfg.v_head_dim, hidden_size)
        if cfg.output_gate:
            self.g_proj = linear(hidden_size, heads * cfg.v_head_dim)
        # NoPE models (Kimi) use the rope dims unrotated
        self.rope = None if cfg.use_nope else Rope(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_interleaved,
                                                   cfg.rope_scaling)
        self.has_indexer = indexer is not None and not shares_picks
        if self.has_indexer and indexer.pooled:
            self.indexer = PooledIndexer(hidden_size, cfg.q_lora_rank or hidden_size, indexer)
        elif self.has_indexer:
            index_rope = Rope(indexer.rope_dim, cfg.rope_theta, indexer.rope_interleaved, cfg.rope_scaling)
            self.indexer = Indexer(hidden_size, cfg.q_lora_rank or hidden_size, indexer,
                                   index_rope if indexer.rope_dim else None)
        self.sparse = indexer is not None
        # set on a rank that holds some of the heads (the latent cache and the indexer are whole on every rank)
        self.tp_group: str | None = None

    def _query(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (q [T, H, qk_head_dim], indexer query input [T, q_lora_rank or D])."""
        if self.cfg.q_lora_rank is None:
            q = self.q_proj(x)
            c_q = x
        else:
            c_q = self.q_a_layernorm(self.q_a_proj(x))
            q = self.q_b_proj(c_q)
        return q.view(x.shape[0], self.cfg.num_heads, self.cfg.qk_head_dim), c_q

    def _absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK [H, nope, kv_lora_rank] and W_UV [H, v, kv_lora_rank] from kv_b_proj (or as laid out at export)."""
        if getattr(self, "w_uk", None) is not None:
            return self.w_uk, self.w_uv
        cfg = self.cfg
        w = self.kv_b_proj.weight.view(cfg.num_heads, cfg.qk_nope_head_dim + cfg.v_head_dim, cfg.kv_lora_rank)
        return w[:, : cfg.qk_nope_head_dim], w[:, cfg.qk_nope_head_dim :]

    def _write_latent(self, x: torch.Tensor, meta: StepMeta, cache: MLACache, shard: ContextShard | None) -> None:
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split([self.cfg.kv_lora_rank, self.cfg.qk_rope_head_dim], dim=-1)
        if self.rope is not None:
            k_pe = self.rope(k_pe, meta.positions)
        rows, slots = rows_of_all_ranks(torch.cat([self.kv_a_layernorm(c_kv), k_pe], dim=-1), meta.slot_mapping,
                                        shard)
        paged_cache.write_latent(cache.latent_kv, rows, slots, self.cfg.qk_rope_head_dim)

    def _attend(self, q_abs: torch.Tensor, x, c_q, meta: StepMeta, cache: MLACache, decode: bool,
                shard: ContextShard | None, picks: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        scale = self.cfg.softmax_scale
        v_dim = self.cfg.kv_lora_rank
        if self.has_indexer and isinstance(self.indexer, PooledIndexer):
            picks = self.indexer(x, c_q, meta, cache, decode, shard)
        elif self.has_indexer:
            picks = self.indexer(x, c_q, meta, cache.index_k, shard)
        if self.sparse:
            o, _ = sparse_mla.sparse_mla_paged(q_abs, cache.latent_kv, meta.block_table, meta.cu_seqlens, picks,
                                               scale, v_dim)
        else:
            o, _ = sparse_mla.dense_mla_paged(q_abs, cache.latent_kv, meta.block_table, meta.cu_seqlens,
                                              meta.positions, scale, v_dim)
        return o, picks

    def forward(self, x: torch.Tensor, meta: StepMeta, cache: MLACache, decode: bool,
                shard: ContextShard | None = None,
                picks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [T, D] -> ([T, D], the picks [T, topk] (pooled: [T, topk + kpool - 1]) it attended over, or None when
        dense); writes the new
        tokens' latent (and index) rows into the paged caches. `picks`: an earlier layer's, for a layer that shares
        them. `shard`: this rank's part of a context-parallel prefill, whose rows every rank's caches receive."""
        q, c_q = self._query(x)
        q_nope, q_pe = q.split([self.cfg.qk_nope_head_dim, self.cfg.qk_rope_head_dim], dim=-1)
        if self.rope is not None:
            q_pe = self.rope(q_pe, meta.positions)
        self._write_latent(x, meta, cache, shard)
        w_uk, w_uv = self._absorbed_weights()
        q_abs = torch.cat([torch.einsum("thn,hnc->thc", q_nope, w_uk), q_pe], dim=-1)
        o, picks = self._attend(q_abs, x, c_q, meta, cache, decode, shard, picks)
        o = torch.einsum("thc,hvc->thv", o, w_uv).flatten(1)
        if self.cfg.output_gate:
            o = o * torch.sigmoid(self.g_proj(x))
        return reduce_partial(self.o_proj(o), self.tp_group), picks
