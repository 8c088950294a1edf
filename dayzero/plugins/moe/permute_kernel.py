"""Token permutation by expert and back, in Triton: a stable counting sort, no torch sort.

permute: the T*k assignments a = t*k + j are sorted stably by expert; both paths write the two index maps and copy
each token row, read once, to its k sorted rows, with no host sync.
Batch path (up to `BATCH_ASSIGNMENTS`, decode): one launch. Each block of whole tokens ranks its assignments against
the whole batch (the assignments to lower experts, and to the same expert before it), which is its sorted positions
with nothing shared between programs; the first row of programs also writes expert_offsets. Its work grows with
the square of the batch.
Block-count path (above): (1) each block ranks its assignments among the same expert's (pairwise within the block,
so stable), writes its count per expert (`block_counts[b, e]`) and adds them to the per-expert totals. (2) Per
expert, the exclusive prefix of the totals gives expert_offsets, and the exclusive prefix of the block counts down
the blocks turns `block_counts` (in place) into each block's first sorted position per expert. (3) Each block ranks
again, which with (2) gives every assignment's sorted position. Two memsets and three launches; the bytes are the
ids, the [blocks, E] counts, the index maps and the rows (T*D read, T*k*D written).
unpermute: per token, the weighted sum of its k rows of y_sorted (gathered through the inverse positions, so no
atomics and a fixed summation order) plus its optional `shared` row (the shared experts' output), in fp32, cast
once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import device as device_info


@triton.jit
def _block_ids(ids, b, T, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """Block `b`'s tokens [BLOCK_T], slots [BLOCK_K], and its expert ids and valid mask [BLOCK_T, BLOCK_K]."""
    tok = b * BLOCK_T + tl.arange(0, BLOCK_T)
    j = tl.arange(0, BLOCK_K)
    valid = (tok < T)[:, None] & (j < TOP_K)[None, :]
    e = tl.load(ids + tok.to(tl.int64)[:, None] * TOP_K + j[None, :], mask=valid, other=0).to(tl.int32)
    return tok, j, e, valid


@triton.jit
def _block_ranks(ids, b, T, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """Block `b`'s tokens, slots, expert ids, valid mask, and per assignment ([BLOCK_T, BLOCK_K] int32) the number of
    the block's assignments to its expert before it (stable, in a = t*k + j order) and in all."""
    tok, j, e, valid = _block_ids(ids, b, T, TOP_K, BLOCK_T, BLOCK_K)
    flat = tl.reshape(tl.where(valid, e, -1), [BLOCK_T * BLOCK_K])
    i = tl.arange(0, BLOCK_T * BLOCK_K)
    same = flat[:, None] == flat[None, :]
    rank = tl.sum((same & (i[None, :] < i[:, None])).to(tl.int32), axis=1)
    count = tl.sum(same.to(tl.int32), axis=1)
    return (tok, j, e, valid, tl.reshape(rank, [BLOCK_T, BLOCK_K]), tl.reshape(count, [BLOCK_T, BLOCK_K]))


@triton.jit
def _batch_positions(ids, tok, j, e, valid, N, E, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
                     CHUNK_A: tl.constexpr):
    """Sorted positions [BLOCK_T, BLOCK_K] of a block's assignments among all N of the batch: the assignments to lower
    experts, and to the same expert before it (a = t*k + j order)."""
    a = tl.reshape(tok[:, None] * TOP_K + j[None, :], [BLOCK_T * BLOCK_K])
    mine = tl.reshape(tl.where(valid, e, E), [BLOCK_T * BLOCK_K])
    pos = tl.zeros([BLOCK_T * BLOCK_K], tl.int32)
    for a0 in range(0, N, CHUNK_A):
        other_a = a0 + tl.arange(0, CHUNK_A)
        # padding reads as expert E: after every real assignment, so it moves no position
        other = tl.load(ids + other_a, mask=other_a < N, other=E).to(tl.int32)
        same_earlier = (other[None, :] == mine[:, None]) & (other_a[None, :] < a[:, None])
        before = (other[None, :] < mine[:, None]) | same_earlier
        pos += tl.sum(before.to(tl.int32), axis=1)
    return tl.reshape(pos, [BLOCK_T, BLOCK_K])


@triton.jit
def _batch_offsets(ids, expert_offsets, N, E, CHUNK_A: tl.constexpr, CHUNK_E: tl.constexpr):
    """expert_offsets[c] = the assignments to experts below c, for c in 0..E; the programs of the calling row share
    the expert chunks."""
    for c0 in range(tl.program_id(1) * CHUNK_E, E + 1, tl.num_programs(1) * CHUNK_E):
        c = c0 + tl.arange(0, CHUNK_E)
        below = tl.zeros([CHUNK_E], tl.int32)
        for a0 in range(0, N, CHUNK_A):
            a = a0 + tl.arange(0, CHUNK_A)
            e = tl.load(ids + a, mask=a < N, other=E).to(tl.int32)
            below += tl.sum((e[None, :] < c[:, None]).to(tl.int32), axis=1)
        tl.store(expert_offsets + c, below, mask=c <= E)


@triton.jit
def _write_permutation(x, x_sorted, sorted_assignments, assignment_positions, tok, j, valid, pos, T, D,
                       TOP_K: tl.constexpr, BLOCK_D: tl.constexpr):
    """Both index maps (by the first column program) and this program's columns of the block's k sorted rows."""
    pos = pos.to(tl.int64)
    if tl.program_id(1) == 0:
        a = tok.to(tl.int64)[:, None] * TOP_K + j[None, :]
        tl.store(assignment_positions + a, pos, mask=valid)
        tl.store(sorted_assignments + pos, a, mask=valid)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (tok < T)[:, None] & (cols < D)[None, :]
    # each token row is read once and written to its k sorted rows
    rows = tl.load(x + tok.to(tl.int64)[:, None] * D + cols[None, :], mask=mask)
    for slot in range(TOP_K):
        p = tl.sum(tl.where(j[None, :] == slot, pos, 0), axis=1)
        tl.store(x_sorted + p[:, None] * D + cols[None, :], rows, mask=mask)


@triton.jit
def _permute_batch_kernel(x, ids, x_sorted, sorted_assignments, assignment_positions, expert_offsets, T, D, E,
                          TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
                          CHUNK_A: tl.constexpr, CHUNK_E: tl.constexpr):
    b = tl.program_id(0)
    tok, j, e, valid = _block_ids(ids, b, T, TOP_K, BLOCK_T, BLOCK_K)
    pos = _batch_positions(ids, tok, j, e, valid, T * TOP_K, E, TOP_K, BLOCK_T, BLOCK_K, CHUNK_A)
    if b == 0:
        _batch_offsets(ids, expert_offsets, T * TOP_K, E, CHUNK_A, CHUNK_E)
    _write_permutation(x, x_sorted, sorted_assignments, assignment_positions, tok, j, valid, pos, T, D, TOP_K, BLOCK_D)


@triton.jit
def _block_counts_kernel(ids, block_counts, totals, T, E, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    # block_counts and totals arrive zeroed; each expert's first assignment in the block writes the block's count
    b = tl.program_id(0)
    _, _, e, valid, rank, count = _block_ranks(ids, b, T, TOP_K, BLOCK_T, BLOCK_K)
    first = valid & (rank == 0)
    tl.store(block_counts + b.to(tl.int64) * E + e, count, mask=first)
    tl.atomic_add(totals + e, count, mask=first)


@triton.jit
def _block_starts_kernel(block_counts, totals, expert_offsets, num_blocks, E, CHUNK_E: tl.constexpr,
                         BLOCK_B: tl.constexpr, NUM_BINS: tl.constexpr):
    # expert_offsets[c] = rows of experts below c; block_counts[b, c] becomes expert_offsets[c] + rows of expert c
    # in blocks before b (each program owns CHUNK_E columns, so the in-place rewrite reads before it writes)
    c = tl.program_id(0) * CHUNK_E + tl.arange(0, CHUNK_E)
    every = tl.arange(0, NUM_BINS)
    total = tl.load(totals + every, mask=every < E, other=0)
    start = tl.sum(tl.where(every[None, :] < c[:, None], total[None, :], 0), axis=1)
    tl.store(expert_offsets + c, start, mask=c <= E)
    for b0 in range(0, num_blocks, BLOCK_B):
        rows = b0 + tl.arange(0, BLOCK_B)
        mask = (rows < num_blocks)[:, None] & (c < E)[None, :]
        ptrs = block_counts + rows.to(tl.int64)[:, None] * E + c[None, :]
        count = tl.load(ptrs, mask=mask, other=0)
        tl.store(ptrs, start[None, :] + tl.cumsum(count, axis=0) - count, mask=mask)
        start += tl.sum(count, axis=0)


@triton.jit
def _permute_rows_kernel(x, ids, block_starts, x_sorted, sorted_assignments, assignment_positions, T, D, E,
                         TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    tok, j, e, valid, rank, _ = _block_ranks(ids, b, T, TOP_K, BLOCK_T, BLOCK_K)
    pos = tl.load(block_starts + b.to(tl.int64) * E + e, mask=valid, other=0) + rank
    _write_permutation(x, x_sorted, sorted_assignments, assignment_positions, tok, j, valid, pos, T, D, TOP_K, BLOCK_D)


@triton.jit
def _unpermute_kernel(y_sorted, weights, assignment_positions, shared, out, D, TOP_K: tl.constexpr,
                      BLOCK_D: tl.constexpr, HAS_SHARED: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    acc = tl.zeros([BLOCK_D], tl.float32)
    for j in tl.static_range(TOP_K):
        p = tl.load(assignment_positions + t * TOP_K + j).to(tl.int64)
        w = tl.load(weights + t * TOP_K + j).to(tl.float32)
        acc += w * tl.load(y_sorted + p * D + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_SHARED:
        acc += tl.load(shared + t * D + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + t * D + cols, acc.to(out.dtype.element_ty), mask=mask)


def _row_block(dim: int) -> int:
    return min(triton.next_power_of_2(dim), 2048)


def _buffer(given: torch.Tensor | None, shape: tuple, like: torch.Tensor) -> torch.Tensor:
    if given is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    assert given.shape == shape and given.dtype == like.dtype and given.is_contiguous(), (
        f"output buffer {tuple(given.shape)} {given.dtype}, expected {shape} {like.dtype}")
    return given


def _permute_config(top_k: int, dim: int, device: torch.device) -> dict:
    block_k = triton.next_power_of_2(top_k)
    # up to 512 assignments (64 tokens of top-8) a program ranks its block against the batch in 512 x 128 compares,
    # cheaper than the two launches and two memsets of the block-count path
    if not device_info.on_gpu(device):
        # tiny blocks and chunks under the interpreter, so that the tests cross their boundaries
        return dict(BLOCK_T=2, BLOCK_K=block_k, BLOCK_D=min(triton.next_power_of_2(dim), 16), BLOCK_B=2, CHUNK_E=4,
                    CHUNK_A=8, BATCH_ASSIGNMENTS=512)
    # ~128 assignments a block keeps the pairwise rank at 128 x 128; 256-column row chunks give the copy ~10K
    # programs at the model shapes
    return dict(BLOCK_T=max(1, 128 // block_k), BLOCK_K=block_k, BLOCK_D=min(triton.next_power_of_2(dim), 256),
                BLOCK_B=256, CHUNK_E=16, CHUNK_A=64, BATCH_ASSIGNMENTS=512)


def permute_launcher(
    x: torch.Tensor, ids: torch.Tensor, num_experts: int, out: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [T, D], ids [T, k] int64 in [0, E) -> (x_sorted [T*k, D] (into `out` if given), sorted_assignments [T*k]
    int64, assignment_positions [T*k] int64, expert_offsets [E+1] int32). Block sizes from _permute_config; one
    launch for a batch of up to BATCH_ASSIGNMENTS assignments, three (and two memsets) above."""
    assert x.dim() == 2 and x.is_contiguous() and ids.dim() == 2 and ids.shape[0] == x.shape[0]
    assert ids.dtype == torch.int64 and ids.is_contiguous(), "expert ids must be contiguous int64 [T, k]"
    n = ids.numel()
    x_sorted = _buffer(out, (n, x.shape[1]), x)
    sorted_assignments = torch.empty(n, dtype=torch.int64, device=x.device)
    positions = torch.empty_like(sorted_assignments)
    if n == 0:
        return x_sorted, sorted_assignments, positions, torch.zeros(num_experts + 1, dtype=torch.int32,
                                                                    device=x.device)
    offsets = torch.empty(num_experts + 1, dtype=torch.int32, device=x.device)
    cfg = _permute_config(ids.shape[1], x.shape[1], x.device)
    # a traced batch whose range allows more takes the block-count path, without a guard that would narrow it
    path = _permute_batch if statically_known_true(n <= cfg["BATCH_ASSIGNMENTS"]) else _permute_blocks
    path(x, ids, num_experts, x_sorted, sorted_assignments, positions, offsets, cfg, launch)
    return x_sorted, sorted_assignments, positions, offsets


def _permute_batch(x, ids, num_experts, x_sorted, sorted_assignments, positions, offsets, cfg, launch) -> None:
    (tokens, dim), top_k = x.shape, ids.shape[1]
    kernel = launch(_permute_batch_kernel) if launch else _permute_batch_kernel
    kernel[(triton.cdiv(tokens, cfg["BLOCK_T"]), triton.cdiv(dim, cfg["BLOCK_D"]))](
        x, ids, x_sorted, sorted_assignments, positions, offsets, tokens, dim, num_experts, top_k, cfg["BLOCK_T"],
        cfg["BLOCK_K"], cfg["BLOCK_D"], cfg["CHUNK_A"], cfg["CHUNK_E"], num_warps=4)


def _permute_blocks(x, ids, num_experts, x_sorted, sorted_assignments, positions, offsets, cfg, launch) -> None:
    (tokens, dim), top_k = x.shape, ids.shape[1]
    num_blocks = triton.cdiv(tokens, cfg["BLOCK_T"])
    # two whole buffers, not rows of one: Inductor 2.11 functionalizes a kernel's writes into slices of a scratch
    # tensor wrongly (tests/export/test_symbolic_launch_plans.py)
    block_counts = torch.zeros(num_blocks, num_experts, dtype=torch.int32, device=x.device)
    totals = torch.zeros(num_experts, dtype=torch.int32, device=x.device)
    counts_kernel = launch(_block_counts_kernel) if launch else _block_counts_kernel
    counts_kernel[(num_blocks,)](ids, block_counts, totals, tokens, num_experts, top_k, cfg["BLOCK_T"],
                                 cfg["BLOCK_K"], num_warps=4)
    starts_kernel = launch(_block_starts_kernel) if launch else _block_starts_kernel
    starts_kernel[(triton.cdiv(num_experts + 1, cfg["CHUNK_E"]),)](
        block_counts, totals, offsets, num_blocks, num_experts, cfg["CHUNK_E"], cfg["BLOCK_B"],
        triton.next_power_of_2(num_experts), num_warps=4)
    rows_kernel = launch(_permute_rows_kernel) if launch else _permute_rows_kernel
    rows_kernel[(num_blocks, triton.cdiv(dim, cfg["BLOCK_D"]))](
        x, ids, block_counts, x_sorted, sorted_assignments, positions, tokens, dim, num_experts, top_k,
        cfg["BLOCK_T"], cfg["BLOCK_K"], cfg["BLOCK_D"], num_warps=4)


def unpermute_launcher(
    y_sorted: torch.Tensor, weights: torch.Tensor, assignment_positions: torch.Tensor,
    shared: torch.Tensor | None = None, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """y_sorted [T*k, D], weights [T, k], assignment_positions [T*k], shared [T, D] or None -> the weighted sum plus
    shared [T, D] in y's dtype (into `out`)."""
    tokens, top_k = weights.shape
    assert y_sorted.dim() == 2 and y_sorted.shape[0] == tokens * top_k and y_sorted.is_contiguous()
    assert weights.is_contiguous() and assignment_positions.shape == (tokens * top_k,)
    dim = y_sorted.shape[1]
    if shared is not None:
        assert shared.shape == (tokens, dim) and shared.is_contiguous(), f"shared must be contiguous [{tokens}, {dim}]"
    out = _buffer(out, (tokens, dim), y_sorted)
    if tokens == 0:
        return out
    block_d = _row_block(dim)
    kernel = launch(_unpermute_kernel) if launch else _unpermute_kernel
    kernel[(tokens, triton.cdiv(dim, block_d))](y_sorted, weights, assignment_positions,
                                                y_sorted if shared is None else shared, out, dim, top_k, block_d,
                                                shared is not None, num_warps=4)
    return out
