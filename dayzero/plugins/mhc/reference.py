"""Manifold-constrained hyper-connections (mHC, docs/models.md), the spec for the fused kernels.

A token carries HC residual streams x [HC, D] in place of one residual. Before a sublayer (attention or MLP), from
the flattened streams x' = x.reshape(HC * D) in fp32 and fn [(2 + HC) * HC, HC * D]:
    mix  = (x' * rsqrt(mean(x'^2) + norm_eps)) @ fn^T                               [(2 + HC) * HC]
    pre  = sigmoid(mix[:HC] * scale[0] + base[:HC]) + hc_eps                          [HC]
    post = 2 * sigmoid(mix[HC:2HC] * scale[1] + base[HC:2HC])                         [HC]
    comb = softmax over j of (mix[2HC:].view(HC, HC) * scale[2] + base[2HC:]) + hc_eps [HC, HC]
    comb: columns divided by (their sum + hc_eps), then sinkhorn_iters - 1 times rows, then columns
    sublayer input = sum_i pre_i x_i                                                   [D]
After the sublayer, with its output o [D] and post, comb rounded to the streams' dtype:
    new x_j = post_j * o + sum_i comb[i, j] x_i                                        [HC, D]
The model's last norm takes the mean of the streams. All math in fp32; results in the streams' dtype (post and comb
stay fp32).
"""

from __future__ import annotations

import math

import torch


def mhc_coefficients(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, norm_eps: float,
    hc_eps: float, sinkhorn_iters: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [..., HC, D], fn [(2 + HC) * HC, HC * D], base [(2 + HC) * HC], scale [3] -> pre [..., HC],
    post [..., HC], comb [..., HC, HC], all fp32."""
    flat = streams.reshape(*streams.shape[:-2], -1).float()
    normed = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    mix = torch.nn.functional.linear(normed, fn.float())
    return coefficients_of_mix(mix, base, scale, hc_eps, sinkhorn_iters)


def coefficients_of_mix(
    mix: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, hc_eps: float, sinkhorn_iters: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The normed streams' projection mix [..., (2 + HC) * HC] fp32 -> pre [..., HC], post [..., HC],
    comb [..., HC, HC]."""
    # (2 + HC) * HC + 1 = (HC + 1)^2
    hc = math.isqrt(mix.shape[-1] + 1) - 1
    pre_w, post_w, comb_w = mix.split([hc, hc, hc * hc], dim=-1)
    pre_b, post_b, comb_b = base.float().split([hc, hc, hc * hc])
    pre_s, post_s, comb_s = scale.float().unbind(0)
    pre = torch.sigmoid(pre_w * pre_s + pre_b) + hc_eps
    post = 2 * torch.sigmoid(post_w * post_s + post_b)
    logits = comb_w.reshape(*comb_w.shape[:-1], hc, hc) * comb_s + comb_b.reshape(hc, hc)
    return pre, post, sinkhorn(torch.softmax(logits, dim=-1) + hc_eps, hc_eps, sinkhorn_iters)


def sinkhorn(comb: torch.Tensor, eps: float, iters: int) -> torch.Tensor:
    """Columns, then iters - 1 rounds of rows and columns, each divided by (its sum + eps): [..., HC, HC]."""
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return comb


def mhc_pre(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, norm_eps: float,
    hc_eps: float, sinkhorn_iters: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [T, HC, D] -> (sublayer input [T, D] in the streams' dtype, post [T, HC] fp32, comb [T, HC, HC] fp32)."""
    pre, post, comb = mhc_coefficients(streams, fn, base, scale, norm_eps, hc_eps, sinkhorn_iters)
    return collapse(streams, pre), post, comb


def collapse(streams: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """streams [T, HC, D], pre [T, HC] fp32 -> sum_i pre_i x_i [T, D] in the streams' dtype."""
    return (pre.unsqueeze(-1) * streams.float()).sum(dim=-2).to(streams.dtype)


def mhc_post(out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """out [T, D] (the sublayer's output), residual [T, HC, D] (the streams before it), post [T, HC],
    comb [T, HC, HC] -> the streams after it [T, HC, D] in the residual's dtype."""
    dtype = residual.dtype
    post = post.to(dtype).float()
    comb = comb.to(dtype).float()
    mixed = torch.matmul(comb.transpose(-1, -2), residual.float())
    return (post.unsqueeze(-1) * out.float().unsqueeze(-2) + mixed).to(dtype)


def mhc_head(streams: torch.Tensor) -> torch.Tensor:
    """streams [..., HC, D] -> their mean [..., D] (the input of the model's last norm)."""
    return streams.float().mean(dim=-2).to(streams.dtype)
