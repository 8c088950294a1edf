"""What the chunked KDA kernels share: the chunk geometry and finding a global chunk's sequence on the device."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 64
BT = tl.constexpr(CHUNK)  # chunk length
BC = tl.constexpr(16)  # rows of a sub-chunk: the unit of the intra-chunk dots and of the triangular solve
# largest exponent of a factored decay: e^80 times a factor <= 1 stays far from fp32 overflow
EXP_CAP = tl.constexpr(80.0)


@triton.jit
def chunk_span(bounds, pid):
    """(first token of global chunk `pid`, end of its sequence, live) from the [chunks, 2] table of chunk_tables:
    two independent loads, where a search over the sequences would put one dependent load per sequence before
    every program's first data load."""
    start = tl.load(bounds + 2 * pid).to(tl.int64)
    eos = tl.load(bounds + 2 * pid + 1).to(tl.int64)
    return start, eos, start < eos


@triton.jit
def _chunk_tables_kernel(cu_seqlens, offsets, bounds, N, num_chunks, BLOCK: tl.constexpr, SEQS: tl.constexpr):
    ids = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # the owner of chunk id is the last sequence whose first chunk is <= id (first chunks never decrease along the
    # sequences, so sequences of no tokens own nothing): count the sequences at or before id, and keep the largest
    # first chunk among them
    owners = tl.zeros([BLOCK], tl.int32)
    owner_first = tl.zeros([BLOCK], tl.int32)
    before = 0
    for n0 in range(0, N, SEQS):
        n = n0 + tl.arange(0, SEQS)
        in_range = n < N
        lengths = tl.load(cu_seqlens + n + 1, mask=in_range, other=0) - tl.load(cu_seqlens + n, mask=in_range, other=0)
        counts = (lengths + BT - 1) // BT
        first = before + tl.cumsum(counts, axis=0) - counts
        # the first program writes the offsets (a scalar & a tensor mask trips the interpreter: the bound carries it)
        tl.store(offsets + n, first, mask=n < tl.where(tl.program_id(0) == 0, N, 0))
        owns = (first[None, :] <= ids[:, None]) & in_range[None, :]
        owners += tl.sum(owns.to(tl.int32), axis=1)
        owner_first = tl.maximum(owner_first, tl.max(tl.where(owns, first[None, :], 0), axis=1))
        before += tl.sum(counts, axis=0)
    owner = owners - 1
    start = tl.load(cu_seqlens + owner) + (ids - owner_first) * BT
    end = tl.load(cu_seqlens + owner + 1)
    # chunks past the last sequence's end (the grid's upper bound on the chunk count) come out dead: start >= end
    live = ids < num_chunks
    tl.store(bounds + 2 * ids, start, mask=live)
    tl.store(bounds + 2 * ids + 1, end, mask=live)


@triton.jit
def row_of(tile, rows, r):
    """Row r of a [R, X] tile as an [X] vector."""
    return tl.sum(tl.where(rows[:, None] == r, tile, 0.0), axis=0)


@triton.jit
def load_rows(ptr, t, valid, h, H: tl.constexpr, D: tl.constexpr, cols):
    """rows t of a [T, H, D] tensor at head h, columns cols -> fp32 [len(t), len(cols)] (0 outside)."""
    offs = (t[:, None] * H + h) * D + cols[None, :]
    return tl.load(ptr + offs, mask=valid[:, None] & (cols[None, :] < D), other=0.0).to(tl.float32)


@triton.jit
def load_lower(ptr, t, valid, h, H: tl.constexpr, rows):
    """The lower triangle (with the diagonal) of a chunk's [BT, BT] matrix stored as [T, H, BT], zero above it.

    The intra-chunk kernels write the blocks on and below the diagonal only, so the rest holds whatever the buffer
    held (NaN too): the rows are loaded whole and the upper triangle is selected away after the load. A load masked
    by the triangle cannot be vectorized (the sm_90 build issued 32 two-byte loads a thread for a 64 x 64 bf16 tile,
    and the state kernel's software pipeline could not stage it with cp.async)."""
    tile = tl.load(ptr + (t[:, None] * H + h) * BT + rows[None, :], mask=valid[:, None], other=0.0)
    return tl.where(rows[None, :] <= rows[:, None], tile, 0.0)


@triton.jit
def inverse_norm(sum_sq, USE_L2NORM: tl.constexpr):
    """1 / ||x|| from the row sums of squares (1 without L2 normalization)."""
    if USE_L2NORM:
        inv = 1.0 / tl.sqrt(sum_sq + 1e-6)
    else:
        inv = sum_sq * 0.0 + 1.0
    return inv


def chunk_tables(cu_seqlens: torch.Tensor, num_chunks: int, launch=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets int32 [N]: the first global chunk of each sequence; bounds int32 [num_chunks, 2]: the first token and
    the sequence end of every global chunk, for chunk_span), in one launch on the device (no host sync; the torch ops
    that found the offsets cost about as much host time as a kernel launch each). Chunks past the last sequence are
    dead: first token >= end."""
    N = cu_seqlens.shape[0] - 1
    offsets = torch.empty(N, device=cu_seqlens.device, dtype=torch.int32)
    bounds = torch.empty(num_chunks, 2, device=cu_seqlens.device, dtype=torch.int32)
    block = 128
    (launch or (lambda fn: fn))(_chunk_tables_kernel)[(triton.cdiv(num_chunks, block),)](
        cu_seqlens, offsets, bounds, N, num_chunks, BLOCK=block, SEQS=64, num_warps=4)
    return offsets, bounds
