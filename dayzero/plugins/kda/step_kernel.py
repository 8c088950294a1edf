"""One KDA token on a state tile held in registers: the gated delta-rule step the decode kernels take
(recurrent_kernel.py, pipelined_pool_kernel.py, gdn_decode_kernel.py)."""

from __future__ import annotations

import triton
import triton.language as tl

L2_EPS = tl.constexpr(1e-6)


@triton.jit
def l2_normalize(x):
    return x / tl.sqrt(tl.sum(x * x, axis=0) + L2_EPS)


@triton.jit
def gate_offsets(h, ok, K: tl.constexpr, PER_HEAD_GATE: tl.constexpr):
    """Where head h's gate sits in a token's gate row: K channels, or one value per head."""
    if PER_HEAD_GATE:
        where = h
    else:
        where = h * K + ok
    return where


@triton.jit
def state_decay(g, PER_HEAD_GATE: tl.constexpr):
    """exp(g) shaped to scale a [K, BV] state tile: a per-channel gate [K] as [K, 1], a per-head one as a scalar."""
    if PER_HEAD_GATE:
        decay = tl.exp(g)
    else:
        decay = tl.exp(g)[:, None]
    return decay


@triton.jit
def kda_token(S, q, k, v, decay, beta):
    """One gated delta-rule step: S [K, BV], q (scaled) / k [K], v [BV], decay (`state_decay`), beta scalar
    -> (S, o [BV])."""
    S = S * decay
    delta = beta * (v - tl.sum(S * k[:, None], axis=0))
    S = S + k[:, None] * delta[None, :]
    return S, tl.sum(S * q[:, None], axis=0)


@triton.jit
def kda_token_split(S, q, k, v, decay, beta):
    """`kda_token` on a state held as [NV, K, BV] (V split in NV blocks of BV): q / k [K], v [NV, BV], decay
    broadcastable to [NV, K, BV] (a per-channel gate's [1, K, 1], per-block gates' [NV, 1, 1]), beta a scalar or
    [NV, 1]."""
    S = S * decay
    delta = beta * (v - tl.sum(S * k[None, :, None], axis=1))
    S = S + k[None, :, None] * delta[:, None, :]
    return S, tl.sum(S * q[None, :, None], axis=1)
