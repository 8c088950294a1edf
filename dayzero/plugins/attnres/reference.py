"""Attention-residual depth mix (MODEL.md section 4), the spec for the fused kernel.

For sources v_0..v_{N-1} (each [..., D]) and the layer's pseudo-query:
    k_i = v_i * rsqrt(mean(v_i^2) + eps) * rms_weight      s_i = <k_i, query>
    alpha = softmax_i(s)                                      out = sum_i alpha_i v_i
All math in fp32; the result takes the sources' dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _stack(residuals: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    if isinstance(residuals, torch.Tensor):
        return residuals
    if len(residuals) == 0:
        raise ValueError("attnres_mix needs at least one residual source")
    return torch.stack(list(residuals))


def attnres_weights(
    query: torch.Tensor, residuals: torch.Tensor | Sequence[torch.Tensor], rms_weight: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Softmax weights over the sources: [N, ...] fp32."""
    v = _stack(residuals).float()
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * rms_weight.float()
    return (k @ query.float().reshape(-1)).softmax(dim=0)


def attnres_mix(
    query: torch.Tensor, residuals: torch.Tensor | Sequence[torch.Tensor], rms_weight: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """query [D], residuals N x [..., D] (a sequence or a stacked [N, ..., D] tensor), rms_weight [D] -> [..., D]."""
    v = _stack(residuals)
    alpha = attnres_weights(query, v, rms_weight, eps)
    return (alpha[..., None] * v.float()).sum(0).to(v.dtype)
