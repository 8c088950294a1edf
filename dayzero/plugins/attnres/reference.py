"""Attention-residual depth mix (docs/models.md), the spec for the fused kernel.

For sources v_0..v_{N-1} (each [..., D]) and the layer's pseudo-query:
    k_i = v_i * rsqrt(mean(v_i^2) + eps) * rms_weight      s_i = <k_i, query>
    alpha = softmax_i(s)                                      out = sum_i alpha_i v_i
All math in fp32; the result takes the sources' dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dayzero.plugins.norm.reference import rms_norm


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


def attnres_mix_norm(
    query: torch.Tensor, residuals: torch.Tensor | Sequence[torch.Tensor], rms_weight: torch.Tensor, eps: float,
    norm_weight: torch.Tensor, norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mix and RMSNorm(mix) * norm_weight (normalized from the mix as stored, in its dtype): 2 x [..., D]."""
    mix = attnres_mix(query, residuals, rms_weight, eps)
    return mix, rms_norm(mix, norm_weight, norm_eps)


def block_sources(blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None) -> list[torch.Tensor]:
    """The first `num_blocks` closed blocks of blocks [max_blocks, ..., D], then the partial sum [..., D] if any."""
    if not 0 <= num_blocks <= blocks.shape[0]:
        raise ValueError(f"num_blocks {num_blocks} is outside [0, {blocks.shape[0]}]")
    sources = [blocks[i] for i in range(num_blocks)] + ([] if partial is None else [partial])
    if not sources:
        raise ValueError("attnres_mix_blocks needs at least one block or a partial sum")
    return sources


def attnres_mix_blocks(
    query: torch.Tensor, blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None,
    rms_weight: torch.Tensor, eps: float = 1e-6,
) -> torch.Tensor:
    """Mix over blocks[:num_blocks] ([max_blocks, ..., D], a preallocated buffer) and the partial sum -> [..., D]."""
    return attnres_mix(query, block_sources(blocks, num_blocks, partial), rms_weight, eps)


def attnres_mix_blocks_norm(
    query: torch.Tensor, blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None,
    rms_weight: torch.Tensor, eps: float, norm_weight: torch.Tensor, norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """attnres_mix_blocks and RMSNorm of it times norm_weight."""
    return attnres_mix_norm(query, block_sources(blocks, num_blocks, partial), rms_weight, eps, norm_weight, norm_eps)
