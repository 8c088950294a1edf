"""Intra-chunk pair terms of chunked KDA, one program per (column block, chunk, head), then the blockwise triangular
solve.

For rows r and columns j <= r of a chunk (G = in-chunk cumsum of g from gate_cumsum_kernel, q and k L2-normalized):
    Akk[r, j] = beta_r sum_d k_r k_j e^{G_r - G_j}    (strictly lower, fp32; solve_kernel turns it into
                                                       X = (I + Akk)^{-1})
    Aqk[r, j] = scale sum_d q_r k_j e^{G_r - G_j}     (lower with diagonal; the blocks above are not written)

A program computes column block j (the 16 key columns of sub-chunk j) against the 64 rows of its chunk in one pass
over K: one [64, BK] x [BK, 16] dot per K tile, so the 64 rows are spread over the warps (a wgmma on sm_90). The
decay is factored around the last row m_j of sub-chunk j: the key side e^{G_m - G_j} is <= 1, and so is the row side
e^{G_r - G_m} for the rows after sub-chunk j. Inside sub-chunk j the row side is >= 1; it is exact while a channel
decays by at most EXP_CAP nats inside the sub-chunk (the factor is capped there), else the column block is recomputed
with exact pairwise exponentials. Rows before sub-chunk j are zeroed. L2 normalization and beta are row and column
scalings, applied after the K loop, and the key norms and largest decay are reduced once after it. Grouped value
heads: a program of value head h reads the q and k of key head h // (H // Hk). A per-head gate (gated DeltaNet) takes
gdn_intra_kernel.py instead.

The column block on the grid keeps a program at K / BK dependent steps: one program a chunk looping over its four
column blocks takes 4 x K / BK (32 serial K steps of 6 bar.sync each in the sm_90 build, 3 programs an SM) and twice
the time, 0.58 against 0.29 ms at B1 T8192 H32 on an H200 (bench/bench_kda_prefill.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, CHUNK, EXP_CAP, chunk_span, inverse_norm, load_rows, row_of
from dayzero.plugins.kda.solve_kernel import solve_kernel
from dayzero.plugins.triton_utils import dot

# K columns a step of the pair kernel
PAIR_BLOCK_K = 32


@triton.jit
def _keys(k, start, eos, hk, HK: tl.constexpr, K: tl.constexpr, kc, j):
    """Sub-chunk j's keys [BC, BK] (key head hk)."""
    t = start + j * BC + tl.arange(0, BC)
    return load_rows(k, t, t < eos, hk, HK, K, kc)


@triton.jit
def _key_gates(g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, kc, j):
    """Sub-chunk j's G [BC, BK] and the G row of its last valid token [BK] (per-channel gate)."""
    t = start + j * BC + tl.arange(0, BC)
    last = tl.minimum(start + j * BC + BC, eos) - 1
    g_last = tl.load(g_cum + (last * H + h) * K + kc, mask=kc < K, other=0.0)
    return load_rows(g_cum, t, t < eos, h, H, K, kc), g_last


@triton.jit
def _factored_dots(qq, kk, G, kj, Gj, g_last, row_mask, acc_kk, acc_qk):
    """The factored pair scores of one K tile: rows (qq, kk, G) [BT, BK] where row_mask, against the keys (kj, Gj)
    [BC, BK] of a sub-chunk whose last row's gate is g_last [BK]."""
    key = kj * tl.exp(g_last[None, :] - Gj)
    up = tl.where(row_mask[:, None], tl.exp(tl.minimum(G - g_last[None, :], EXP_CAP)), 0.0)
    return acc_kk + dot(kk * up, tl.trans(key)), acc_qk + dot(qq * up, tl.trans(key))


@triton.jit
def _exact_column_block(q, k, g_cum, start, eos, h, hk, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, j):
    """Column block j over all of K with exact pairwise decays (entries above the diagonal are junk, masked later);
    K tiles of BC columns whatever the main loop's BK, so that this rare path sets no register high-water mark."""
    rows = tl.arange(0, BT)
    sub = tl.arange(0, BC)
    t = start + rows
    acc_kk = tl.zeros([BT, BC], tl.float32)
    acc_qk = tl.zeros([BT, BC], tl.float32)
    for d0 in range(0, K, BC):
        kc = d0 + tl.arange(0, BC)
        qq = load_rows(q, t, t < eos, hk, HK, K, kc)
        kk = load_rows(k, t, t < eos, hk, HK, K, kc)
        G = load_rows(g_cum, t, t < eos, h, H, K, kc)
        kj = _keys(k, start, eos, hk, HK, K, kc, j)
        Gj, _ = _key_gates(g_cum, start, eos, h, H, K, kc, j)
        for s in range(BC):
            key = row_of(kj, sub, s)[None, :] * tl.exp(tl.minimum(G - row_of(Gj, sub, s)[None, :], 0.0))
            here = sub[None, :] == s
            acc_kk = tl.where(here, acc_kk + tl.sum(kk * key, axis=1)[:, None], acc_kk)
            acc_qk = tl.where(here, acc_qk + tl.sum(qq * key, axis=1)[:, None], acc_qk)
    return acc_kk, acc_qk


@triton.jit
def _store_column_block(q, k, g_cum, start, eos, h, hk, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, j,
                        acc_kk, acc_qk, spread, col_sum_sq, akk_rows, aqk_rows, akk_out, aqk_out,
                        USE_L2NORM: tl.constexpr):
    """Scale column block j by its row and column factors and store it: Akk strictly lower (zero on and above the
    diagonal inside block (j, j), which the solve reads whole), Aqk lower with the diagonal; rows before sub-chunk j
    are not written. A factored block is exact while no channel decays by more than EXP_CAP inside the sub-chunk;
    else recompute it pairwise (rare, and outside the main loop to keep that lean)."""
    if spread > EXP_CAP:
        acc_kk, acc_qk = _exact_column_block(q, k, g_cum, start, eos, h, hk, H, HK, K, j)
    rows = tl.arange(0, BT)
    cols = j * BC + tl.arange(0, BC)
    col_inv = inverse_norm(col_sum_sq, USE_L2NORM)
    t = start + rows
    offs = (t[:, None] * H + h) * BT + cols[None, :]
    mask = ((t < eos) & (rows >= j * BC))[:, None]
    akk = tl.where(rows[:, None] > cols[None, :], acc_kk * akk_rows[:, None] * col_inv[None, :], 0.0)
    tl.store(akk_out + offs, akk.to(akk_out.dtype.element_ty), mask=mask)
    aqk = tl.where(rows[:, None] >= cols[None, :], acc_qk * aqk_rows[:, None] * col_inv[None, :], 0.0)
    tl.store(aqk_out + offs, aqk.to(aqk_out.dtype.element_ty), mask=mask)


@triton.jit
def column_grid_pairs_kernel(
    q, k, g_cum, beta, bounds, akk_out, aqk_out, q_inv_out, k_inv_out, scale,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    # AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    j = tl.program_id(0)
    h = tl.program_id(2)
    hk = h // (H // HK)
    start, eos, live = chunk_span(bounds, tl.program_id(1))
    if live:
        rows = tl.arange(0, BT)
        t = start + rows
        # rows before sub-chunk j are zero in column block j
        valid = (t < eos) & (rows >= j * BC)
        key_valid = start + j * BC + tl.arange(0, BC) < eos
        acc_kk = tl.zeros([BT, BC], tl.float32)
        acc_qk = tl.zeros([BT, BC], tl.float32)
        q_sq = tl.zeros([BT], tl.float32)
        k_sq = tl.zeros([BT], tl.float32)
        # reduced after the loop: no cross-warp reduction inside it
        col_sq = tl.zeros([BC, BK], tl.float32)
        spread = tl.zeros([BC, BK], tl.float32)
        for d0 in range(0, K, BK):
            kc = d0 + tl.arange(0, BK)
            qq = load_rows(q, t, valid, hk, HK, K, kc)
            kk = load_rows(k, t, valid, hk, HK, K, kc)
            kj = _keys(k, start, eos, hk, HK, K, kc, j)
            G = load_rows(g_cum, t, valid, h, H, K, kc)
            Gj, g_last = _key_gates(g_cum, start, eos, h, H, K, kc, j)
            acc_kk, acc_qk = _factored_dots(qq, kk, G, kj, Gj, g_last, valid, acc_kk, acc_qk)
            spread = tl.maximum(spread, tl.where(key_valid[:, None], Gj - g_last[None, :], 0.0))
            q_sq += tl.sum(qq * qq, axis=1)
            k_sq += tl.sum(kk * kk, axis=1)
            col_sq += kj * kj
        q_inv = inverse_norm(q_sq, USE_L2NORM)
        k_inv = inverse_norm(k_sq, USE_L2NORM)
        # every program past sub-chunk j's start has these rows' norms; the one of their own sub-chunk writes them
        own = valid & (rows < j * BC + BC)
        tl.store(q_inv_out + t * H + h, q_inv, mask=own)
        tl.store(k_inv_out + t * H + h, k_inv, mask=own)
        akk_rows = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32) * k_inv
        _store_column_block(q, k, g_cum, start, eos, h, hk, H, HK, K, j, acc_kk, acc_qk,
                            tl.max(tl.max(spread, axis=1), axis=0), tl.sum(col_sq, axis=1), akk_rows, scale * q_inv,
                            akk_out, aqk_out, USE_L2NORM)


def pair_terms(q: torch.Tensor, k: torch.Tensor, g_cum: torch.Tensor, beta: torch.Tensor, scale: float,
               bounds: torch.Tensor, use_qk_l2norm: bool,
               x: torch.Tensor, aqk: torch.Tensor, q_inv: torch.Tensor, k_inv: torch.Tensor, launch=None,
               block_k: int = PAIR_BLOCK_K) -> None:
    """Fill x = (I + Akk)^{-1} and aqk [T, H, BT] (blocks on and below the diagonal), q_inv and k_inv [T, H] fp32
    (1/||x|| per token) for q, k [T, Hk, K], g_cum [T, H, K] fp32, beta [T, H]; value head h reads key head
    h // (H // Hk); Akk goes through an fp32 buffer. block_k: K columns a step (tests shrink it to cross K tiles)."""
    T, HK, K = k.shape
    H = beta.shape[1]
    num_chunks = bounds.shape[0]
    launch = launch or (lambda fn: fn)
    akk = torch.empty(T, H, CHUNK, device=q.device, dtype=torch.float32)
    launch(column_grid_pairs_kernel)[(CHUNK // BC.value, num_chunks, H)](
        q, k, g_cum, beta, bounds, akk, aqk, q_inv, k_inv, scale,
        H=H, HK=HK, K=K, BK=min(K, block_k), USE_L2NORM=use_qk_l2norm, num_warps=4, num_stages=1,
    )
    launch(solve_kernel)[(num_chunks, H)](akk, x, bounds, H=H, num_warps=4)
