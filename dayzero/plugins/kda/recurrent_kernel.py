"""Triton KDA decode over a state pool: the plain recurrence and the fully fused decode step.

Both follow `reference.recurrent_kda_pool`'s slot rule: row b starts from state[state_slots[b, num_accepted[b]-1]],
writes the state after token t into state_slots[b, t] (-1: not written), and is padding (zero output, nothing
read or written) when state_slots[b, 0] == -1. A program holds its state tile in registers for all L tokens, so
each state byte is read once and written once per written slot; every read of a slot happens before the barrier
that precedes the program's first write, so the start slot may be among the written ones.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import dependent_launch
from dayzero.plugins import device as device_info
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.kda.limits import MAX_STEP_TOKENS
from dayzero.plugins.kda.pipelined_pool_kernel import pipelined_kda_pool_kernel
from dayzero.plugins.kda.step_kernel import gate_offsets, kda_token, kda_token_split, l2_normalize, state_decay
from dayzero.plugins.short_conv.kernel import activate, load_short_weights, load_short_window, store_short_window
from dayzero.plugins.token_rows import flat_token_stride

# tokens a row may step through in one call (1 + draft tokens): a row's slots are read as one vector of this width
_STEP_TOKENS = tl.constexpr(MAX_STEP_TOKENS)
# softplus(x) == x above this (torch's default threshold)
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)
# below this many (row, head) pairs a decode call is latency-bound: its V axis is split in 16-wide blocks (more
# programs) and a one-token step runs pipelined_pool_kernel.py; from it, 32-wide blocks on the one-tile kernel
LATENCY_BOUND_PAIRS = 1024
# the pipelined pool kernel: one warp a program, PIPELINED_PROGRAMS_PER_SM programs an SM walking the tiles, the next
# state tile copied ahead into shared memory (two stages)
PIPELINED_PROGRAMS_PER_SM = 12
PIPELINED_STAGES = 2
# the fused decode step: V blocks of FUSED_BLOCK_V within a program of FUSED_WARPS warps
FUSED_BLOCK_V = 32
FUSED_WARPS = 4


@triton.jit
def gate_decay(z, rate, lower_bound, USE_LOWER_BOUND: tl.constexpr):
    """Log-space decay from z + dt_bias: Kimi-Linear -rate * softplus(z), K3 lower_bound * sigmoid(rate * z)."""
    if USE_LOWER_BOUND:
        g = lower_bound * tl.sigmoid(rate * z)
    else:
        g = -rate * tl.where(z > SOFTPLUS_THRESHOLD, z, tl.log(1.0 + tl.exp(tl.minimum(z, SOFTPLUS_THRESHOLD))))
    return g


@triton.jit
def slot_row(slots, num_accepted, b, L):
    """(row b's first write slot, its start slot) from its L slots at `slots`: the slots and the row's accepted count
    in two independent loads and the start picked in registers, so the state load waits on one memory round trip, not
    three (first slot, then the count, then the start slot)."""
    steps = tl.arange(0, _STEP_TOKENS)
    row = tl.load(slots + steps, mask=steps < L, other=-1)
    accepted = tl.load(num_accepted + b)
    first = tl.sum(tl.where(steps == 0, row, 0))
    return first, tl.sum(tl.where(steps == accepted - 1, row, 0)).to(tl.int64)


@triton.jit
def _zero_rows(o, first, L, row_stride, cols, WIDTH: tl.constexpr):
    """o[first + t * row_stride + cols] = 0 for t < L (the output of a padding row)."""
    for t in range(L):
        tl.store(o + first + t * row_stride + cols, tl.zeros([WIDTH], tl.float32).to(o.dtype.element_ty))


@triton.jit
def _token_vectors(q, k, g, v, beta, b, t, h, hk, ok, ov, q_sb, q_st, k_sb, k_st, v_sb, v_st, g_sb, g_st, beta_sb,
                   beta_st, K: tl.constexpr, V: tl.constexpr, PER_HEAD_GATE: tl.constexpr):
    """Token t of row b, value head h (key head hk): its q, k [K], g ([K] or a scalar), v [BV] and beta, as stored
    (converted where used)."""
    row = b.to(tl.int64)
    return (tl.load(q + row * q_sb + t * q_st + hk * K + ok), tl.load(k + row * k_sb + t * k_st + hk * K + ok),
            tl.load(g + row * g_sb + t * g_st + gate_offsets(h, ok, K, PER_HEAD_GATE)),
            tl.load(v + row * v_sb + t * v_st + h * V + ov), tl.load(beta + row * beta_sb + t * beta_st + h))


@triton.jit(do_not_specialize=["L"])
def _recurrent_kda_pool_kernel(
    q, k, v, g, beta, o, state, state_slots, num_accepted, scale, L,
    q_sb, q_st, k_sb, k_st, v_sb, v_st, g_sb, g_st, beta_sb, beta_st,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr, PER_HEAD_GATE: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    # the V blocks of one head are neighbours in launch order, so the programs that run together read whole state
    # rows (DRAM pages) rather than one BV-wide column strip of every head
    bh = tl.program_id(0) // (V // BV)
    b = bh // H
    h = bh % H
    hk = h // (H // HK)
    ok = tl.arange(0, K)
    ov = tl.program_id(0) % (V // BV) * BV + tl.arange(0, BV)
    strides = (q_sb, q_st, k_sb, k_st, v_sb, v_st, g_sb, g_st, beta_sb, beta_st)
    # the token's vectors do not depend on the slots: loaded first (and the next token's before a step), they
    # arrive with the state. Each one's layout change passes a barrier, so loads issued between uses would wait in a
    # chain of round trips, one per vector (q, k, g, v, beta one after another).
    n_q, n_k, n_g, n_v, n_beta = _token_vectors(q, k, g, v, beta, b, 0, h, hk, ok, ov, *strides, K, V, PER_HEAD_GATE)
    slots = state_slots + b * L
    first, start = slot_row(slots, num_accepted, b, L)
    if first < 0:
        _zero_rows(o, (b * L * H + h).to(tl.int64) * V, L, H * V, ov, BV)
        return
    tile = h * K * V + ok[:, None] * V + ov[None, :]
    S = tl.load(state + start * (H * K * V) + tile)
    tl.debug_barrier()
    for t in range(L):
        b_q = n_q.to(tl.float32)
        b_k = n_k.to(tl.float32)
        b_g = n_g.to(tl.float32)
        b_v = n_v.to(tl.float32)
        b_beta = n_beta.to(tl.float32)
        if t + 1 < L:
            n_q, n_k, n_g, n_v, n_beta = _token_vectors(q, k, g, v, beta, b, t + 1, h, hk, ok, ov, *strides, K, V,
                                                        PER_HEAD_GATE)
        if USE_QK_L2NORM:
            b_q = l2_normalize(b_q)
            b_k = l2_normalize(b_k)
        S, b_o = kda_token(S, b_q * scale, b_k, b_v, state_decay(b_g, PER_HEAD_GATE), b_beta)
        tl.store(o + ((b * L + t) * H + h).to(tl.int64) * V + ov, b_o.to(o.dtype.element_ty))
        slot = tl.load(slots + t).to(tl.int64)
        if slot >= 0:
            tl.store(state + slot * (H * K * V) + tile, S)


@triton.jit
def short_conv_row(weights, h0, h1, h2, x):
    """Pre-activation conv output of one group's channels from its taps, a right-aligned window and the new row."""
    w0, w1, w2, w3 = weights
    return w0 * h0 + w1 * h1 + w2 * h2 + w3 * x


@triton.jit
def silu_rounded(pre, dtype: tl.constexpr):
    """SiLU rounded to the projections' dtype, as the unfused path stores the conv output."""
    return activate(pre, 1).to(dtype).to(tl.float32)


@triton.jit
def _fused_token_inputs(qkv, z, beta_logits, token, h, ok, ov, C, x_stride, beta_stride, K: tl.constexpr):
    """A token's projected q, k, v rows, gate input z and beta logit for head h, as stored (qkv and beta rows
    `x_stride` / `beta_stride` elements apart: views of the fused input projection)."""
    x_row = qkv + token * x_stride + h * K
    return (tl.load(x_row + ok), tl.load(x_row + C + ok), tl.load(x_row + 2 * C + ov),
            tl.load(z + token * C + h * K + ok), tl.load(beta_logits + token * beta_stride + h))


@triton.jit(do_not_specialize=["L"])
def _fused_kda_decode_kernel(
    qkv, conv_weight, conv_state, z, A_log, dt_bias, beta_logits, state, o, state_slots, num_accepted,
    scale, lower_bound, L, x_stride, beta_stride,
    H: tl.constexpr, K: tl.constexpr, W: tl.constexpr, BV: tl.constexpr, USE_LOWER_BOUND: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    C = H * K
    # AOTInductor passes Python floats as fp64 scalars: fp64 would leak into the fp32 state recurrence
    scale = tl.cast(scale, tl.float32)
    lower_bound = tl.cast(lower_bound, tl.float32)
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    ok = tl.arange(0, K)
    # the V axis as [NV, BV] blocks: a state tile [NV, K, BV] keeps K spread over lanes and warps, so each
    # K-vector (q, k, g) costs few registers per thread
    ov = tl.arange(0, K // BV)[:, None] * BV + tl.arange(0, BV)[None, :]
    # the head's constants and the first token's inputs do not depend on the slots: loaded first (and the next
    # token's before a step), they arrive with the state instead of one round trip after another behind the layout
    # changes' barriers (as _recurrent_kda_pool_kernel)
    taps_q = load_short_weights(conv_weight, h * K + ok, W)
    taps_k = load_short_weights(conv_weight + C * W, h * K + ok, W)
    taps_v = load_short_weights(conv_weight + 2 * C * W, h * K + ov, W)
    dt = tl.load(dt_bias + h * K + ok).to(tl.float32)
    rate = tl.exp(tl.load(A_log + h).to(tl.float32))
    n_xq, n_xk, n_xv, n_z, n_beta = _fused_token_inputs(qkv, z, beta_logits, (b * L).to(tl.int64), h, ok, ov, C,
                                                        x_stride, beta_stride, K)
    slots = state_slots + b * L
    first, start = slot_row(slots, num_accepted, b, L)
    if first < 0:
        for t in range(L):
            tl.store(o + ((b * L + t) * H + h).to(tl.int64) * K + ov, tl.zeros(ov.shape, o.dtype.element_ty))
        return
    tile = h * K * K + ok[None, :, None] * K + ov[:, None, :]
    S = tl.load(state + start * (H * K * K) + tile)
    window = conv_state + start * 3 * (W - 1) * C
    q0, q1, q2 = load_short_window(window, C, h * K + ok, W)
    k0, k1, k2 = load_short_window(window + (W - 1) * C, C, h * K + ok, W)
    v0, v1, v2 = load_short_window(window + 2 * (W - 1) * C, C, h * K + ov, W)
    dtype = qkv.dtype.element_ty
    tl.debug_barrier()
    for t in range(L):
        token = (b * L + t).to(tl.int64)
        xq = n_xq.to(tl.float32)
        xk = n_xk.to(tl.float32)
        xv = n_xv.to(tl.float32)
        z_t = n_z.to(tl.float32) + dt
        b_beta = tl.sigmoid(n_beta.to(tl.float32))
        if t + 1 < L:
            n_xq, n_xk, n_xv, n_z, n_beta = _fused_token_inputs(qkv, z, beta_logits, token + 1, h, ok, ov, C,
                                                                x_stride, beta_stride, K)
        b_q = silu_rounded(short_conv_row(taps_q, q0, q1, q2, xq), dtype)
        b_k = silu_rounded(short_conv_row(taps_k, k0, k1, k2, xk), dtype)
        b_v = silu_rounded(short_conv_row(taps_v, v0, v1, v2, xv), dtype)
        q0, q1, q2 = q1, q2, xq
        k0, k1, k2 = k1, k2, xk
        v0, v1, v2 = v1, v2, xv
        b_g = gate_decay(z_t, rate, lower_bound, USE_LOWER_BOUND)
        S, b_o = kda_token_split(S, l2_normalize(b_q) * scale, l2_normalize(b_k), b_v, tl.exp(b_g)[None, :, None],
                                 b_beta)
        tl.store(o + token * C + h * K + ov, b_o.to(o.dtype.element_ty))
        slot = tl.load(slots + t).to(tl.int64)
        if slot >= 0:
            tl.store(state + slot * (H * K * K) + tile, S)
            window = conv_state + slot * 3 * (W - 1) * C
            store_short_window(window, q0, q1, q2, C, h * K + ok, W)
            store_short_window(window + (W - 1) * C, k0, k1, k2, C, h * K + ok, W)
            store_short_window(window + 2 * (W - 1) * C, v0, v1, v2, C, h * K + ov, W)


def _is_pow2_at_least_16(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def check_pool(state: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor, shape: tuple) -> None:
    batch, length, heads, dim_k, dim_v = shape
    assert state.dtype == torch.float32 and state.is_contiguous(), "the state pool must be contiguous fp32"
    assert state.shape[1:] == (heads, dim_k, dim_v), f"state {tuple(state.shape)} vs [S, {heads}, {dim_k}, {dim_v}]"
    assert state_slots.shape == (batch, length) and state_slots.is_contiguous(), "state_slots must be [B, L]"
    assert num_accepted.shape == (batch,), "num_accepted must be [B]"
    assert _is_pow2_at_least_16(dim_k) and _is_pow2_at_least_16(dim_v), "K and V must be powers of two >= 16"
    torch._check(length <= MAX_STEP_TOKENS,
                 lambda: f"at most {MAX_STEP_TOKENS} tokens a row per decode call (1 + draft tokens), got {length}")


def _token_strides(x: torch.Tensor, heads: int, dim: int | None = None) -> tuple[int, int]:
    """(batch, token) strides of x [B, L, H, D] (or [B, L, H] when dim is None) whose [H, D] block per token is
    contiguous; B and L may be strided (views of a fused projection)."""
    inner = (heads,) if dim is None else (heads, dim)
    assert tuple(x.shape[2:]) == inner, f"expected [B, L, {', '.join(map(str, inner))}], got {tuple(x.shape)}"
    contiguous = x.stride(-1) == 1 or x.shape[-1] == 1
    if dim is not None:
        contiguous = contiguous and (x.stride(-2) == dim or heads == 1)
    assert contiguous, "each token's [H, D] block must be contiguous"
    return x.stride(0), x.stride(1)


def _launch_pipelined(q, k, v, g, beta, o, state, state_slots, scale, batch_strides, use_qk_l2norm, block_v, launch,
                      pdl):
    batch, _, key_heads, dim_k = k.shape
    heads, dim_v = v.shape[2:]
    num_tiles = batch * heads * (dim_v // block_v)
    programs = device_info.num_sms(v.device, cpu_default=2) * PIPELINED_PROGRAMS_PER_SM
    grid = torch.sym_max(1, torch.sym_min(num_tiles, programs))
    kernel = launch(pipelined_kda_pool_kernel) if launch else pipelined_kda_pool_kernel
    kernel[(grid,)](q, k, v, g, beta, o, state, state_slots, num_tiles, scale, *batch_strides, heads, key_heads,
                    dim_k, dim_v, block_v, use_qk_l2norm, g.dim() == 3, PIPELINED_STAGES, pdl, num_warps=1,
                    num_stages=PIPELINED_STAGES, **dependent_launch.launch_options(pdl))


def recurrent_kda_pool_launcher(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
    state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False, *, out: torch.Tensor | None = None, block_v: int | None = None,
    launch=None,
) -> torch.Tensor:
    """q, k [B, L, Hk, K], v [B, L, H, V], g [B, L, H, K] (per channel) or [B, L, H] (per head), beta [B, L, H];
    state [S, H, K, V] fp32 updated in place; value head h reads key head h // (H // Hk). Returns o [B, L, H, V] in
    v's dtype.

    The V axis is split over programs in blocks of `block_v` (default: 16 below LATENCY_BOUND_PAIRS (row, head)
    pairs, else 32; tests pick either). One warp a program: the sums over K then stay inside the warp (no cross-warp
    barrier per step). A one-token step (L = 1) on 16-wide blocks runs pipelined_pool_kernel.py: at B1 in graph
    replay 3.9 / 5.8 us at H32 / H96 against 4.7 / 6.5 us for the one-tile kernel (fla: 4.9 / 7.0); from B64 the
    one-tile kernel on 32-wide blocks is faster, 80-93% of copy against 74-87% (bench/bench_kda_decode.py).
    Latency-bound calls take PDL (dependent_launch.py: 3.4-3.5 / 5.6-5.9 us against 4.1-4.3 / 6.3-6.5 at B1 H32 /
    H96)."""
    batch, length, key_heads, dim_k = k.shape
    heads, dim_v = v.shape[2:]
    check_pool(state, state_slots, num_accepted, (batch, length, heads, dim_k, dim_v))
    assert heads % key_heads == 0, f"value heads ({heads}) must be a multiple of key heads ({key_heads})"
    strides = [_token_strides(x, h, dim) for x, h, dim in ((q, key_heads, dim_k), (k, key_heads, dim_k),
                                                            (v, heads, dim_v))]
    strides += [_token_strides(g, heads, dim_k if g.dim() == 4 else None), _token_strides(beta, heads)]
    if block_v is None:
        block_v = min(dim_v, 32 if batch * heads >= LATENCY_BOUND_PAIRS else 16)
    assert block_v <= dim_v and block_v & (block_v - 1) == 0, "block_v must be a power of two <= V"
    o = torch.empty(v.shape, dtype=v.dtype, device=v.device) if out is None else out
    scale = dim_k ** -0.5 if scale is None else scale
    pdl = dependent_launch.pdl_mode(state, latency_bound=batch * heads < LATENCY_BOUND_PAIRS)
    if block_v == 16 and statically_known_true(length == 1):
        _launch_pipelined(q, k, v, g, beta, o, state, state_slots, scale, [s for s, _ in strides],
                          use_qk_l2norm_in_kernel, block_v, launch, pdl)
        return o
    kernel = launch(_recurrent_kda_pool_kernel) if launch else _recurrent_kda_pool_kernel
    kernel[(batch * heads * (dim_v // block_v),)](
        q, k, v, g, beta, o, state, state_slots, num_accepted, scale, length,
        *(s for pair in strides for s in pair), heads, key_heads, dim_k, dim_v, block_v, use_qk_l2norm_in_kernel,
        g.dim() == 3, pdl, num_warps=1, **dependent_launch.launch_options(pdl),
    )
    return o


def fused_kda_decode_launcher(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, z: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, lower_bound: float | None, beta_logits: torch.Tensor, state: torch.Tensor,
    state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float | None = None, *,
    out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """One fused decode step (see reference.fused_kda_decode_reference): qkv [B, L, 3, H*K] -> o [B, L, H, K];
    conv_state [S, 3, W-1, H*K] and state [S, H, K, K] updated in place. qkv and beta_logits may be views of the
    fused input projection (tokens evenly strided, each token's block contiguous). One program per (row, head): the
    q/k windows it reads are shared by the whole head (and may be its write slot), so V is not split over programs;
    inside the program the state tile is blocked as [K/BV, K, BV]. PDL as in recurrent_kda_pool_launcher."""
    batch, length, heads, dim = z.shape
    width = conv_weight.shape[-1]
    check_pool(state, state_slots, num_accepted, (batch, length, heads, dim, dim))
    channels = heads * dim
    assert qkv.shape == (batch, length, 3, channels), f"qkv {tuple(qkv.shape)} vs [B, L, 3, {channels}]"
    assert conv_weight.shape == (3, channels, width), f"conv_weight {tuple(conv_weight.shape)}"
    assert 2 <= width <= 4, "the fused decode holds conv windows of at most 3 rows (W <= 4)"
    assert conv_state.shape[1:] == (3, width - 1, channels), f"conv_state {tuple(conv_state.shape)}"
    assert beta_logits.shape == (batch, length, heads), f"beta_logits {tuple(beta_logits.shape)}"
    assert A_log.numel() == heads and dt_bias.numel() == channels, "A_log [H], dt_bias [H*K]"
    for x in (conv_weight, conv_state, z, A_log, dt_bias):
        assert x.is_contiguous(), "fused_kda_decode needs contiguous weights, states and gate inputs"
    x_stride, beta_stride = flat_token_stride(qkv), flat_token_stride(beta_logits)
    assert lower_bound is None or lower_bound < 0, "lower_bound must be None or negative"
    block_v = min(dim, FUSED_BLOCK_V)
    o = torch.empty((batch, length, heads, dim), dtype=qkv.dtype, device=qkv.device) if out is None else out
    pdl = dependent_launch.pdl_mode(state, latency_bound=batch * heads < LATENCY_BOUND_PAIRS)
    kernel = launch(_fused_kda_decode_kernel) if launch else _fused_kda_decode_kernel
    kernel[(batch * heads,)](
        qkv, conv_weight, conv_state, z, A_log, dt_bias, beta_logits, state, o, state_slots, num_accepted,
        dim ** -0.5 if scale is None else scale, 0.0 if lower_bound is None else lower_bound, length, x_stride,
        beta_stride, heads, dim, width, block_v, lower_bound is not None, pdl, num_warps=FUSED_WARPS,
        **dependent_launch.launch_options(pdl),
    )
    return o
