"""MoE feed-forward (docs/models.md, "MoE"): sigmoid or softmax router (with or without a correction bias), routed
experts (optionally in a latent space, K3), always-on shared experts (optionally gated, Qwen3-Next)."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.collectives import reduce_partial
from dayzero.model.config import MoEConfig
from dayzero.model.mlp import GatedMLP
from dayzero.model.norm import RMSNorm, linear
from dayzero.plugins import moe as moe_ops
from dayzero.plugins.moe.reference import router_logits as reference_router_logits
from dayzero.plugins.quant.reference import MX_BLOCK


class Router(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size), requires_grad=False)
        self.e_score_correction_bias = nn.Parameter(torch.zeros(num_experts), requires_grad=False) if bias else None


class ExpertBank(nn.Module):
    """Routed expert weights stacked per expert: w1 (gate) / w3 (up) [E, I, D], w2 (down) [E, D, I]."""

    def __init__(self, num_experts: int, dim: int, intermediate_size: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(num_experts, intermediate_size, dim), requires_grad=False)
        self.w3 = nn.Parameter(torch.zeros(num_experts, intermediate_size, dim), requires_grad=False)
        self.w2 = nn.Parameter(torch.zeros(num_experts, dim, intermediate_size), requires_grad=False)

    def weights(self) -> tuple[torch.Tensor, ...]:
        return self.w1, self.w3, self.w2


def _packed(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape, dtype=torch.uint8), requires_grad=False)


class PackedExpertBank(nn.Module):
    """Routed expert weights kept as MXFP4: `w1_packed` [E, I, D/2] uint8 (two E2M1 values a byte) with `w1_scale`
    [E, I, D/32] uint8 (E8M0), likewise w3; `w2_packed` [E, D, I/2] with `w2_scale` [E, D, I/32]."""

    def __init__(self, num_experts: int, dim: int, intermediate_size: int):
        super().__init__()
        for name, (rows, k) in {"w1": (intermediate_size, dim), "w3": (intermediate_size, dim),
                                "w2": (dim, intermediate_size)}.items():
            setattr(self, f"{name}_packed", _packed(num_experts, rows, k // 2))
            setattr(self, f"{name}_scale", _packed(num_experts, rows, k // MX_BLOCK))

    def weights(self) -> tuple[moe_ops.Mxfp4Weight, ...]:
        return tuple(moe_ops.Mxfp4Weight(getattr(self, f"{w}_packed"), getattr(self, f"{w}_scale"))
                     for w in ("w1", "w3", "w2"))


class MoE(nn.Module):
    def __init__(self, hidden_size: int, cfg: MoEConfig, rms_norm_eps: float, activation: str,
                 act_params: dict[str, float]):
        super().__init__()
        self.cfg = cfg
        self.activation, self.act_params = activation, act_params
        expert_dim = cfg.latent_size or hidden_size
        self.gate = Router(hidden_size, cfg.num_experts, cfg.router_bias)
        bank = PackedExpertBank if cfg.mxfp4_experts else ExpertBank
        self.experts = bank(cfg.local_experts, expert_dim, cfg.intermediate_size)
        if cfg.latent_size is not None:
            self.routed_expert_down_proj = linear(hidden_size, cfg.latent_size)
            if cfg.latent_norm:
                self.routed_expert_norm = RMSNorm(cfg.latent_size, rms_norm_eps)
            self.routed_expert_up_proj = linear(cfg.latent_size, hidden_size)
        if cfg.num_shared_experts:
            self.shared_experts = GatedMLP(hidden_size, cfg.shared_size, activation, act_params)
        if cfg.shared_expert_gate:
            self.shared_expert_gate = linear(hidden_size, 1)
        # set on a rank that holds part of every expert's intermediate dim: its expert outputs are partial sums
        self.tp_group: str | None = None
        # set on a rank that holds experts first_expert .. + local_experts - 1 only (expert parallelism)
        self.first_expert: int | None = None

    def _route(self, x: torch.Tensor, decode: bool, shared_slot: bool = False):
        cfg = self.cfg
        # the router GEMM kernel tiles 128 tokens: decode batches are too few tokens to fill the GPU with it
        logits = reference_router_logits(x, self.gate.weight) if decode else moe_ops.router_logits(x, self.gate.weight)
        return moe_ops.route(logits, self.gate.e_score_correction_bias, cfg.top_k, cfg.num_groups, cfg.topk_group,
                             cfg.renormalize, cfg.scaling, cfg.router_activation, shared_slot)

    def _experts(self, x: torch.Tensor, decode: bool, shared: torch.Tensor | None = None) -> torch.Tensor:
        """The routed experts' weighted sum plus `shared` if given, in the latent space when there is one (this
        rank's partial sum)."""
        cfg = self.cfg
        weights, ids = self._route(x, decode)
        if cfg.latent_size is not None:
            x = self.routed_expert_down_proj(x)
        bank = self.experts.weights()
        if self.first_expert is None:
            return moe_ops.moe_experts(x, weights, ids, *bank, self.activation, shared, **self.act_params)
        return moe_ops.moe_local_experts(x, weights, ids, self.first_expert, *bank, self.activation, shared,
                                         **self.act_params)

    def _leave_latent(self, y: torch.Tensor) -> torch.Tensor:
        if self.cfg.latent_norm:
            y = self.routed_expert_norm(y)
        return self.routed_expert_up_proj(y)

    def _reduce_both(self, y: torch.Tensor, shared: torch.Tensor | None):
        """The latent and the shared partial sums in one all-reduce: two independent collectives could run in
        different orders on different ranks (Inductor schedules each rank's graph on its own) and deadlock."""
        if self.tp_group is None:
            return y, shared
        if shared is None:
            return reduce_partial(y, self.tp_group), None
        both = reduce_partial(torch.cat([y, shared], dim=-1), self.tp_group)
        return both.split([y.shape[-1], shared.shape[-1]], dim=-1)

    def _fuses_shared(self, x: torch.Tensor, decode: bool) -> bool:
        """Whether the shared expert runs as one more expert in the routed experts' grouped GEMMs: a plain ungated
        shared expert of the routed experts' size, a dense bank on one rank, and few rows per expert (decode)."""
        cfg = self.cfg
        plain = cfg.shared_expert_like_routed and isinstance(self.experts, ExpertBank)
        one_rank = self.first_expert is None and self.tp_group is None
        return bool(decode and plain and one_rank
                    and moe_ops.fuses_shared_expert(x, x.shape[0] * (cfg.top_k + 1), cfg.local_experts + 1))

    def _shared_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The shared expert's gate, up and down weights; stacked gate and up rows split as views."""
        mlp = self.shared_experts
        fused = getattr(mlp, "gate_up_proj", None)
        gate, up = fused.weight.chunk(2) if fused is not None else (mlp.gate_proj.weight, mlp.up_proj.weight)
        return gate, up, mlp.down_proj.weight

    def _experts_with_shared(self, x: torch.Tensor, decode: bool) -> torch.Tensor:
        weights, ids = self._route(x, decode, shared_slot=True)
        return moe_ops.moe_experts_with_shared(x, weights, ids, *self.experts.weights(), *self._shared_weights(),
                                               self.activation, **self.act_params)

    def _shared(self, x: torch.Tensor) -> torch.Tensor | None:
        if not self.cfg.num_shared_experts:
            return None
        shared = self.shared_experts(x)
        if self.cfg.shared_expert_gate:
            shared = shared * torch.sigmoid(self.shared_expert_gate(x))
        return shared

    def forward(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        if self._fuses_shared(x, decode):
            return self._experts_with_shared(x, decode)
        shared = self._shared(x)
        if self.cfg.latent_size is None:
            # the shared output joins the routed sum in the un-permutation kernel; partial sums (tensor parallelism)
            # add there as well as after their reduction
            return reduce_partial(self._experts(x, decode, shared), self.tp_group)
        # the latent norm needs the whole sum over the expert neurons
        y, shared = self._reduce_both(self._experts(x, decode), shared)
        y = self._leave_latent(y)
        return y if shared is None else y + shared
