"""One KDA token on a state tile held in registers: the gated delta-rule step both decode pool kernels take
(recurrent_kernel.py, pipelined_pool_kernel.py)."""

from __future__ import annotations

import triton
import triton.language as tl

L2_EPS = tl.constexpr(1e-6)


@triton.jit
def l2_normalize(x):
    return x / tl.sqrt(tl.sum(x * x, axis=0) + L2_EPS)


@triton.jit
def kda_token(S, q, k, v, g, beta):
    """One gated delta-rule step: S [K, BV], q (scaled) / k / g [K], v [BV], beta scalar -> (S, o [BV])."""
    S = S * tl.exp(g)[:, None]
    delta = beta * (v - tl.sum(S * k[:, None], axis=0))
    S = S + k[:, None] * delta[None, :]
    return S, tl.sum(S * q[:, None], axis=0)


@triton.jit
def kda_token_split(S, q, k, v, g, beta):
    """`kda_token` on a state held as [NV, K, BV] (V split in NV blocks of BV): q / k / g [K], v [NV, BV]."""
    S = S * tl.exp(g)[None, :, None]
    delta = beta * (v - tl.sum(S * k[None, :, None], axis=1))
    S = S + k[None, :, None] * delta[:, None, :]
    return S, tl.sum(S * q[None, :, None], axis=1)
