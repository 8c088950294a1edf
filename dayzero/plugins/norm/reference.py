"""RMSNorm over the last dimension, the spec for the fused kernel.

For a row x [D] in fp32:
    rms_norm:        y = x * rsqrt(mean(x^2) + eps) * w          w = weight, or 1 + weight where zero-centered
    gated_rms_norm:  y = x * rsqrt(mean(x^2) + eps) * weight * act(gate)    act = sigmoid or SiLU
    add_rms_norm:    s = hidden + delta in hidden's dtype, then (s, rms_norm(s))
The result takes x's dtype. The decoder's input norms, the attention's q / k and latent norms, the MoE latent norm
(rms_norm), the KDA / gated DeltaNet output norms (gated_rms_norm, sigmoid / SiLU, rows are heads), and the plain
residual add with the next sublayer's input norm or the final norm (add_rms_norm).
"""

from __future__ import annotations

import torch

GATES = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}


def normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D] -> x * rsqrt(mean(x^2) + eps) in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    """x [..., D], weight [D] -> [..., D] in x's dtype; zero_centered scales by (1 + weight) (Qwen3-Next)."""
    scale = 1.0 + weight.float() if zero_centered else weight.float()
    return (normalized(x, eps) * scale).to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                   activation: str = "sigmoid") -> torch.Tensor:
    """x [..., D], gate [..., D] (x's shape), weight [D] -> [..., D] in x's dtype."""
    return (normalized(x, eps) * weight.float() * GATES[activation](gate.float())).to(x.dtype)


def add_rms_norm(hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                 zero_centered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [..., D], delta [..., D] (hidden's shape), weight [D] -> (sum, rms_norm(sum)), both in hidden's dtype:
    the sum is `hidden + delta` rounded to hidden's dtype, and the norm reads it so rounded."""
    summed = (hidden + delta).to(hidden.dtype)
    return summed, rms_norm(summed, weight, eps, zero_centered)
