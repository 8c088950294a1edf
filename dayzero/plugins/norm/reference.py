"""RMSNorm over the last dimension, the spec for the fused kernel.

For a row x [D] in fp32:
    rms_norm:        y = x * rsqrt(mean(x^2) + eps) * w          w = weight, or 1 + weight where zero-centered
    gated_rms_norm:  y = x * rsqrt(mean(x^2) + eps) * weight * act(gate)    act = sigmoid or SiLU
The result takes x's dtype. The decoder's input norms, the attention's q / k and latent norms, the MoE latent norm
(rms_norm) and the KDA / gated DeltaNet output norms (gated_rms_norm, sigmoid / SiLU, rows are heads).
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
