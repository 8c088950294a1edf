"""Token permutation by expert and back, in Triton (the sort itself is `torch.sort`, stable).

permute: after sorting the T*k expert ids, one kernel gathers each sorted row x[a // k] and records the inverse
position of its assignment a; another finds expert_offsets by binary search over the sorted ids.
unpermute: per token, the weighted sum of its k rows of y_sorted (gathered through the inverse positions, so no
atomics and a fixed summation order), accumulated in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _permute_rows_kernel(x, sorted_assignments, assignment_positions, x_sorted, D, TOP_K: tl.constexpr,
                         BLOCK_D: tl.constexpr):
    p = tl.program_id(0).to(tl.int64)
    a = tl.load(sorted_assignments + p)
    if tl.program_id(1) == 0:
        tl.store(assignment_positions + a, p)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    row = tl.load(x + (a // TOP_K) * D + cols, mask=mask)
    tl.store(x_sorted + p * D + cols, row, mask=mask)


@triton.jit
def _expert_offsets_kernel(sorted_experts, expert_offsets, n, steps, NUM_EXPERTS: tl.constexpr,
                           BLOCK_E: tl.constexpr):
    # expert_offsets[e] = number of sorted ids below e (a vectorized lower-bound search)
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    lo = tl.zeros([BLOCK_E], tl.int64)
    hi = tl.zeros([BLOCK_E], tl.int64) + n
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        below = tl.load(sorted_experts + mid, mask=active, other=0) < e
        lo = tl.where(active & below, mid + 1, lo)
        hi = tl.where(active & ~below, mid, hi)
    tl.store(expert_offsets + e, lo.to(tl.int32), mask=e <= NUM_EXPERTS)


@triton.jit
def _unpermute_kernel(y_sorted, weights, assignment_positions, out, D, TOP_K: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    acc = tl.zeros([BLOCK_D], tl.float32)
    for j in tl.static_range(TOP_K):
        p = tl.load(assignment_positions + t * TOP_K + j).to(tl.int64)
        w = tl.load(weights + t * TOP_K + j).to(tl.float32)
        acc += w * tl.load(y_sorted + p * D + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + t * D + cols, acc.to(out.dtype.element_ty), mask=mask)


def _row_block(dim: int) -> int:
    return min(triton.next_power_of_2(dim), 2048)


def _buffer(given: torch.Tensor | None, shape: tuple, like: torch.Tensor) -> torch.Tensor:
    if given is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    assert given.shape == shape and given.dtype == like.dtype and given.is_contiguous(), (
        f"output buffer {tuple(given.shape)} {given.dtype}, expected {shape} {like.dtype}")
    return given


def permute_launcher(
    x: torch.Tensor, ids: torch.Tensor, num_experts: int, out: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [T, D], ids [T, k] int64 -> (x_sorted [T*k, D] (into `out` if given), sorted_assignments [T*k] int64,
    assignment_positions [T*k] int64, expert_offsets [E+1] int32)."""
    assert x.dim() == 2 and x.is_contiguous() and ids.dim() == 2 and ids.shape[0] == x.shape[0]
    assert ids.dtype == torch.int64 and ids.is_contiguous(), "expert ids must be contiguous int64 [T, k]"
    tokens, dim = x.shape
    n = ids.numel()
    sorted_experts, sorted_assignments = torch.sort(ids.view(-1), stable=True)
    positions = torch.empty_like(sorted_assignments)
    x_sorted = _buffer(out, (n, dim), x)
    offsets = torch.empty(num_experts + 1, dtype=torch.int32, device=x.device)
    block_e = 256
    offsets_kernel = launch(_expert_offsets_kernel) if launch else _expert_offsets_kernel
    offsets_kernel[(triton.cdiv(num_experts + 1, block_e),)](sorted_experts, offsets, n, max(n, 1).bit_length(),
                                                             num_experts, block_e, num_warps=4)
    if n == 0:
        return x_sorted, sorted_assignments, positions, offsets
    block_d = _row_block(dim)
    rows_kernel = launch(_permute_rows_kernel) if launch else _permute_rows_kernel
    rows_kernel[(n, triton.cdiv(dim, block_d))](x, sorted_assignments, positions, x_sorted, dim, ids.shape[1],
                                                block_d, num_warps=4)
    return x_sorted, sorted_assignments, positions, offsets


def unpermute_launcher(
    y_sorted: torch.Tensor, weights: torch.Tensor, assignment_positions: torch.Tensor, out: torch.Tensor | None = None,
    launch=None,
) -> torch.Tensor:
    """y_sorted [T*k, D], weights [T, k], assignment_positions [T*k] -> [T, D] in y's dtype (into `out`)."""
    tokens, top_k = weights.shape
    assert y_sorted.dim() == 2 and y_sorted.shape[0] == tokens * top_k and y_sorted.is_contiguous()
    assert weights.is_contiguous() and assignment_positions.shape == (tokens * top_k,)
    dim = y_sorted.shape[1]
    out = _buffer(out, (tokens, dim), y_sorted)
    if tokens == 0:
        return out
    block_d = _row_block(dim)
    kernel = launch(_unpermute_kernel) if launch else _unpermute_kernel
    kernel[(tokens, triton.cdiv(dim, block_d))](y_sorted, weights, assignment_positions, out, dim, top_k, block_d,
                                                num_warps=4)
    return out
