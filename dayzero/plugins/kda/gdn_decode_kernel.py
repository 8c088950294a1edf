"""The fused gated DeltaNet decode step in Triton (reference.fused_gdn_decode_reference): short conv, SiLU, L2 norms,
the per-head gate, sigmoid(b) and the recurrence over the state pool, one kernel a layer.

One program per (row, key head): the q / k conv windows of a key head are read and written by all the value heads
that share it, and the start slot may be a write slot, so one program owns them (programs per value head would race
on them). The program walks the G * V value columns of its key head's G = H / Hk value heads in blocks of BV
columns (block j: columns [j % NVH * BV, +BV) of value head hk * G + j // NVH, NVH = V / BV blocks a head), one
[K, BV] state tile at a time, the L tokens inside a block; the next block's state tile and inputs are loaded while a
block steps. Only a [K, BV] tile (and the next one) is live, so the state never spills out of registers.

Every load of the start slot precedes, in program order and behind a barrier, each store that may hit the same
addresses: a block's state tile and v window are stored only by that block, after it loaded them, and other blocks'
tiles and windows are other addresses; the q / k windows are loaded before the first block and stored after the last.
Slot rule as in recurrent_kernel.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import dependent_launch
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.kda.recurrent_kernel import (
    LATENCY_BOUND_PAIRS,
    check_pool,
    gate_decay,
    short_conv_row,
    silu_rounded,
    slot_row,
)
from dayzero.plugins.kda.step_kernel import kda_token, l2_normalize
from dayzero.plugins.kda.token_rows import flat_token_stride
from dayzero.plugins.short_conv.kernel import load_short_weights, load_short_window, store_short_window

# value columns a state tile holds; the warps of a program grow with its [K, BV] tile, STATE_FLOATS_PER_THREAD a
# thread (the next tile, loaded ahead, takes as many again), up to MAX_WARPS
BLOCK_V = 64
STATE_FLOATS_PER_THREAD = 32
MAX_WARPS = 8


@triton.jit
def _qk_inputs(qkv, token, q_ch, k_ch, x_stride):
    """A token's projected q, k rows [K] of the program's key head, as stored (token rows `x_stride` apart)."""
    row = qkv + token * x_stride
    return tl.load(row + q_ch), tl.load(row + k_ch)


@triton.jit
def _v_inputs(qkv, a, b_logits, token, v_ch, head, x_stride, a_stride, b_stride):
    """A token's projected v row [BV] of a block and its value head's gate and beta pre-activations, as stored
    (token rows of qkv, a and b `x_stride`, `a_stride`, `b_stride` apart)."""
    return (tl.load(qkv + token * x_stride + v_ch), tl.load(a + token * a_stride + head),
            tl.load(b_logits + token * b_stride + head))


@triton.jit
def _conv_qk(taps_q, taps_k, wq, wk, xq, xk, scale, dtype: tl.constexpr):
    """A token's normalized q (scaled) and k from its key head's windows before it and its projected rows."""
    q0, q1, q2 = wq
    k0, k1, k2 = wk
    b_q = silu_rounded(short_conv_row(taps_q, q0, q1, q2, xq.to(tl.float32)), dtype)
    b_k = silu_rounded(short_conv_row(taps_k, k0, k1, k2, xk.to(tl.float32)), dtype)
    return l2_normalize(b_q) * scale, l2_normalize(b_k)


@triton.jit
def _shift(window, x):
    """A right-aligned window of three rows after row x."""
    h0, h1, h2 = window
    return h1, h2, x.to(tl.float32)


@triton.jit
def _block_inputs(qkv, conv_weight, conv_state, a, A_log, dt_bias, b_logits, state, start, first_token, hk, j, ok,
                  ov, x_stride, a_stride, b_stride, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr,
                  V: tl.constexpr, W: tl.constexpr, BV: tl.constexpr):
    """Block j's start state tile [K, BV], v window, conv taps, gate constants and first token's inputs."""
    C: tl.constexpr = 2 * HK * K + H * V
    G: tl.constexpr = H // HK
    NVH: tl.constexpr = V // BV
    head = hk * G + j // NVH
    cols = j % NVH * BV + ov
    v_ch = 2 * HK * K + head * V + cols
    S = tl.load(state + start * (H * K * V) + head * (K * V) + ok[:, None] * V + cols[None, :])
    window = load_short_window(conv_state + start * (W - 1) * C, C, v_ch, W)
    taps = load_short_weights(conv_weight, v_ch, W)
    dt = tl.load(dt_bias + head).to(tl.float32)
    rate = tl.exp(tl.load(A_log + head).to(tl.float32))
    return S, window, taps, dt, rate, _v_inputs(qkv, a, b_logits, first_token, v_ch, head, x_stride, a_stride, b_stride)


@triton.jit
def _zero_group_rows(o, b, L, hk, ov, H: tl.constexpr, V: tl.constexpr, G: tl.constexpr, BV: tl.constexpr):
    """A padding row's output: zero for its L tokens and the key head's G * V value columns."""
    for t in range(L):
        for j in range(G * V // BV):
            tl.store(o + (b * L + t).to(tl.int64) * (H * V) + hk * G * V + j * BV + ov,
                     tl.zeros([BV], tl.float32).to(o.dtype.element_ty))


@triton.jit(do_not_specialize=["L"])
def _fused_gdn_decode_kernel(
    qkv, conv_weight, conv_state, a, A_log, dt_bias, b_logits, state, o, state_slots, num_accepted, scale, L,
    x_stride, a_stride, b_stride, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    W: tl.constexpr, BV: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    C: tl.constexpr = 2 * HK * K + H * V
    G: tl.constexpr = H // HK
    NB: tl.constexpr = G * V // BV
    NVH: tl.constexpr = V // BV
    # AOTInductor passes Python floats as fp64 scalars: fp64 would leak into the fp32 state recurrence
    scale = tl.cast(scale, tl.float32)
    b = tl.program_id(0) // HK
    hk = tl.program_id(0) % HK
    ok = tl.arange(0, K)
    ov = tl.arange(0, BV)
    q_ch = hk * K + ok
    k_ch = HK * K + hk * K + ok
    first_token = (b * L).to(tl.int64)
    # constants and the first token's rows do not depend on the slots: loaded first, they arrive with the state
    taps_q = load_short_weights(conv_weight, q_ch, W)
    taps_k = load_short_weights(conv_weight, k_ch, W)
    xq, xk = _qk_inputs(qkv, first_token, q_ch, k_ch, x_stride)
    slots = state_slots + b * L
    first, start = slot_row(slots, num_accepted, b, L)
    if first < 0:
        _zero_group_rows(o, b, L, hk, ov, H, V, G, BV)
        return
    window = conv_state + start * (W - 1) * C
    start_wq = load_short_window(window, C, q_ch, W)
    start_wk = load_short_window(window, C, k_ch, W)
    nxt = _block_inputs(qkv, conv_weight, conv_state, a, A_log, dt_bias, b_logits, state, start, first_token, hk, 0,
                        ok, ov, x_stride, a_stride, b_stride, H, HK, K, V, W, BV)
    dtype = qkv.dtype.element_ty
    # the first token's q and k are the same for every block
    q_first, k_first = _conv_qk(taps_q, taps_k, start_wq, start_wk, xq, xk, scale, dtype)
    wq_first = _shift(start_wq, xq)
    wk_first = _shift(start_wk, xk)
    tl.debug_barrier()
    for j in range(NB):
        S, wv, taps_v, dt, rate, inputs = nxt
        if j + 1 < NB:
            nxt = _block_inputs(qkv, conv_weight, conv_state, a, A_log, dt_bias, b_logits, state, start, first_token,
                                hk, j + 1, ok, ov, x_stride, a_stride, b_stride, H, HK, K, V, W, BV)
        tl.debug_barrier()
        head = hk * G + j // NVH
        cols = j % NVH * BV + ov
        v_ch = 2 * HK * K + head * V + cols
        tile = head * (K * V) + ok[:, None] * V + cols[None, :]
        b_q, b_k, wq, wk = q_first, k_first, wq_first, wk_first
        n_xq, n_xk = xq, xk
        for t in range(L):
            token = first_token + t
            n_xv, n_a, n_b = inputs
            if t + 1 < L:
                inputs = _v_inputs(qkv, a, b_logits, token + 1, v_ch, head, x_stride, a_stride, b_stride)
                n_xq, n_xk = _qk_inputs(qkv, token + 1, q_ch, k_ch, x_stride)
            v0, v1, v2 = wv
            b_v = silu_rounded(short_conv_row(taps_v, v0, v1, v2, n_xv.to(tl.float32)), dtype)
            wv = _shift(wv, n_xv)
            decay = tl.exp(gate_decay(n_a.to(tl.float32) + dt, rate, 0.0, False))
            S, b_o = kda_token(S, b_q, b_k, b_v, decay, tl.sigmoid(n_b.to(tl.float32)))
            tl.store(o + token * (H * V) + head * V + cols, b_o.to(o.dtype.element_ty))
            slot = tl.load(slots + t).to(tl.int64)
            if slot >= 0:
                tl.store(state + slot * (H * K * V) + tile, S)
                v0, v1, v2 = wv
                store_short_window(conv_state + slot * (W - 1) * C, v0, v1, v2, C, v_ch, W)
            if t + 1 < L:
                b_q, b_k = _conv_qk(taps_q, taps_k, wq, wk, n_xq, n_xk, scale, dtype)
                wq = _shift(wq, n_xq)
                wk = _shift(wk, n_xk)
    tl.debug_barrier()
    wq, wk = start_wq, start_wk
    for t in range(L):
        if t > 0:
            xq, xk = _qk_inputs(qkv, first_token + t, q_ch, k_ch, x_stride)
        wq = _shift(wq, xq)
        wk = _shift(wk, xk)
        slot = tl.load(slots + t).to(tl.int64)
        if slot >= 0:
            q0, q1, q2 = wq
            k0, k1, k2 = wk
            store_short_window(conv_state + slot * (W - 1) * C, q0, q1, q2, C, q_ch, W)
            store_short_window(conv_state + slot * (W - 1) * C, k0, k1, k2, C, k_ch, W)


def _warps(dim_k: int, block_v: int) -> int:
    """Warps for a [K, BV] state tile: STATE_FLOATS_PER_THREAD a thread, from 1 to MAX_WARPS."""
    return max(1, min(MAX_WARPS, dim_k * block_v // (32 * STATE_FLOATS_PER_THREAD)))


def fused_gdn_decode_launcher(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, a: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, b: torch.Tensor, state: torch.Tensor, state_slots: torch.Tensor,
    num_accepted: torch.Tensor, scale: float | None = None, *, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """qkv [B, L, C] (C = 2*Hk*K + H*V: q | k | v before the conv) -> o [B, L, H, V]; conv_state [S, 1, W-1, C] and
    state [S, H, K, V] updated in place; a, b [B, L, H]; A_log, dt_bias [H]. qkv, a and b may be views of the fused
    input projection (tokens evenly strided, each token's row contiguous). PDL as in recurrent_kda_pool_launcher."""
    batch, length, channels = qkv.shape
    heads, dim_k, dim_v = state.shape[1:]
    key_heads = (channels - heads * dim_v) // (2 * dim_k)
    width = conv_weight.shape[-1]
    check_pool(state, state_slots, num_accepted, (batch, length, heads, dim_k, dim_v))
    assert key_heads > 0 and 2 * key_heads * dim_k + heads * dim_v == channels and heads % key_heads == 0, \
        f"qkv's {channels} channels are not 2*Hk*{dim_k} + {heads}*{dim_v} with {heads} a multiple of Hk"
    assert conv_weight.shape == (1, channels, width), f"conv_weight {tuple(conv_weight.shape)} vs [1, {channels}, W]"
    assert 2 <= width <= 4, "the fused decode holds conv windows of at most 3 rows (W <= 4)"
    assert conv_state.shape[1:] == (1, width - 1, channels), f"conv_state {tuple(conv_state.shape)}"
    assert a.shape == b.shape == (batch, length, heads), f"a {tuple(a.shape)}, b {tuple(b.shape)} vs [B, L, {heads}]"
    assert A_log.numel() == heads and dt_bias.numel() == heads, "A_log [H], dt_bias [H]"
    for x in (conv_weight, conv_state, A_log, dt_bias):
        assert x.is_contiguous(), "fused_gdn_decode needs contiguous weights and states"
    strides = [flat_token_stride(x) for x in (qkv, a, b)]
    block_v = min(dim_v, BLOCK_V)
    o = torch.empty((batch, length, heads, dim_v), dtype=qkv.dtype, device=qkv.device) if out is None else out
    pdl = dependent_launch.pdl_mode(state, latency_bound=batch * heads < LATENCY_BOUND_PAIRS)
    kernel = launch(_fused_gdn_decode_kernel) if launch else _fused_gdn_decode_kernel
    kernel[(batch * key_heads,)](
        qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, o, state_slots, num_accepted,
        dim_k ** -0.5 if scale is None else scale, length, *strides,
        heads, key_heads, dim_k, dim_v, width, block_v, pdl,
        num_warps=_warps(dim_k, block_v), **dependent_launch.launch_options(pdl),
    )
    return o
