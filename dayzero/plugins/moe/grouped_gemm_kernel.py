"""Triton grouped GEMM over expert-sorted rows: c[rows of e] = a[rows of e] @ b[e]^T, b [E, N, K] (nn.Linear
layout), rows of expert e = expert_offsets[e]:expert_offsets[e+1]. The gated form multiplies by two weights
(gate w1, up w3) and applies the activation in the epilogue, writing act(a w1^T) * (a w3^T) directly.

Tiles: the grid's first axis walks N tiles (so the programs that share an A tile run together), the second walks
M tiles of all experts in order; a program finds its expert from the running sum of per-expert tile counts (all
E offsets fit in registers). The grid has an upper bound of M tiles, cdiv(M, BLOCK_M) + min(E, M); programs past
the last tile return at once. This is the fallback where torch._grouped_mm is missing (and the path the CPU
interpreter tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.moe.activation_kernel import ACTIVATION_CODES, gated_act


@triton.jit
def _tile_rows(expert_offsets, tile, NUM_EXPERTS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr):
    """(expert, first row, end row) of M tile `tile`; expert == NUM_EXPERTS past the last tile."""
    e = tl.arange(0, BLOCK_E)
    starts = tl.load(expert_offsets + e, mask=e < NUM_EXPERTS, other=0)
    ends = tl.load(expert_offsets + e + 1, mask=e < NUM_EXPERTS, other=0)
    tiles = (ends - starts + BLOCK_M - 1) // BLOCK_M
    tiles_through = tl.cumsum(tiles, axis=0)
    expert = tl.sum((tiles_through <= tile).to(tl.int32), axis=0)
    mine = e == expert
    first_tile = tl.sum(tl.where(mine, tiles_through - tiles, 0), axis=0)
    row_start = tl.sum(tl.where(mine, starts, 0), axis=0) + (tile - first_tile) * BLOCK_M
    return expert, row_start, tl.sum(tl.where(mine, ends, 0), axis=0)


@triton.jit
def _grouped_gemm_kernel(
    a, b, b_up, c, expert_offsets, N, K, beta, linear_beta,
    NUM_EXPERTS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GATED: tl.constexpr, ACTIVATION: tl.constexpr, HAS_LINEAR_BETA: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    expert, row_start, row_end = _tile_rows(expert_offsets, tl.program_id(1), NUM_EXPERTS, BLOCK_E, BLOCK_M)
    if expert >= NUM_EXPERTS:
        return
    rows = row_start + tl.arange(0, BLOCK_M)
    row_mask = rows < row_end
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a + rows.to(tl.int64)[:, None] * K + ks[None, :]
    # [BLOCK_K, BLOCK_N] tile of b[expert]^T
    b_offs = expert.to(tl.int64) * N * K + cols.to(tl.int64)[None, :] * K + ks[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = ks + k0 < K
        a_tile = tl.load(a_ptrs + k0, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b_mask = k_mask[:, None] & col_mask[None, :]
        b_tile = tl.load(b + b_offs + k0, mask=b_mask, other=0.0)
        if UPCAST:
            a_tile, b_tile = a_tile.to(tl.float32), b_tile.to(tl.float32)
        acc = tl.dot(a_tile, b_tile, acc, input_precision=PRECISION)
        if GATED:
            up_tile = tl.load(b_up + b_offs + k0, mask=b_mask, other=0.0)
            if UPCAST:
                up_tile = up_tile.to(tl.float32)
            acc_up = tl.dot(a_tile, up_tile, acc_up, input_precision=PRECISION)
    out_ty = c.dtype.element_ty
    if GATED:
        # gate and up are rounded to the output dtype first, as the unfused reference stores them
        acc = gated_act(acc.to(out_ty).to(tl.float32), acc_up.to(out_ty).to(tl.float32), beta, linear_beta,
                        ACTIVATION, HAS_LINEAR_BETA)
    c_ptrs = c + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(out_ty), mask=row_mask[:, None] & col_mask[None, :])


def _config(dtype: torch.dtype, gated: bool, device: torch.device) -> dict:
    if not device_info.on_gpu(device):
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    # bf16 on Hopper: shared memory per stage (64x64 + 2 x 64x128) x 2 B = 40 KB gated, so 4 stages fit in 228 KB
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4 if not gated else 8, num_stages=4)


def grouped_gemm_launcher(
    a: torch.Tensor, b: torch.Tensor, expert_offsets: torch.Tensor, b_up: torch.Tensor | None = None,
    activation: str = "silu", beta: float = 1.0, linear_beta: float | None = None, out: torch.Tensor | None = None,
    launch=None,
) -> torch.Tensor:
    """a [M, K] expert-sorted, b (and b_up) [E, N, K], expert_offsets [E+1] int32 -> [M, N] in a's dtype (into
    `out` if given).

    With b_up: act(a b^T) * (a b_up^T) (SwiGLU or SiTU), the expert MLP's hidden activations.
    """
    assert a.dim() == 2 and b.dim() == 3 and a.shape[1] == b.shape[2], f"a {tuple(a.shape)} vs b {tuple(b.shape)}"
    assert a.is_contiguous() and b.is_contiguous() and a.dtype == b.dtype, "grouped GEMM: contiguous, one dtype"
    assert expert_offsets.shape == (b.shape[0] + 1,) and expert_offsets.dtype == torch.int32
    if b_up is not None:
        assert b_up.shape == b.shape and b_up.is_contiguous() and b_up.dtype == b.dtype
    rows, (experts, n, k) = a.shape[0], b.shape
    c = torch.empty(rows, n, dtype=a.dtype, device=a.device) if out is None else out
    assert c.shape == (rows, n) and c.dtype == a.dtype and c.is_contiguous(), "grouped GEMM output buffer mismatch"
    if rows == 0:
        return c
    cfg = _config(a.dtype, b_up is not None, a.device)
    grid = (triton.cdiv(n, cfg["BLOCK_N"]), triton.cdiv(rows, cfg["BLOCK_M"]) + torch.sym_min(experts, rows))
    kernel = launch(_grouped_gemm_kernel) if launch else _grouped_gemm_kernel
    kernel[grid](
        a, b, b_up if b_up is not None else b, c, expert_offsets, n, k, beta,
        1.0 if linear_beta is None else linear_beta, experts, triton.next_power_of_2(experts),
        cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], b_up is not None, ACTIVATION_CODES[activation],
        linear_beta is not None, "ieee" if a.dtype == torch.float32 else "tf32",
        # the interpreter's bf16 dot is wrong (triton 3.9); it computes the tiles in fp32 instead
        not device_info.on_gpu(a.device),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c
