"""Triton writes of pooled index keys (pooled_reference.py): the keys of the pools a step's tokens complete, in the
plain or MXFP8 pooled cache, and each sequence's window of its last kpool - 1 rows.

Prefill runs two launches: one program a token computes the pool its token completes (its members read from the
step's rows or, before the chunk's first position, from the sequence's window), then one program a sequence writes
the window back (loaded whole, a barrier, then stored: the old window may feed the new one). Decode runs one program
a sequence: the start window and the step's rows are loaded once into a register tile, a barrier, then each token
completes its pool and writes the window after it (so that a window written into the start slot cannot feed a later
token). A pool key is a softmax over the pool's rows per channel: every program owns whole rows (DI channels).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.paged_cache.formats import index_cache_shape, pooled_rows_per_page
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.kernel import quantize_rows
from dayzero.plugins.quant.reference import MX_BLOCK

# a kernel may read only constexpr globals
PAGE = tl.constexpr(PAGE_SIZE)


@triton.jit
def _spread(scalar, like):
    """A scalar as a vector shaped like `like` (a scalar condition and'ed with a vector one is not a mask the
    interpreter takes)."""
    return tl.zeros_like(like) + scalar


@triton.jit
def _gather_rows(rows, window, step_row, from_step, window_row, from_window, DI: tl.constexpr, DP: tl.constexpr):
    """(keys, gates) fp32 [R, DP] of R index rows: step row step_row[r] where from_step, flat window row
    window_row[r] (slot * (kpool - 1) + row) where from_window, zeros elsewhere."""
    d = tl.arange(0, DP)
    d_ok = (d < DI)[None, :]
    step = rows + tl.where(from_step, step_row, 0)[:, None] * (2 * DI) + d[None, :]
    past = window + tl.where(from_window, window_row, 0)[:, None] * (2 * DI) + d[None, :]
    new, old = from_step[:, None] & d_ok, from_window[:, None] & d_ok
    keys = tl.load(step, mask=new, other=0.0).to(tl.float32) + tl.load(past, mask=old, other=0.0).to(tl.float32)
    gates = (tl.load(step + DI, mask=new, other=0.0).to(tl.float32)
             + tl.load(past + DI, mask=old, other=0.0).to(tl.float32))
    return keys, gates


@triton.jit
def _pool_key(keys, gates, ape, member):
    """keys, gates, ape fp32 [R, DP], member [R] -> the softmax-over-members weighted key [DP] fp32."""
    logits = tl.where(member[:, None], gates + ape, float("-inf"))
    weights = tl.exp(logits - tl.max(logits, axis=0)[None, :])
    weights = tl.where(member[:, None], weights, 0.0)
    return tl.sum(weights * keys, axis=0) / tl.sum(weights, axis=0)


@triton.jit
def _store_pool_key(cache, key, slot, position, K: tl.constexpr, DI: tl.constexpr, DP: tl.constexpr,
                    ROWS: tl.constexpr, QUANT: tl.constexpr, RECIPROCAL_DIVIDE: tl.constexpr):
    """The pool ending at `position` (its token's physical row `slot`) <- key [DP]: row (position % PAGE_SIZE) // K
    of the token's page, plain [P, ROWS, DI] or MXFP8 page-major uint8 [P, ROWS * (DI + DI / 32)]."""
    page = slot // PAGE
    row = position % PAGE // K
    if QUANT:
        NB: tl.constexpr = DP // 32
        codes, e = quantize_rows(tl.reshape(key, (NB, 32)), RECIPROCAL_DIVIDE)
        b = tl.arange(0, NB)
        col = tl.arange(0, 32)
        live = b < DI // 32
        base = cache + page * (ROWS * (DI + DI // 32))
        tl.store(base + row * DI + b[:, None] * 32 + col[None, :], codes, mask=live[:, None])
        tl.store(base + ROWS * DI + row * (DI // 32) + b, (e + 127).to(tl.uint8), mask=live)
    else:
        d = tl.arange(0, DP)
        tl.store(cache + (page * ROWS + row) * DI + d, key.to(cache.dtype.element_ty), mask=d < DI)


@triton.jit
def _pool_embedding(ape, offset, member, DI: tl.constexpr, DP: tl.constexpr):
    """ape rows offset[r] (a member's place in its pool) -> fp32 [R, DP], zeros where not a member."""
    d = tl.arange(0, DP)
    mask = member[:, None] & (d < DI)[None, :]
    return tl.load(ape + tl.where(member, offset, 0)[:, None] * DI + d[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _pool_prefill_kernel(cache, window, rows, ape, slot_mapping, positions, first_token, start_slot,
                          K: tl.constexpr, KP: tl.constexpr, DI: tl.constexpr, DP: tl.constexpr, ROWS: tl.constexpr,
                          QUANT: tl.constexpr, RECIPROCAL_DIVIDE: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping + t).to(tl.int64)
    position = tl.load(positions + t).to(tl.int64)
    if (slot >= 0) & ((position + 1) % K == 0):
        start = tl.load(positions + tl.load(first_token + t).to(tl.int64)).to(tl.int64)
        held = tl.load(start_slot + t).to(tl.int64)
        i = tl.arange(0, KP)
        member = i < K
        q = position - K + 1 + i
        has_window = _spread(held, q) >= 0
        keys, gates = _gather_rows(rows, window, t - (position - q), member & (q >= start),
                                   held * (K - 1) + q - start + K - 1, member & (q < start) & has_window, DI, DP)
        key = _pool_key(keys, gates, _pool_embedding(ape, i, member, DI, DP), member)
        _store_pool_key(cache, key, slot, position, K, DI, DP, ROWS, QUANT, RECIPROCAL_DIVIDE)


@triton.jit
def _pool_window_kernel(window, rows, positions, cu_seqlens, slots, K: tl.constexpr, WP: tl.constexpr,
                           DI: tl.constexpr, D2P: tl.constexpr):
    """Sequence n's window after its chunk: its last K - 1 positions, from the chunk's rows or the old window."""
    n = tl.program_id(0).to(tl.int64)
    first = tl.load(cu_seqlens + n).to(tl.int64)
    length = tl.load(cu_seqlens + n + 1).to(tl.int64) - first
    slot = tl.load(slots + n).to(tl.int64)
    r = tl.arange(0, WP)
    c = tl.arange(0, D2P)
    live = (r < K - 1) & (_spread(slot, r) >= 0) & (_spread(length, r) > 0)
    start = tl.load(positions + tl.where(length > 0, first, 0)).to(tl.int64)
    q = start + length - (K - 1) + r
    new, old = live & (q >= start), live & (q < start)
    c_ok = (c < 2 * DI)[None, :]
    step = tl.load(rows + tl.where(new, first + q - start, 0)[:, None] * (2 * DI) + c[None, :],
                   mask=new[:, None] & c_ok, other=0.0)
    held = tl.load(window + (tl.maximum(slot, 0) * (K - 1) + tl.where(old, r + length, 0))[:, None] * (2 * DI)
                   + c[None, :], mask=old[:, None] & c_ok, other=0.0)
    values = tl.where(new[:, None], step.to(window.dtype.element_ty), held)
    tl.debug_barrier()
    tl.store(window + (tl.maximum(slot, 0) * (K - 1) + r)[:, None] * (2 * DI) + c[None, :], values,
             mask=live[:, None] & c_ok)


@triton.jit
def _pool_decode_kernel(cache, window, rows, ape, slot_mapping, positions, state_slots, num_accepted,
                   K: tl.constexpr, L: tl.constexpr, EP: tl.constexpr, DI: tl.constexpr, DP: tl.constexpr,
                   ROWS: tl.constexpr, QUANT: tl.constexpr, RECIPROCAL_DIVIDE: tl.constexpr):
    """Row b: its L tokens after the window in state_slots[b, num_accepted[b] - 1]. Extended row e < K - 1 is that
    window's row e, row K - 1 + t the step's token t."""
    b = tl.program_id(0).to(tl.int64)
    if tl.load(state_slots + b * L) >= 0:
        held = tl.load(state_slots + b * L + tl.load(num_accepted + b) - 1).to(tl.int64)
        e = tl.arange(0, EP)
        from_window = (e < K - 1) & (_spread(held, e) >= 0)
        from_step = (e >= K - 1) & (e < K - 1 + L)
        keys, gates = _gather_rows(rows, window, b * L + e - (K - 1), from_step, held * (K - 1) + e, from_window,
                                   DI, DP)
        d = tl.arange(0, DP)
        d_ok = (d < DI)[None, :]
        tl.debug_barrier()
        for t in tl.static_range(L):
            slot = tl.load(slot_mapping + b * L + t).to(tl.int64)
            position = tl.load(positions + b * L + t).to(tl.int64)
            if (slot >= 0) & ((position + 1) % K == 0):
                member = (e >= t) & (e < t + K)
                key = _pool_key(keys, gates, _pool_embedding(ape, e - t, member, DI, DP), member)
                _store_pool_key(cache, key, slot, position, K, DI, DP, ROWS, QUANT, RECIPROCAL_DIVIDE)
            out = tl.load(state_slots + b * L + t).to(tl.int64)
            after = (e > t) & (e < t + K) & (_spread(out, e) >= 0)
            dest_row = tl.maximum(out, 0) * (K - 1) + tl.where(after, e - t - 1, 0)
            dest = window + dest_row[:, None] * (2 * DI) + d[None, :]
            tl.store(dest, keys.to(window.dtype.element_ty), mask=after[:, None] & d_ok)
            tl.store(dest + DI, gates.to(window.dtype.element_ty), mask=after[:, None] & d_ok)


def _check(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor) -> tuple:
    """-> (kpool, DI, rows a pooled page, quantized)."""
    kpool, dim = ape.shape
    assert kpool >= 2 and rows.shape[-1] == 2 * dim and rows.is_contiguous() and ape.is_contiguous()
    assert window.shape[1:] == (kpool - 1, 2 * dim) and window.is_contiguous() and window.dtype == rows.dtype
    quantized = index_cache.dtype == torch.uint8
    assert not quantized or dim % MX_BLOCK == 0, f"MXFP8 pooled keys need DI a multiple of {MX_BLOCK}, got {dim}"
    assert index_cache.shape[1:] == index_cache_shape(1, dim, quantized, kpool)[1:] and index_cache.is_contiguous(), (
        f"pooled index cache {tuple(index_cache.shape)} for DI {dim}, kpool {kpool}")
    return kpool, dim, pooled_rows_per_page(kpool), quantized


def write_pooled_index_keys_prefill_launcher(
    index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor, slot_mapping: torch.Tensor,
    positions: torch.Tensor, cu_seqlens: torch.Tensor, slots: torch.Tensor, launch=None,
) -> None:
    """rows [T, 2 * DI] of a varlen prefill (sequence n after the window in slots[n], -1: none): the pools they
    complete into index_cache, each sequence's last window into its slot."""
    kpool, dim, page_rows, quantized = _check(index_cache, window, rows, ape)
    tokens, num_seqs = rows.shape[0], cu_seqlens.shape[0] - 1
    if tokens == 0 or num_seqs == 0:
        return
    # each token's sequence: the last whose start is at or before it (the whole table: a view at an offset is a lookup
    # table that Inductor misplaces)
    seq = torch.searchsorted(cu_seqlens, torch.arange(tokens, device=rows.device, dtype=cu_seqlens.dtype),
                             right=True) - 1
    dp = max(32, triton.next_power_of_2(dim))
    pools = launch(_pool_prefill_kernel) if launch else _pool_prefill_kernel
    pools[(tokens,)](index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens[seq].contiguous(),
                     slots[seq].contiguous(), kpool, triton.next_power_of_2(kpool), dim, dp, page_rows, quantized,
                     device_info.on_gpu(rows.device))
    write_back = launch(_pool_window_kernel) if launch else _pool_window_kernel
    write_back[(num_seqs,)](window, rows, positions, cu_seqlens, slots, kpool, triton.next_power_of_2(kpool - 1),
                            dim, triton.next_power_of_2(2 * dim))


def write_pooled_index_keys_decode_launcher(
    index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor, slot_mapping: torch.Tensor,
    positions: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor, launch=None,
) -> None:
    """rows [B, L, 2 * DI], slot_mapping / positions / state_slots [B, L] int, num_accepted [B]: each row's pools
    and its windows after every token."""
    kpool, dim, page_rows, quantized = _check(index_cache, window, rows, ape)
    batch, length = rows.shape[:2]
    assert state_slots.shape == (batch, length) and state_slots.is_contiguous() and slot_mapping.is_contiguous()
    assert positions.shape == (batch, length) and positions.is_contiguous() and num_accepted.shape == (batch,)
    if batch == 0:
        return
    kernel = launch(_pool_decode_kernel) if launch else _pool_decode_kernel
    kernel[(batch,)](index_cache, window, rows, ape, slot_mapping, positions, state_slots, num_accepted, kpool,
                     length, triton.next_power_of_2(kpool - 1 + length), dim, max(32, triton.next_power_of_2(dim)),
                     page_rows, quantized, device_info.on_gpu(rows.device))
