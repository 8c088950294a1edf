"""MoE feed-forward (MODEL.md section 5): sigmoid router with correction bias, routed experts (optionally in a
latent space, K3), always-on shared experts."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.config import MoEConfig
from dayzero.model.mlp import GatedMLP
from dayzero.model.norm import RMSNorm, linear
from dayzero.plugins import moe as moe_ops
from dayzero.plugins.moe.reference import router_logits as reference_router_logits


class Router(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size), requires_grad=False)
        self.e_score_correction_bias = nn.Parameter(torch.zeros(num_experts), requires_grad=False)


class ExpertBank(nn.Module):
    """Routed expert weights stacked per expert: w1 (gate) / w3 (up) [E, I, D], w2 (down) [E, D, I]."""

    def __init__(self, num_experts: int, dim: int, intermediate_size: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(num_experts, intermediate_size, dim), requires_grad=False)
        self.w3 = nn.Parameter(torch.zeros(num_experts, intermediate_size, dim), requires_grad=False)
        self.w2 = nn.Parameter(torch.zeros(num_experts, dim, intermediate_size), requires_grad=False)


class MoE(nn.Module):
    def __init__(self, hidden_size: int, cfg: MoEConfig, rms_norm_eps: float, activation: str,
                 act_params: dict[str, float]):
        super().__init__()
        self.cfg = cfg
        self.activation, self.act_params = activation, act_params
        expert_dim = cfg.latent_size or hidden_size
        self.gate = Router(hidden_size, cfg.num_experts)
        self.experts = ExpertBank(cfg.num_experts, expert_dim, cfg.intermediate_size)
        if cfg.latent_size is not None:
            self.routed_expert_down_proj = linear(hidden_size, cfg.latent_size)
            if cfg.latent_norm:
                self.routed_expert_norm = RMSNorm(cfg.latent_size, rms_norm_eps)
            self.routed_expert_up_proj = linear(cfg.latent_size, hidden_size)
        if cfg.num_shared_experts:
            self.shared_experts = GatedMLP(hidden_size, cfg.intermediate_size * cfg.num_shared_experts,
                                           activation, act_params)

    def _routed(self, x: torch.Tensor, decode: bool) -> torch.Tensor:
        cfg = self.cfg
        # the router GEMM kernel tiles 128 tokens: decode batches are too few tokens to fill the GPU with it
        logits = reference_router_logits(x, self.gate.weight) if decode else moe_ops.router_logits(x, self.gate.weight)
        weights, ids = moe_ops.route(logits, self.gate.e_score_correction_bias, cfg.top_k, cfg.num_groups,
                                     cfg.topk_group, cfg.renormalize, cfg.scaling, cfg.router_activation)
        if cfg.latent_size is not None:
            x = self.routed_expert_down_proj(x)
        y = moe_ops.moe_experts(x, weights, ids, self.experts.w1, self.experts.w3, self.experts.w2,
                                self.activation, **self.act_params)
        if cfg.latent_size is None:
            return y
        if cfg.latent_norm:
            y = self.routed_expert_norm(y)
        return self.routed_expert_up_proj(y)

    def forward(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        y = self._routed(x, decode)
        return y + self.shared_experts(x) if self.cfg.num_shared_experts else y
