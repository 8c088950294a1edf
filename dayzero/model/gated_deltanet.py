"""Gated DeltaNet layer (Qwen3-Next's linear attention; docs/models.md, "Gated DeltaNet"): the checkpoint's fused
input projections, one short conv over q, k and v side by side, a decay per value head, the delta-rule recurrence
on the KDA ops (one gate value a head, key heads shared by groups of value heads), and the SiLU-gated output
norm."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model import kda_context
from dayzero.model.collectives import reduce_partial
from dayzero.model.config import GDNConfig
from dayzero.model.kda import ConvWeight
from dayzero.model.norm import GatedRMSNorm, linear
from dayzero.model.step import KDACache
from dayzero.model.zigzag import ContextShard
from dayzero.plugins import kda as kda_ops
from dayzero.plugins import short_conv


class GatedDeltaNet(nn.Module):
    def __init__(self, hidden_size: int, cfg: GDNConfig, rms_norm_eps: float):
        super().__init__()
        self.cfg = cfg
        self.in_proj_qkvz = linear(hidden_size, 2 * cfg.key_dim + 2 * cfg.value_dim)
        self.in_proj_ba = linear(hidden_size, 2 * cfg.num_value_heads)
        self.conv1d = ConvWeight(cfg.conv_dim, cfg.conv_size, segments=(cfg.key_dim, cfg.key_dim, cfg.value_dim))
        self.A_log = nn.Parameter(torch.zeros(cfg.num_value_heads), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.zeros(cfg.num_value_heads), requires_grad=False)
        self.norm = GatedRMSNorm(cfg.value_head_dim, rms_norm_eps, gate="silu")
        self.out_proj = linear(cfg.value_dim, hidden_size)
        # set on a rank that holds some of the key heads (and their value heads): its output is a partial sum
        self.tp_group: str | None = None

    def _by_kind(self, qkvz: torch.Tensor, ba: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Outputs (or row indices) of in_proj_qkvz [..., 2*Hk*K + 2*Hv*V] and in_proj_ba [..., 2*Hv] -> q, k, v, z,
        b, a [..., n], each over all its heads in order. The checkpoint groups both projections' rows by key head:
        per key head, q, k, then the v and z of its value heads; b then a of its value heads."""
        cfg = self.cfg
        per_key, width = cfg.heads_per_key, cfg.heads_per_key * cfg.value_head_dim
        parts = (*qkvz.unflatten(-1, (cfg.num_key_heads, -1)).split(
            [cfg.key_head_dim, cfg.key_head_dim, width, width], dim=-1),
            *ba.unflatten(-1, (cfg.num_key_heads, -1)).split([per_key, per_key], dim=-1))
        return tuple(part.flatten(-2) for part in parts)

    def input_rows(self) -> torch.Tensor:
        """The rows of [in_proj_qkvz; in_proj_ba] in the order q, k, v, z, b, a (export/layout.py fuses the two
        into one GEMM `in_proj` so)."""
        qkvz_rows = self.in_proj_qkvz.out_features
        return torch.cat(self._by_kind(torch.arange(qkvz_rows), torch.arange(self.in_proj_ba.out_features) + qkvz_rows))

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [T, D] -> pre-conv q|k|v [T, 1, conv_dim], the output gate z [T, Hv, V], b and a [T, Hv]."""
        cfg = self.cfg
        fused = getattr(self, "in_proj", None)
        if fused is None:
            q, k, v, z, b, a = self._by_kind(self.in_proj_qkvz(x), self.in_proj_ba(x))
            qkv = torch.cat([q, k, v], dim=-1)
        else:
            qkv, z, b, a = fused(x).split([cfg.conv_dim, cfg.value_dim, cfg.num_value_heads, cfg.num_value_heads],
                                          dim=-1)
        return qkv[:, None], z.unflatten(-1, (cfg.num_value_heads, cfg.value_head_dim)), b, a

    def _heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Conv outputs [..., conv_dim] -> q, k [..., Hk, K], v [..., Hv, V]."""
        cfg, lead = self.cfg, qkv.shape[:-1]
        q, k, v = qkv.split([cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
        return (q.reshape(*lead, cfg.num_key_heads, cfg.key_head_dim),
                k.reshape(*lead, cfg.num_key_heads, cfg.key_head_dim),
                v.reshape(*lead, cfg.num_value_heads, cfg.value_head_dim))

    def _conv_weight(self) -> torch.Tensor:
        return self.conv1d.weight[:, 0][None]  # [1, conv_dim, W]

    def _recurrence_inputs(self, y: torch.Tensor, b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Conv outputs [T, 1, conv_dim] -> q, k [1, T, Hk, K], v [1, T, Hv, V], the log-space decay g and beta
        [1, T, Hv] (batch of one)."""
        q, k, v = self._heads(y[:, 0])
        g = kda_ops.gdn_gate(a, self.A_log, self.dt_bias)
        return q[None], k[None], v[None], g[None], torch.sigmoid(b.float())[None]

    def _prefill(self, qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, meta: StepMeta,
                 cache: KDACache) -> torch.Tensor:
        """Varlen prefill: the conv from each sequence's window, the chunked recurrence from its state slot."""
        slots = meta.state_slots[:, 0]
        y = short_conv.short_conv_prefill(qkv, self._conv_weight(), cache.conv, meta.cu_seqlens, slots)
        q, k, v, g, beta = self._recurrence_inputs(y, b, a)
        slots = slots.long()
        o, final = kda_ops.chunk_kda(q, k, v, g, beta, initial_state=cache.state[slots], output_final_state=True,
                                     use_qk_l2norm_in_kernel=True, cu_seqlens=meta.cu_seqlens)
        cache.state.index_copy_(0, slots, final)
        return o[0]

    def _prefill_across_ranks(self, qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, meta: StepMeta,
                              cache: KDACache, shard: ContextShard) -> torch.Tensor:
        """Context-parallel prefill of this rank's chunks (kda_context.py), as KDAttention's."""
        return kda_context.prefill_across_ranks(qkv, self._conv_weight(), lambda y: self._recurrence_inputs(y, b, a),
                                                meta, cache, shard)

    def _decode(self, qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, meta: StepMeta,
                cache: KDACache) -> torch.Tensor:
        """One fused step per token (conv update, SiLU, L2 norms, gate, beta, recurrence) over the slot pools: 1 +
        num_draft tokens a sequence."""
        batch = meta.state_slots.shape[0]
        per_seq = (batch, qkv.shape[0] // batch)
        o = kda_ops.fused_gdn_decode(qkv.view(*per_seq, -1), self._conv_weight(), cache.conv, a.view(*per_seq, -1),
                                     self.A_log, self.dt_bias, b.view(*per_seq, -1), cache.state, meta.state_slots,
                                     meta.num_accepted)
        return o.flatten(0, 1)

    def forward(self, x: torch.Tensor, meta: StepMeta, cache: KDACache, decode: bool,
                shard: ContextShard | None = None) -> torch.Tensor:
        """x [T, D] -> [T, D]; updates the layer's state and conv slots in place. `shard`: this rank's part of a
        context-parallel prefill."""
        qkv, z, b, a = self._project(x)
        if decode:
            o = self._decode(qkv, b, a, meta, cache)
        elif shard is not None:
            o = self._prefill_across_ranks(qkv, b, a, meta, cache, shard)
        else:
            o = self._prefill(qkv, b, a, meta, cache)
        return reduce_partial(self.out_proj(self.norm(o, z).flatten(1)), self.tp_group)
