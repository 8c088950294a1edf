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
def locate_chunk(cu_seqlens, chunk_offsets, N, pid):
    """(first token of global chunk `pid`, end of its sequence, valid): no host sync for varlen."""
    n = 0
    for i in range(1, N):
        n += (tl.load(chunk_offsets + i) <= pid).to(tl.int32)
    first = tl.load(chunk_offsets + n)
    bos = tl.load(cu_seqlens + n).to(tl.int64)
    eos = tl.load(cu_seqlens + n + 1).to(tl.int64)
    start = bos + (pid - first) * BT
    return start, eos, start < eos


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
