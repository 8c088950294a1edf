"""KDA layer (docs/models.md, "KDA"): projections, short conv, gates, the recurrence and the gated output norm."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model import kda_context
from dayzero.model.collectives import reduce_partial
from dayzero.model.config import KDAConfig
from dayzero.model.norm import GatedRMSNorm, linear
from dayzero.model.step import KDACache
from dayzero.model.zigzag import ContextShard
from dayzero.plugins import kda as kda_ops
from dayzero.plugins import short_conv


class ConvWeight(nn.Module):
    """Holds a depthwise conv kernel [C, 1, W] under the checkpoint's `*_conv1d.weight` name. `segments`: the sizes of
    the channel groups it holds side by side (gated DeltaNet's q, k, v), of which a tensor-parallel rank holds a
    share each."""

    def __init__(self, channels: int, width: int, segments: tuple[int, ...] = ()):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels, 1, width), requires_grad=False)
        self.segments = segments


class KDAttention(nn.Module):
    def __init__(self, hidden_size: int, cfg: KDAConfig, rms_norm_eps: float):
        super().__init__()
        self.cfg = cfg
        width, heads, dim = cfg.proj_dim, cfg.num_heads, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = (linear(hidden_size, width) for _ in range(3))
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (ConvWeight(width, cfg.conv_size) for _ in range(3))
        self.f_a_proj = linear(hidden_size, dim)
        self.f_b_proj = linear(dim, width)
        self.A_log = nn.Parameter(torch.zeros(heads), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.zeros(width), requires_grad=False)
        self.b_proj = linear(hidden_size, heads)
        if cfg.full_rank_output_gate:
            self.g_proj = linear(hidden_size, width)
        else:
            self.g_a_proj = linear(hidden_size, dim)
            self.g_b_proj = linear(dim, width)
        self.o_norm = GatedRMSNorm(dim, rms_norm_eps)
        self.o_proj = linear(width, hidden_size)
        # set on a rank that holds some of the heads: its output is a partial sum over them
        self.tp_group: str | None = None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.cfg.num_heads, self.cfg.head_dim)

    def _conv_weight(self) -> torch.Tensor:
        """[3, C, W]: stacked once by the export layout (`qkv_conv1d`), else from the checkpoint's three convs."""
        stacked = getattr(self, "qkv_conv1d", None)
        if stacked is not None:
            return stacked.weight
        return torch.stack([c.weight[:, 0] for c in (self.q_conv1d, self.k_conv1d, self.v_conv1d)])

    def input_projection_names(self) -> tuple[str, ...]:
        """The projections applied to the layer input x (export/layout.py fuses them into one GEMM, `in_proj`): q, k
        and v first, then the two gates' inputs side by side."""
        gate = "g_proj" if self.cfg.full_rank_output_gate else "g_a_proj"
        return ("q_proj", "k_proj", "v_proj", "f_a_proj", gate, "b_proj")

    def _project_inputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        names = self.input_projection_names()
        fused = getattr(self, "in_proj", None)
        if fused is None:
            return {name: getattr(self, name)(x) for name in names}
        y = fused(x)
        # q, k and v lead the fused output: the conv input [T, 3, C] is a view of it; so are f_a and g_a [T, 2, r]
        width, rank = self.in_proj_sizes[0], self.in_proj_sizes[3]
        p = {**dict(zip(names, y.split(self.in_proj_sizes, dim=-1))),
             "qkv": y[..., : 3 * width].unflatten(-1, (3, width))}
        if not self.cfg.full_rank_output_gate:
            p["low_rank"] = y[..., 3 * width : 3 * width + 2 * rank].unflatten(-1, (2, rank))
        return p

    def _gate_projections(self, p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(the decay gate's pre-activation, the output gate) [T, C]: both low-rank up-projections in one batched
        GEMM where the layout stacked them (`fg_b_proj`)."""
        stacked = getattr(self, "fg_b_proj", None)
        if stacked is not None:
            both = torch.bmm(p["low_rank"].transpose(0, 1), stacked.transpose(1, 2))
            return both[0], both[1]
        gate = p["g_proj"] if self.cfg.full_rank_output_gate else self.g_b_proj(p["g_a_proj"])
        return self.f_b_proj(p["f_a_proj"]), gate

    def _prefill(self, p: dict[str, torch.Tensor], meta: StepMeta, cache: KDACache) -> torch.Tensor:
        """Varlen prefill: short conv from each sequence's window, chunked recurrence from its state slot."""
        slots = meta.state_slots[:, 0]
        qkv = short_conv.short_conv_prefill(self._pre_conv(p), self._conv_weight(), cache.conv, meta.cu_seqlens,
                                            slots)
        q, k, v, g, beta = self._recurrence_inputs(p, qkv)
        slots = slots.long()
        o, final = kda_ops.chunk_kda(q, k, v, g, beta, initial_state=cache.state[slots], output_final_state=True,
                                     use_qk_l2norm_in_kernel=True, cu_seqlens=meta.cu_seqlens)
        cache.state.index_copy_(0, slots, final)
        return o[0]

    def _prefill_across_ranks(self, p: dict[str, torch.Tensor], meta: StepMeta, cache: KDACache,
                              shard: ContextShard) -> torch.Tensor:
        """Context-parallel prefill of this rank's chunks (kda_context.py)."""
        return kda_context.prefill_across_ranks(self._pre_conv(p), self._conv_weight(),
                                                lambda qkv: self._recurrence_inputs(p, qkv), meta, cache, shard)

    def _pre_conv(self, p: dict[str, torch.Tensor]) -> torch.Tensor:
        if "qkv" in p:
            return p["qkv"]
        return torch.stack([p["q_proj"], p["k_proj"], p["v_proj"]], dim=1)  # [T, 3, C]

    def _recurrence_inputs(self, p: dict[str, torch.Tensor], qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Conv outputs [T, 3, C] -> q, k, v [1, T, H, K], the log-space gate g and beta [1, T, H] (batch of one)."""
        q, k, v = (self._heads(t)[None] for t in qkv.unbind(1))
        g = kda_ops.kda_gate(self._heads(p["z"]), self.A_log, self.dt_bias,
                             self.cfg.gate_lower_bound)
        return q, k, v, g[None], torch.sigmoid(p["b_proj"].float())[None]

    def _decode(self, p: dict[str, torch.Tensor], meta: StepMeta, cache: KDACache) -> torch.Tensor:
        """One fused step per token (conv update, SiLU, L2 norm, gate, beta, recurrence) over the slot pools."""
        batch = meta.state_slots.shape[0]
        per_seq = (batch, p["q_proj"].shape[0] // batch)
        qkv = self._pre_conv(p).view(*per_seq, 3, -1)
        z = self._heads(p["z"]).view(*per_seq, self.cfg.num_heads, -1)
        o = kda_ops.fused_kda_decode(qkv, self._conv_weight(), cache.conv, z, self.A_log, self.dt_bias,
                                     self.cfg.gate_lower_bound, p["b_proj"].reshape(*per_seq, -1), cache.state,
                                     meta.state_slots, meta.num_accepted)
        return o.flatten(0, 1)

    def forward(self, x: torch.Tensor, meta: StepMeta, cache: KDACache, decode: bool,
                shard: ContextShard | None = None) -> torch.Tensor:
        """x [T, D] -> [T, D]; updates the layer's state and conv slots in place. `shard`: this rank's part of a
        context-parallel prefill."""
        p = self._project_inputs(x)
        p["z"], p["gate"] = self._gate_projections(p)
        if decode:
            o = self._decode(p, meta, cache)
        elif shard is not None:
            o = self._prefill_across_ranks(p, meta, cache, shard)
        else:
            o = self._prefill(p, meta, cache)
        return reduce_partial(self.o_proj(self.o_norm(o, self._heads(p["gate"])).flatten(1)), self.tp_group)
