"""Normalization layers (fp32 math, result in the input's dtype); the RMSNorms run the `norm` plugin ops."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.plugins import norm as norm_ops


class RMSNorm(nn.Module):
    zero_centered = False

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if self.zero_centered else torch.ones(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return norm_ops.rms_norm(x, self.weight, self.eps, self.zero_centered)

    def after_add(self, hidden: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden + delta in hidden's dtype, this norm of it): a residual add and the next norm in one launch."""
        return norm_ops.add_rms_norm(hidden, delta, self.weight, self.eps, self.zero_centered)


class ZeroCenteredRMSNorm(RMSNorm):
    """RMSNorm whose stored weight is the offset from 1: x * rsqrt(mean(x^2) + eps) * (1 + weight) (Qwen3-Next)."""

    zero_centered = True


def rms_norm(dim: int, eps: float, zero_centered: bool = False) -> nn.Module:
    """The decoder's RMSNorm: scaling by weight, or by (1 + weight) where the config says so."""
    return ZeroCenteredRMSNorm(dim, eps) if zero_centered else RMSNorm(dim, eps)


class GatedRMSNorm(nn.Module):
    """RMSNorm(o) * weight * act(gate), per head: the KDA output norm (sigmoid), the gated DeltaNet one (SiLU)."""

    def __init__(self, dim: int, eps: float, gate: str = "sigmoid"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.eps = eps
        self.activation = gate

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return norm_ops.gated_rms_norm(x, gate, self.weight, self.eps, self.activation)


class LayerNorm(nn.Module):
    """LayerNorm with weight and bias (the indexer's key norm)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(x.float(), x.shape[-1:], self.weight.float(), self.bias.float(), self.eps)
        return y.to(x.dtype)


def linear(in_features: int, out_features: int) -> nn.Linear:
    """A bias-free projection with frozen weights (the model is inference-only)."""
    layer = nn.Linear(in_features, out_features, bias=False)
    layer.weight.requires_grad_(False)
    return layer
