"""Gated grouped-query attention over a paged K/V cache: Qwen3-Next's full-attention layers (the ops: docs/ops.md,
"Grouped-query attention").

q_proj emits per head [query | gate] (with `output_gate`); query and key are RMS-normed per head, rotated on their
first `rotary_dim` dims (halves together), the step's keys and values written into the cache, and the attention
output times sigmoid(gate) goes through o_proj. Module names are the HF ones, so weights load name for name.
"""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model.collectives import reduce_partial
from dayzero.model.layer_config import GQAConfig
from dayzero.model.norm import RMSNorm, ZeroCenteredRMSNorm, linear
from dayzero.model.rope import Rope
from dayzero.model.step import GQACache
from dayzero.model.zigzag import ContextShard, rows_of_all_ranks
from dayzero.plugins import gqa


class GatedAttention(nn.Module):
    def __init__(self, hidden_size: int, cfg: GQAConfig):
        super().__init__()
        self.cfg = cfg
        heads, kv_width = cfg.num_heads, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = linear(hidden_size, heads * cfg.head_dim * (2 if cfg.output_gate else 1))
        self.k_proj = linear(hidden_size, kv_width)
        self.v_proj = linear(hidden_size, kv_width)
        self.o_proj = linear(heads * cfg.head_dim, hidden_size)
        norm = ZeroCenteredRMSNorm if cfg.zero_centered_norm else RMSNorm
        self.q_norm = norm(cfg.head_dim, cfg.norm_eps)
        self.k_norm = norm(cfg.head_dim, cfg.norm_eps)
        self.rope = Rope(cfg.rotary_dim, cfg.rope_theta)
        # set on a rank that holds some of the heads
        self.tp_group: str | None = None

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [T, H, D] with its first rotary_dim dims rotated."""
        r = self.cfg.rotary_dim
        return torch.cat([self.rope(x[..., :r], positions), x[..., r:]], dim=-1)

    def _query(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (q [T, H, D] normed and rotated, gate [T, H * D] or None)."""
        q = self.q_proj(x).view(x.shape[0], self.cfg.num_heads, -1)
        gate = None
        if self.cfg.output_gate:
            q, gate = q.split(self.cfg.head_dim, dim=-1)
            gate = gate.reshape(x.shape[0], -1)
        return self._rotate(self.q_norm(q), positions), gate

    def _write_kv(self, x: torch.Tensor, meta: StepMeta, cache: GQACache, shard: ContextShard | None) -> None:
        kv_shape = (x.shape[0], self.cfg.num_kv_heads, self.cfg.head_dim)
        k = self._rotate(self.k_norm(self.k_proj(x).view(kv_shape)), meta.positions)
        v = self.v_proj(x).view(kv_shape)
        rows, slots = rows_of_all_ranks(torch.stack([k, v], dim=1), meta.slot_mapping, shard)
        gqa.write_kv(cache.kv, rows[:, 0], rows[:, 1], slots)

    def _attend(self, q: torch.Tensor, meta: StepMeta, cache: GQACache, decode: bool) -> torch.Tensor:
        scale = self.cfg.softmax_scale
        if not decode:
            return gqa.gqa_prefill_paged(q, cache.kv, meta.block_table, meta.cu_seqlens, meta.positions, scale)
        num_seqs = meta.cu_seqlens.shape[0] - 1
        o = gqa.gqa_decode_paged(q.view(num_seqs, -1, *q.shape[1:]), cache.kv, meta.block_table,
                                 meta.positions.view(num_seqs, -1), scale)
        return o.flatten(0, 1)

    def forward(self, x: torch.Tensor, meta: StepMeta, cache: GQACache, decode: bool,
                shard: ContextShard | None = None) -> torch.Tensor:
        """x [T, D] -> [T, D]; writes the new tokens' K/V into the paged cache first (every rank's rows under
        context parallelism), so a token reads its own and its sequence's earlier ones from there."""
        q, gate = self._query(x, meta.positions)
        self._write_kv(x, meta, cache, shard)
        o = self._attend(q, meta, cache, decode).flatten(1)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return reduce_partial(self.o_proj(o), self.tp_group)
