"""The fused gated DeltaNet decode step in Triton (reference.fused_gdn_decode_reference): short conv, SiLU, L2 norms,
the per-head gate, sigmoid(b) and the recurrence over the state pool, one kernel a layer.

One program per (row, key head): the q / k conv windows of a key head are read and written by all the value heads
that share it, and the start slot may be a write slot, so one program owns them (programs per value head would race
on them). The program holds the states of its G = H / Hk value heads as one tile [NB, K, BV]: block j is V columns
[j % NVH * BV, +BV) of value head hk * G + j // NVH (NVH = V / BV blocks a head), so each block carries its own
gate and beta. NB is padded to a power of two by repeating the last block: a padding block loads, computes and
stores exactly what the last block does (same addresses, same values), so nothing needs a mask. Slot rule and the
read-before-write barrier as in recurrent_kernel.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import dependent_launch
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.kda.recurrent_kernel import (
    FUSED_BLOCK_V,
    FUSED_WARPS,
    LATENCY_BOUND_PAIRS,
    check_pool,
    gate_decay,
    short_conv_row,
    silu_rounded,
    slot_row,
)
from dayzero.plugins.kda.step_kernel import kda_token_split, l2_normalize
from dayzero.plugins.short_conv.kernel import load_short_weights, load_short_window, store_short_window

# state floats a thread holds: the warps of a program grow with its tile up to MAX_WARPS
STATE_FLOATS_PER_THREAD = 128
MAX_WARPS = 8


@triton.jit
def _token_inputs(qkv, a, b_logits, token, q_ch, k_ch, v_ch, heads, C: tl.constexpr, H: tl.constexpr):
    """A token's projected q, k [K], v [NB, BV] rows and its blocks' gate and beta pre-activations [NB], as stored."""
    row = qkv + token * C
    return (tl.load(row + q_ch), tl.load(row + k_ch), tl.load(row + v_ch), tl.load(a + token * H + heads),
            tl.load(b_logits + token * H + heads))


@triton.jit(do_not_specialize=["L"])
def _fused_gdn_decode_kernel(
    qkv, conv_weight, conv_state, a, A_log, dt_bias, b_logits, state, o, state_slots, num_accepted, scale, L,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, W: tl.constexpr, BV: tl.constexpr,
    NB: tl.constexpr, NB_POW2: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    C: tl.constexpr = 2 * HK * K + H * V
    G: tl.constexpr = H // HK
    NVH: tl.constexpr = V // BV
    # AOTInductor passes Python floats as fp64 scalars: fp64 would leak into the fp32 state recurrence
    scale = tl.cast(scale, tl.float32)
    b = tl.program_id(0) // HK
    hk = tl.program_id(0) % HK
    ok = tl.arange(0, K)
    blocks = tl.minimum(tl.arange(0, NB_POW2), NB - 1)
    heads = hk * G + blocks // NVH
    # the group's value channels are contiguous: block j holds columns j * BV.. of the group's G * V
    group_cols = blocks[:, None] * BV + tl.arange(0, BV)[None, :]
    q_ch = hk * K + ok
    k_ch = HK * K + hk * K + ok
    v_ch = 2 * HK * K + hk * G * V + group_cols
    # constants and the first token's inputs do not depend on the slots: loaded first, they arrive with the state
    taps_q = load_short_weights(conv_weight, q_ch, W)
    taps_k = load_short_weights(conv_weight, k_ch, W)
    taps_v = load_short_weights(conv_weight, v_ch, W)
    dt = tl.load(dt_bias + heads).to(tl.float32)
    rate = tl.exp(tl.load(A_log + heads).to(tl.float32))
    n_xq, n_xk, n_xv, n_a, n_b = _token_inputs(qkv, a, b_logits, (b * L).to(tl.int64), q_ch, k_ch, v_ch, heads, C, H)
    slots = state_slots + b * L
    first, start = slot_row(slots, num_accepted, b, L)
    out_cols = hk * G * V + group_cols
    if first < 0:
        for t in range(L):
            tl.store(o + (b * L + t).to(tl.int64) * (H * V) + out_cols, tl.zeros(out_cols.shape, o.dtype.element_ty))
        return
    tile = ((heads[:, None, None] * K + ok[None, :, None]) * V + (blocks % NVH * BV)[:, None, None]
            + tl.arange(0, BV)[None, None, :])
    S = tl.load(state + start * (H * K * V) + tile)
    window = conv_state + start * (W - 1) * C
    q0, q1, q2 = load_short_window(window, C, q_ch, W)
    k0, k1, k2 = load_short_window(window, C, k_ch, W)
    v0, v1, v2 = load_short_window(window, C, v_ch, W)
    dtype = qkv.dtype.element_ty
    tl.debug_barrier()
    for t in range(L):
        token = (b * L + t).to(tl.int64)
        xq = n_xq.to(tl.float32)
        xk = n_xk.to(tl.float32)
        xv = n_xv.to(tl.float32)
        b_g = gate_decay(n_a.to(tl.float32) + dt, rate, 0.0, False)
        b_beta = tl.sigmoid(n_b.to(tl.float32))
        if t + 1 < L:
            n_xq, n_xk, n_xv, n_a, n_b = _token_inputs(qkv, a, b_logits, token + 1, q_ch, k_ch, v_ch, heads, C, H)
        b_q = silu_rounded(short_conv_row(taps_q, q0, q1, q2, xq), dtype)
        b_k = silu_rounded(short_conv_row(taps_k, k0, k1, k2, xk), dtype)
        b_v = silu_rounded(short_conv_row(taps_v, v0, v1, v2, xv), dtype)
        q0, q1, q2 = q1, q2, xq
        k0, k1, k2 = k1, k2, xk
        v0, v1, v2 = v1, v2, xv
        S, b_o = kda_token_split(S, l2_normalize(b_q) * scale, l2_normalize(b_k), b_v, tl.exp(b_g)[:, None, None],
                                 b_beta[:, None])
        tl.store(o + token * (H * V) + out_cols, b_o.to(o.dtype.element_ty))
        slot = tl.load(slots + t).to(tl.int64)
        if slot >= 0:
            tl.store(state + slot * (H * K * V) + tile, S)
            window = conv_state + slot * (W - 1) * C
            store_short_window(window, q0, q1, q2, C, q_ch, W)
            store_short_window(window, k0, k1, k2, C, k_ch, W)
            store_short_window(window, v0, v1, v2, C, v_ch, W)


def _warps(blocks: int, dim_k: int, block_v: int) -> int:
    """Warps for a state tile of `blocks` x K x BV floats: STATE_FLOATS_PER_THREAD a thread, from FUSED_WARPS to
    MAX_WARPS."""
    return max(FUSED_WARPS, min(MAX_WARPS, blocks * dim_k * block_v // (32 * STATE_FLOATS_PER_THREAD)))


def fused_gdn_decode_launcher(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, a: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, b: torch.Tensor, state: torch.Tensor, state_slots: torch.Tensor,
    num_accepted: torch.Tensor, scale: float | None = None, *, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """qkv [B, L, C] (C = 2*Hk*K + H*V: q | k | v before the conv) -> o [B, L, H, V]; conv_state [S, 1, W-1, C] and
    state [S, H, K, V] updated in place; a, b [B, L, H]; A_log, dt_bias [H]. PDL as in recurrent_kda_pool_launcher."""
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
    for x in (qkv, conv_weight, conv_state, a, A_log, dt_bias, b):
        assert x.is_contiguous(), "fused_gdn_decode needs contiguous inputs"
    block_v = min(dim_v, FUSED_BLOCK_V)
    blocks = heads // key_heads * (dim_v // block_v)
    blocks_pow2 = triton.next_power_of_2(blocks)
    o = torch.empty((batch, length, heads, dim_v), dtype=qkv.dtype, device=qkv.device) if out is None else out
    pdl = dependent_launch.pdl_mode(state, latency_bound=batch * heads < LATENCY_BOUND_PAIRS)
    kernel = launch(_fused_gdn_decode_kernel) if launch else _fused_gdn_decode_kernel
    kernel[(batch * key_heads,)](
        qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, o, state_slots, num_accepted,
        dim_k ** -0.5 if scale is None else scale, length,
        heads, key_heads, dim_k, dim_v, width, block_v, blocks, blocks_pow2, pdl,
        num_warps=_warps(blocks_pow2, dim_k, block_v), **dependent_launch.launch_options(pdl),
    )
    return o
