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
    """(first token of global chunk `pid`, end of its sequence, live) from the [chunks, 2] table of chunk_bounds:
    two independent loads, where a search over the sequences would put one dependent load per sequence before
    every program's first data load."""
    start = tl.load(bounds + 2 * pid).to(tl.int64)
    eos = tl.load(bounds + 2 * pid + 1).to(tl.int64)
    return start, eos, start < eos


@triton.jit
def _chunk_bounds_kernel(cu_seqlens, offsets, bounds, N, num_chunks, BLOCK: tl.constexpr):
    ids = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # branchless binary search per chunk id for the last sequence whose first chunk is <= id (offsets is
    # non-decreasing, offsets[0] = 0): the answer stays in [lo, lo + size)
    lo = tl.zeros([BLOCK], tl.int32)
    # ceil(log2(N)) halvings, counted here so that the search is a for loop: Triton 3.6's coalesce pass crashes on a
    # while loop holding tensor loads (run ba)
    steps = 0
    for bit in range(0, 31):
        steps += ((N - 1) >> bit > 0).to(tl.int32)
    size = N
    for _ in range(steps):
        half = size // 2
        owns = tl.load(offsets + lo + half) <= ids
        lo = tl.where(owns, lo + half, lo)
        size -= half
    start = tl.load(cu_seqlens + lo) + (ids - tl.load(offsets + lo)) * BT
    end = tl.load(cu_seqlens + lo + 1)
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


def chunk_offsets(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """First global chunk id of each sequence [N] (on the device, no host sync)."""
    counts = (cu_seqlens[1:] - cu_seqlens[:-1] + CHUNK - 1) // CHUNK
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]]).to(torch.int32)


def chunk_bounds(cu_seqlens: torch.Tensor, offsets: torch.Tensor, num_chunks: int, launch=None) -> torch.Tensor:
    """int32 [num_chunks, 2]: (first token, end of its sequence) of every global chunk, dead chunks (past the last
    sequence) with first token >= end; found on the device (no host sync) for chunk_span."""
    N = cu_seqlens.shape[0] - 1
    bounds = torch.empty(num_chunks, 2, device=cu_seqlens.device, dtype=torch.int32)
    block = 128
    (launch or (lambda fn: fn))(_chunk_bounds_kernel)[(triton.cdiv(num_chunks, block),)](
        cu_seqlens, offsets, bounds, N, num_chunks, BLOCK=block, num_warps=4)
    return bounds
