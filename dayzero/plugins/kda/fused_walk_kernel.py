"""One fused KDA decode step (L = 1) with one warp a head, walking the head's V blocks.

The fused step in recurrent_kernel.py holds a head's whole [K, K] state on four warps, and K spreads over the warps:
each sum over K, each L2 norm and each vector layout change crosses shared memory behind a barrier (22 `bar.sync`
between the state load and the state store in the sm_90 build). Here one warp takes the head: the conv update,
SiLU, L2 norms, gate and beta once, then the V blocks one after another, each a [K, BV] tile whose sums over K stay
inside the warp, as in the one-tile pool kernel. The q / k conv windows are read and rewritten by this program
alone, so no other program can see a half-updated window (the reason the four-warp step cannot split V over
programs). With L = 1 a row's one slot is its start and its write slot; a padding row (slot -1) reads and writes
no state and outputs zeros.

Opt-in (`fused_kda_decode_launcher(..., walk=True, num_warps=1)`) and not yet measured on the H200: written when
the fifth session of 2026-12-04 had no device time left; `bash bench/run_h200_fk.sh` times it. Offline sm_90
builds: V blocks of 32 on one warp 254 registers (8 programs an SM), of 16 162, of 32 on two warps 165; no spills.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.recurrent_kernel import gate_decay, kda_token, l2_normalize, short_conv_output, silu_rounded
from dayzero.plugins.short_conv.kernel import load_short_weights, load_short_window, store_short_window


@triton.jit
def _conv_step(weights, window, x, C, ch, W: tl.constexpr, dtype: tl.constexpr):
    """(SiLU(conv) rounded to dtype, the window's new rows) for channels ch: x the new row as stored."""
    h0, h1, h2 = load_short_window(window, C, ch, W)
    new = x.to(tl.float32)
    return silu_rounded(short_conv_output(weights, h0, h1, h2, new), dtype), h1, h2, new


@triton.jit
def fused_kda_step_walk_kernel(
    qkv, conv_weight, conv_state, z, A_log, dt_bias, beta_logits, state, o, state_slots, scale, lower_bound,
    H: tl.constexpr, K: tl.constexpr, W: tl.constexpr, BV: tl.constexpr, USE_LOWER_BOUND: tl.constexpr,
):
    C = H * K
    scale = tl.cast(scale, tl.float32)
    lower_bound = tl.cast(lower_bound, tl.float32)
    bh = tl.program_id(0)
    b = (bh // H).to(tl.int64)
    h = bh % H
    ok = tl.arange(0, K)
    x_row = qkv + b * 3 * C + h * K
    # the head's inputs do not depend on the slot: loaded first, they arrive with it
    xq = tl.load(x_row + ok)
    xk = tl.load(x_row + C + ok)
    z_t = tl.load(z + b * C + h * K + ok).to(tl.float32) + tl.load(dt_bias + h * K + ok).to(tl.float32)
    beta = tl.sigmoid(tl.load(beta_logits + b * H + h).to(tl.float32))
    rate = tl.exp(tl.load(A_log + h).to(tl.float32))
    taps_q = load_short_weights(conv_weight, h * K + ok, W)
    taps_k = load_short_weights(conv_weight + C * W, h * K + ok, W)
    slot = tl.load(state_slots + b).to(tl.int64)
    if slot < 0:
        tl.store(o + b * C + h * K + ok, tl.zeros([K], o.dtype.element_ty))
        return
    dtype = qkv.dtype.element_ty
    window = conv_state + slot * 3 * (W - 1) * C
    b_q, q1, q2, nq = _conv_step(taps_q, window, xq, C, h * K + ok, W, dtype)
    b_k, k1, k2, nk = _conv_step(taps_k, window + (W - 1) * C, xk, C, h * K + ok, W, dtype)
    store_short_window(window, q1, q2, nq, C, h * K + ok, W)
    store_short_window(window + (W - 1) * C, k1, k2, nk, C, h * K + ok, W)
    b_q = l2_normalize(b_q) * scale
    b_k = l2_normalize(b_k)
    b_g = gate_decay(z_t, rate, lower_bound, USE_LOWER_BOUND)
    tile = state + slot * (H * K * K) + h * K * K + ok[:, None] * K
    for j in range(K // BV):
        ov = j * BV + tl.arange(0, BV)
        S = tl.load(tile + ov[None, :])
        taps_v = load_short_weights(conv_weight + 2 * C * W, h * K + ov, W)
        b_v, v1, v2, nv = _conv_step(taps_v, window + 2 * (W - 1) * C, tl.load(x_row + 2 * C + ov), C, h * K + ov,
                                     W, dtype)
        S, b_o = kda_token(S, b_q, b_k, b_v, b_g, beta)
        tl.store(tile + ov[None, :], S)
        store_short_window(window + 2 * (W - 1) * C, v1, v2, nv, C, h * K + ov, W)
        tl.store(o + b * C + h * K + ov, b_o.to(o.dtype.element_ty))
