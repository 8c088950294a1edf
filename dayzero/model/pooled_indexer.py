"""The DSA indexer over pooled keys (GLM-5.3's `index_kpool`, docs/models.md, "Pooled index keys"): one key a pool of
kpool tokens, a gated position-weighted mean; the top topk / kpool pools are picked, and the sequence's unfinished
pool always."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.errors import DayzeroError
from dayzero.model.config import IndexerConfig
from dayzero.model.indexer import Indexer
from dayzero.model.step import MLACache
from dayzero.model.zigzag import ContextShard
from dayzero.plugins import indexer as indexer_ops
from dayzero.plugins import quant as quant_ops
from dayzero.plugins.paged_cache import formats


class PooledIndexer(Indexer):
    def __init__(self, hidden_size: int, query_dim: int, cfg: IndexerConfig):
        super().__init__(hidden_size, query_dim, cfg)
        # the checkpoint's names: a pool position's embedding [kpool, DI], the gate projection [DI, D]
        self.index_kpool_compress_ape = nn.Parameter(torch.zeros(cfg.kpool, cfg.head_dim), requires_grad=False)
        self.index_kpool_compress_gate = nn.Parameter(torch.zeros(cfg.head_dim, hidden_size), requires_grad=False)

    def forward(self, x: torch.Tensor, q_input: torch.Tensor, meta: StepMeta, cache: MLACache, decode: bool,
                shard: ContextShard | None = None) -> torch.Tensor:
        """x [T, D], q_input [T, q_lora_rank] -> picks [T, topk + kpool - 1]; writes the pools the new tokens complete
        and each sequence's window of pending rows."""
        if shard is not None:
            raise DayzeroError("pooled index keys (index_kpool) are not served under context parallelism; run "
                               "without --cp")
        self._write(x, meta, cache, decode)
        q, q_scales = self._query(q_input), None
        if formats.is_quantized(cache.index_k):
            q, q_scales = quant_ops.mxfp8_quantize(q)
        w = self.weights_proj(x).float() * self.cfg.num_heads ** -0.5
        return indexer_ops.pooled_index_topk_paged(q, w, cache.index_k, meta.block_table, meta.cu_seqlens,
                                                   meta.positions, self.cfg.topk, self.cfg.kpool, None, q_scales)

    def _write(self, x: torch.Tensor, meta: StepMeta, cache: MLACache, decode: bool) -> None:
        rows = torch.cat([self.k_norm(self.wk(x)), torch.nn.functional.linear(x, self.index_kpool_compress_gate)], -1)
        ape = self.index_kpool_compress_ape
        if not decode:
            indexer_ops.write_pooled_index_keys_prefill(cache.index_k, cache.index_window, rows, ape, meta.slot_mapping,
                                                        meta.positions, meta.cu_seqlens, meta.state_slots[:, 0])
            return
        batch = meta.state_slots.shape[0]
        per_row = (batch, x.shape[0] // batch)
        indexer_ops.write_pooled_index_keys_decode(cache.index_k, cache.index_window, rows.view(*per_row, -1), ape,
                                                   meta.slot_mapping.view(per_row), meta.positions.view(per_row),
                                                   meta.state_slots, meta.num_accepted)
