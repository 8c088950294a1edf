"""DSA lightning indexer of an MLA layer (docs/models.md, "MLA with the DSA indexer"): picks the Top-K past tokens
per query."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model.config import IndexerConfig
from dayzero.model.norm import LayerNorm, linear
from dayzero.model.rope import Rope
from dayzero.model.zigzag import ContextShard, rows_of_all_ranks
from dayzero.plugins import indexer as indexer_ops
from dayzero.plugins import paged_cache
from dayzero.plugins import quant as quant_ops
from dayzero.plugins.paged_cache import formats


class Indexer(nn.Module):
    def __init__(self, hidden_size: int, query_dim: int, cfg: IndexerConfig, rope: Rope | None = None):
        super().__init__()
        self.cfg = cfg
        # DeepSeek-V3.2 / GLM-5: on the first rope.dim dims of the query and of the key (before it is cached)
        self.rope = rope
        self.wq_b = linear(query_dim, cfg.num_heads * cfg.head_dim)
        self.wk = linear(hidden_size, cfg.head_dim)
        self.k_norm = LayerNorm(cfg.head_dim, cfg.norm_eps)
        self.weights_proj = linear(hidden_size, cfg.num_heads)

    def forward(self, x: torch.Tensor, q_input: torch.Tensor, meta: StepMeta, index_cache: torch.Tensor,
                shard: ContextShard | None = None) -> torch.Tensor:
        """x [T, D], q_input [T, q_lora_rank] (c_q) -> logical Top-K positions [T, topk]; writes the new keys (of
        every context-parallel rank, with `shard`)."""
        q = self._rotated(self._query(q_input), meta.positions)
        w = self._keys_and_weights(x, meta, index_cache, shard)
        q_scales = None
        if formats.is_quantized(index_cache):
            # MXFP8 query against MXFP8 keys: the indexer's dot runs on the FP8 tensor cores
            q, q_scales = quant_ops.mxfp8_quantize(q)
        return indexer_ops.index_topk_paged(q, w, index_cache, meta.block_table, meta.cu_seqlens, meta.positions,
                                            self.cfg.topk, None, q_scales)

    def _query(self, q_input: torch.Tensor) -> torch.Tensor:
        return self.wq_b(q_input).view(q_input.shape[0], self.cfg.num_heads, self.cfg.head_dim)

    def _rotated(self, t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """t [T, ..., DI] with RoPE on its first rope.dim dims."""
        if self.rope is None:
            return t
        return torch.cat([self.rope(t[..., : self.rope.dim], positions), t[..., self.rope.dim :]], dim=-1)

    def _keys_and_weights(self, x: torch.Tensor, meta: StepMeta, index_cache: torch.Tensor,
                          shard: ContextShard | None) -> torch.Tensor:
        """Writes the new index keys; -> head weights w [T, HI] fp32."""
        k = self._rotated(self.k_norm(self.wk(x)), meta.positions)
        paged_cache.write_index_keys(index_cache, *rows_of_all_ranks(k, meta.slot_mapping, shard))
        return self.weights_proj(x).float() * self.cfg.num_heads ** -0.5
