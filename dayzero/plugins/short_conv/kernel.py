"""Triton causal depthwise short convolution over slot-addressed history windows (prefill and decode).

Layouts as in `reference.py`: x [T, G, C] (prefill) or [B, L, G, C] (decode), weight [G, C, W],
conv_state [num_slots, G, W-1, C]. All math is fp32. The window helpers below are shared with the fused KDA
decode kernel: during decode a window lives in registers as a circular buffer of W-1 rows, so a token never
rereads (or races with) the slot it writes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.token_rows import flat_token_stride

ACTIVATIONS = {"identity": 0, "silu": 1}
# sequences per block when a prefill program looks up its chunk in cu_seqlens
SEQ_BLOCK = 128


@triton.jit
def activate(y, ACT: tl.constexpr):
    if ACT == 1:
        y = y * tl.sigmoid(y)
    return y


@triton.jit
def load_window(row0, C, ch, mask_c, W: tl.constexpr, WP: tl.constexpr):
    """History [BC, WP] fp32, channel-major (column 0 oldest, columns >= W-1 zero); row0 points at window row 0,
    channel 0. Channel-major tiles reduce over taps into vectors laid out like the channels of a [C, *] tile."""
    pos = tl.arange(0, WP)
    mask = mask_c[:, None] & (pos[None, :] < W - 1)
    return tl.load(row0 + pos[None, :] * C + ch[:, None], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def conv_step(win, t, x_t, w_ptr, ch, mask_c, W: tl.constexpr, WP: tl.constexpr):
    """Token t through the circular window: returns (pre-activation y [BC], window with x_t in place of the oldest).

    Before token t the oldest column sits at position t % (W-1); w_ptr points at weight[g, 0, 0].
    """
    pos = tl.arange(0, WP)
    oldest = t % (W - 1)
    age = (pos - oldest + (W - 1)) % (W - 1)
    mask = mask_c[:, None] & (pos[None, :] < W - 1)
    w_hist = tl.load(w_ptr + ch[:, None] * W + age[None, :], mask=mask, other=0.0).to(tl.float32)
    w_new = tl.load(w_ptr + ch * W + (W - 1), mask=mask_c, other=0.0).to(tl.float32)
    y = tl.sum(win * w_hist, axis=1) + x_t * w_new
    win = tl.where(pos[None, :] == oldest, x_t[:, None], win)
    return y, win


@triton.jit
def store_window(row0, win, t, C, ch, mask_c, W: tl.constexpr, WP: tl.constexpr):
    """Write the window after token t (circular order) back in chronological order at row0."""
    pos = tl.arange(0, WP)
    oldest = (t + 1) % (W - 1)
    age = (pos - oldest + (W - 1)) % (W - 1)
    mask = mask_c[:, None] & (pos[None, :] < W - 1)
    tl.store(row0 + age[None, :] * C + ch[:, None], win.to(row0.dtype.element_ty), mask=mask)


@triton.jit
def load_short_window(row0, C, ch, W: tl.constexpr):
    """A window of W-1 <= 3 rows as three [BC] fp32 vectors h0, h1, h2 (oldest first, right-aligned: missing rows
    are zero). Vectors, unlike a [BC, WP] tile, impose no 2-D layout on the kernel that holds them."""
    h2 = tl.load(row0 + (W - 2) * C + ch).to(tl.float32)
    h1 = tl.zeros_like(h2)
    h0 = tl.zeros_like(h2)
    if W >= 3:
        h1 = tl.load(row0 + (W - 3) * C + ch).to(tl.float32)
    if W >= 4:
        h0 = tl.load(row0 + (W - 4) * C + ch).to(tl.float32)
    return h0, h1, h2


@triton.jit
def load_short_weights(w_ptr, ch, W: tl.constexpr):
    """Taps w0..w3 [BC] fp32 right-aligned like `load_short_window` (w3 multiplies the new row); w_ptr at weight[g]."""
    w3 = tl.load(w_ptr + ch * W + (W - 1)).to(tl.float32)
    w2 = tl.load(w_ptr + ch * W + (W - 2)).to(tl.float32)
    w1 = tl.zeros_like(w3)
    w0 = tl.zeros_like(w3)
    if W >= 3:
        w1 = tl.load(w_ptr + ch * W + (W - 3)).to(tl.float32)
    if W >= 4:
        w0 = tl.load(w_ptr + ch * W + (W - 4)).to(tl.float32)
    return w0, w1, w2, w3


@triton.jit
def store_short_window(row0, h0, h1, h2, C, ch, W: tl.constexpr):
    """Write a right-aligned window of W-1 <= 3 rows back in chronological order at row0."""
    tl.store(row0 + (W - 2) * C + ch, h2.to(row0.dtype.element_ty))
    if W >= 3:
        tl.store(row0 + (W - 3) * C + ch, h1.to(row0.dtype.element_ty))
    if W >= 4:
        tl.store(row0 + (W - 4) * C + ch, h0.to(row0.dtype.element_ty))


@triton.jit(do_not_specialize=["L"])
def _short_conv_decode_kernel(
    x, weight, conv_state, y, state_slots, num_accepted, L, x_stride,
    G: tl.constexpr, C: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, BC: tl.constexpr, ACT: tl.constexpr,
):
    b = tl.program_id(0)
    grp = tl.program_id(1)
    ch = tl.program_id(2) * BC + tl.arange(0, BC)
    mask_c = ch < C
    slots = state_slots + b * L
    rows = (b * L).to(tl.int64) * G * C + grp * C
    x_rows = (b * L).to(tl.int64) * x_stride + grp * C
    if tl.load(slots) < 0:
        for t in range(L):
            tl.store(y + rows + t * G * C + ch, tl.zeros([BC], tl.float32).to(y.dtype.element_ty), mask=mask_c)
        return
    start = tl.load(slots + tl.load(num_accepted + b) - 1).to(tl.int64)
    win = load_window(conv_state + (start * G + grp) * (W - 1) * C, C, ch, mask_c, W, WP)
    # every thread has read the start window before any thread overwrites it (the start slot may be written)
    tl.debug_barrier()
    w_ptr = weight + grp * C * W
    for t in range(L):
        x_t = tl.load(x + x_rows + t * x_stride + ch, mask=mask_c, other=0.0).to(tl.float32)
        pre, win = conv_step(win, t, x_t, w_ptr, ch, mask_c, W, WP)
        tl.store(y + rows + t * G * C + ch, activate(pre, ACT).to(y.dtype.element_ty), mask=mask_c)
        slot = tl.load(slots + t).to(tl.int64)
        if slot >= 0:
            store_window(conv_state + (slot * G + grp) * (W - 1) * C, win, t, C, ch, mask_c, W, WP)


@triton.jit
def _find_chunk(cu_seqlens, N, p, BT: tl.constexpr, NB: tl.constexpr):
    """Program p handles chunk `p - before` (BT tokens) of sequence n; n == N means none (p - before then counts
    the chunks past the last sequence). Returns (n, chunk)."""
    count = tl.zeros([NB], tl.int32)
    before = tl.zeros([NB], tl.int32)
    total = tl.zeros([NB], tl.int32)
    for n0 in range(0, N, NB):
        idx = n0 + tl.arange(0, NB)
        m = idx < N
        lo = tl.load(cu_seqlens + idx, mask=m, other=0).to(tl.int32)
        hi = tl.load(cu_seqlens + idx + 1, mask=m, other=0).to(tl.int32)
        chunks = (hi - lo + BT - 1) // BT
        ends = tl.cumsum(chunks, 0) + tl.sum(total, 0)
        done = m & (ends <= p)
        count += done.to(tl.int32)
        before += tl.where(done, chunks, 0)
        total += chunks
    return tl.sum(count, 0), p - tl.sum(before, 0)


@triton.jit
def _load_rows(x, conv_state, src, start, slot, grp, ch, mask, G: tl.constexpr, C: tl.constexpr, W: tl.constexpr):
    """Pre-conv rows src [R] of one sequence as [R, BC] fp32: x where src >= start, else the slot's history
    (zeros when slot < 0)."""
    from_x = src >= start
    xv = tl.load(x + (src[:, None] * G + grp) * C + ch[None, :], mask=mask & from_x[:, None], other=0.0)
    hist = (slot * G + grp) * (W - 1) + (W - 1) + (src - start)
    # rows before the start come from the history only when there is one (src >= start - (W-1) always)
    hist_end = tl.where(slot >= 0, start, start - W)
    hmask = mask & (src < hist_end)[:, None]
    hv = tl.load(conv_state + hist[:, None] * C + ch[None, :], mask=hmask, other=0.0)
    return xv.to(tl.float32) + hv.to(tl.float32)


@triton.jit(do_not_specialize=["T", "N", "slot_stride"])
def _short_conv_prefill_kernel(
    x, weight, conv_state, y, cu_seqlens, slots, slot_stride, T, N,
    G: tl.constexpr, C: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    NB: tl.constexpr, ACT: tl.constexpr,
):
    grp = tl.program_id(1)
    ch = tl.program_id(2) * BC + tl.arange(0, BC)
    mask_c = ch < C
    n, chunk = _find_chunk(cu_seqlens, N, tl.program_id(0), BT, NB)
    if n >= N:
        # tokens past the last sequence get zeros, as in the reference
        tok = tl.load(cu_seqlens + N).to(tl.int64) + chunk * BT + tl.arange(0, BT)
        mask = (tok < T)[:, None] & mask_c[None, :]
        tl.store(y + (tok[:, None] * G + grp) * C + ch[None, :], tl.zeros([BT, BC], tl.float32).to(
            y.dtype.element_ty), mask=mask)
        return
    start = tl.load(cu_seqlens + n).to(tl.int64)
    end = tl.load(cu_seqlens + n + 1).to(tl.int64)
    slot = tl.load(slots + n * slot_stride).to(tl.int64)
    tok = start + chunk * BT + tl.arange(0, BT)
    mask = (tok < end)[:, None] & mask_c[None, :]
    acc = tl.zeros([BT, BC], tl.float32)
    for j in tl.static_range(W):
        taps = _load_rows(x, conv_state, tok - (W - 1 - j), start, slot, grp, ch, mask, G, C, W)
        w_j = tl.load(weight + (grp * C + ch) * W + j, mask=mask_c, other=0.0).to(tl.float32)
        acc += taps * w_j[None, :]
    tl.store(y + (tok[:, None] * G + grp) * C + ch[None, :], activate(acc, ACT).to(y.dtype.element_ty), mask=mask)
    # the first chunk is the only reader of the history (BT >= W-1), so it alone writes the new window
    if (chunk == 0) & (slot >= 0):
        pos = tl.arange(0, WP)
        keep = (pos < W - 1)[:, None] & mask_c[None, :]
        window = _load_rows(x, conv_state, end - (W - 1) + pos, start, slot, grp, ch, keep, G, C, W)
        tl.debug_barrier()
        dst = conv_state + ((slot * G + grp) * (W - 1) + pos[:, None]) * C + ch[None, :]
        tl.store(dst, window.to(conv_state.dtype.element_ty), mask=keep)


def _check_conv(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, activation: str) -> tuple[int, ...]:
    groups, channels, width = weight.shape
    assert x.shape[-2:] == (groups, channels), f"x {tuple(x.shape)} vs weight {tuple(weight.shape)}"
    assert conv_state.shape[1:] == (groups, width - 1, channels), f"conv_state {tuple(conv_state.shape)}"
    assert width >= 2, "short conv needs a kernel width >= 2"
    assert weight.is_contiguous() and conv_state.is_contiguous(), "short conv needs contiguous weights and windows"
    assert activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}"
    return groups, channels, width


def window_rows(width: int) -> int:
    """Register rows that hold a window of width-1 history rows (a power of two, at least 2)."""
    return max(2, triton.next_power_of_2(width - 1))


def short_conv_decode_launcher(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, state_slots: torch.Tensor,
    num_accepted: torch.Tensor, activation: str = "silu", *, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """x [B, L, G, C] -> y [B, L, G, C] (x's dtype, contiguous); conv_state [S, G, W-1, C] updated at state_slots
    [B, L]. x may be a view of a fused projection (tokens evenly strided, each token's [G, C] block contiguous)."""
    groups, channels, width = _check_conv(x, weight, conv_state, activation)
    batch, length = x.shape[:2]
    assert state_slots.shape == (batch, length) and state_slots.is_contiguous(), "state_slots must be [B, L]"
    assert num_accepted.shape == (batch,), "num_accepted must be [B]"
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    block = min(triton.next_power_of_2(channels), 256)
    kernel = launch(_short_conv_decode_kernel) if launch else _short_conv_decode_kernel
    kernel[(batch, groups, triton.cdiv(channels, block))](
        x, weight, conv_state, y, state_slots, num_accepted, length, flat_token_stride(x),
        groups, channels, width, window_rows(width), block, ACTIVATIONS[activation], num_warps=2,
    )
    return y


def short_conv_prefill_launcher(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, cu_seqlens: torch.Tensor, slots: torch.Tensor,
    activation: str = "silu", *, out: torch.Tensor | None = None, block_t: int = 32, launch=None,
) -> torch.Tensor:
    """x [T, G, C] varlen by cu_seqlens [N+1] -> y [T, G, C]; history and write-back at conv_state[slots[n]]."""
    groups, channels, width = _check_conv(x, weight, conv_state, activation)
    assert x.is_contiguous(), "short conv prefill needs contiguous rows"
    tokens, num_seqs = x.shape[0], cu_seqlens.shape[0] - 1
    assert slots.dim() == 1 and slots.shape[0] == num_seqs, f"slots must be [N={num_seqs}]"
    assert block_t >= width - 1 and block_t & (block_t - 1) == 0, "block_t must be a power of two >= W-1"
    y = torch.empty_like(x) if out is None else out
    block_c = min(triton.next_power_of_2(channels), 128)
    # chunks of all sequences + the chunks past the last one never exceed cdiv(T, BT) + N + 1
    grid = (triton.cdiv(tokens, block_t) + num_seqs + 1, groups, triton.cdiv(channels, block_c))
    kernel = launch(_short_conv_prefill_kernel) if launch else _short_conv_prefill_kernel
    kernel[grid](
        x, weight, conv_state, y, cu_seqlens, slots, slots.stride(0), tokens, num_seqs,
        groups, channels, width, window_rows(width), block_t, block_c, SEQ_BLOCK, ACTIVATIONS[activation],
        num_warps=8,
    )
    return y
