"""DSA lightning indexer of an MLA layer (MODEL.md section 3): picks the Top-K past tokens per query."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.config import IndexerConfig
from dayzero.model.norm import LayerNorm, linear
from dayzero.model.step import StepMeta
from dayzero.plugins import indexer as indexer_ops
from dayzero.plugins import paged_cache


class Indexer(nn.Module):
    def __init__(self, hidden_size: int, query_dim: int, cfg: IndexerConfig):
        super().__init__()
        self.cfg = cfg
        self.wq_b = linear(query_dim, cfg.num_heads * cfg.head_dim)
        self.wk = linear(hidden_size, cfg.head_dim)
        self.k_norm = LayerNorm(cfg.head_dim, cfg.norm_eps)
        self.weights_proj = linear(hidden_size, cfg.num_heads)

    def forward(self, x: torch.Tensor, q_input: torch.Tensor, meta: StepMeta,
                index_cache: torch.Tensor) -> torch.Tensor:
        """x [T, D], q_input [T, q_lora_rank] (c_q) -> logical Top-K positions [T, topk]; writes the new keys."""
        q = self.wq_b(q_input).view(x.shape[0], self.cfg.num_heads, self.cfg.head_dim)
        paged_cache.write_index_keys(index_cache, self.k_norm(self.wk(x)), meta.slot_mapping)
        w = self.weights_proj(x).float() * self.cfg.num_heads ** -0.5
        return indexer_ops.index_topk_paged(q, w, index_cache, meta.block_table, meta.cu_seqlens, meta.positions,
                                            self.cfg.topk)
