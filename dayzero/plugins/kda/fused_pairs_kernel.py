"""Gate cumsum, intra-chunk pair terms and the triangular solve of chunked KDA in one launch per (chunk, head).

Same outputs as gate_cumsum_kernel + chunk_intra_kernel.pair_terms (G, Aqk lower with the diagonal,
X = (I + Akk)^{-1}, q_inv, k_inv), but q, k and the raw gate g are read once per program: one pass over K, each K
tile walked by 16-token sub-chunks i = 0..3, with everything the later sub-chunks need kept in registers. The column
passes of the older pair kernel reread the chunk four times with no load in flight while the dots ran (H200 run s:
7.1 ms at B1 T32768 H96, latency-bound).

Decays, with n_i the first row of sub-chunk i and G falling along the chunk (g <= 0):
* row side R_i = e^{G_r - G_{n_i}} <= 1 for the rows of sub-chunk i (shared by its diagonal and off-diagonal blocks);
* block (i, j), j < i: keys k_c e^{G_{n_{j+1}} - G_c} <= 1 (once per j) times the channel factor
  e^{G_{n_i} - G_{n_{j+1}}} <= 1, so no factor overflows and an underflowed one only drops a smaller term;
* block (i, i): keys k_c e^{G_{n_i} - G_c} >= 1, exact while a channel decays by at most EXP_CAP nats inside the
  sub-chunk (then R_i >= e^{-EXP_CAP} too); else that block is recomputed with pairwise exponentials (rare).
The dots are [16, BK] x [BK, 16]: few warps per program (1-2), many programs per SM to hide the load latency.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, CHUNK, EXP_CAP, inverse_norm, load_rows, locate_chunk
from dayzero.plugins.kda.solve_kernel import invert_blocks, solve_kernel, store_block, store_lower_blocks
from dayzero.plugins.kda.subchunk_pairs_kernel import _exact_block
from dayzero.plugins.triton_utils import dot


@triton.jit
def _gate_row(g, n, eos, h, H: tl.constexpr, K: tl.constexpr, kc):
    """Raw g of token n [BK] (0 past eos)."""
    return tl.load(g + (n * H + h) * K + kc, mask=(n + kc * 0 < eos) & (kc < K), other=0.0)


@triton.jit
def _sub_chunk(q, k, g, g_cum_out, start, eos, h, H: tl.constexpr, K: tl.constexpr, kc, i: tl.constexpr, carry):
    """Sub-chunk i of a K tile: q, k rows and G = carry + cumsum(g) [BC, BK] (stored for the diagonal pass and the
    WY kernel), G of its first row and of the next sub-chunk's first row [BK], its rows' valid mask, the carry into
    the next sub-chunk."""
    t = start + i * BC + tl.arange(0, BC)
    valid = t < eos
    gi = load_rows(g, t, valid, h, H, K, kc)
    G = carry[None, :] + tl.cumsum(gi, axis=0)
    tl.store(g_cum_out + (t[:, None] * H + h) * K + kc[None, :], G, mask=valid[:, None] & (kc[None, :] < K))
    # G's first row again as a vector (the same fp32 sum as the cumsum's first row)
    g_first = carry + _gate_row(g, start + i * BC, eos, h, H, K, kc)
    carry = carry + tl.sum(gi, axis=0)
    g_next = carry + _gate_row(g, start + i * BC + BC, eos, h, H, K, kc)
    return load_rows(q, t, valid, h, H, K, kc), load_rows(k, t, valid, h, H, K, kc), G, g_first, g_next, valid, carry


@triton.jit
def _row_side(qq, kk, G, g_first, valid):
    """Row sub-chunk i's q and k times R_i = e^{G_r - G_{n_i}} <= 1 (0 past eos)."""
    row_side = tl.where(valid[:, None], tl.exp(tl.minimum(G - g_first[None, :], 0.0)), 0.0)
    return qq * row_side, kk * row_side


@triton.jit
def _keys(kk, G, g_next):
    """Sub-chunk j's keys decayed to the next sub-chunk's first row, e^{G_{n_{j+1}} - G_c} <= 1."""
    return kk * tl.exp(tl.minimum(g_next[None, :] - G, 0.0))


@triton.jit
def _off_diagonal(qr, kr, keys_j, g_first_i, g_next_j, acc_qk, acc_kk):
    """Block (i, j), j < i, for one K tile."""
    key = tl.trans(keys_j * tl.exp(tl.minimum(g_first_i - g_next_j, 0.0))[None, :])
    return acc_qk + dot(qr, key), acc_kk + dot(kr, key)


@triton.jit
def _diagonal(q, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, i: tl.constexpr, BKD: tl.constexpr):
    """Raw block (i, i) of Aqk and Akk (above the diagonal: junk) from q, k and the stored G of sub-chunk i: keys
    k_c e^{G_{n_i} - G_c} >= 1 against R_i, exact while no channel decays by more than EXP_CAP inside the sub-chunk
    (G falls along it, so its first row minus its last is that decay); else pairwise exponentials (rare)."""
    t = start + i * BC + tl.arange(0, BC)
    valid = t < eos
    last = tl.minimum(start + i * BC + BC, eos) - 1
    acc_qk = tl.zeros([BC, BC], tl.float32)
    acc_kk = tl.zeros([BC, BC], tl.float32)
    spread = tl.zeros([BKD], tl.float32)
    for d0 in range(0, K, BKD):
        kc = d0 + tl.arange(0, BKD)
        G = load_rows(g_cum, t, valid, h, H, K, kc)
        g_first = tl.load(g_cum + ((start + i * BC) * H + h) * K + kc, mask=kc < K, other=0.0)
        spread = tl.maximum(spread, g_first - tl.load(g_cum + (last * H + h) * K + kc, mask=kc < K, other=0.0))
        kk = load_rows(k, t, valid, h, H, K, kc)
        qr, kr = _row_side(load_rows(q, t, valid, h, H, K, kc), kk, G, g_first, valid)
        key = tl.trans(kk * tl.exp(tl.minimum(g_first[None, :] - G, EXP_CAP)))
        acc_qk += dot(qr, key)
        acc_kk += dot(kr, key)
    if tl.max(spread) > EXP_CAP:
        acc_kk, acc_qk, _, _ = _exact_block(q, k, g_cum, start + i * BC, eos, h, H, K, BC)
    return acc_qk, acc_kk


@triton.jit
def _row_factors(q_sq, k_sq, beta, start, eos, h, H: tl.constexpr, i: tl.constexpr, q_inv_out, k_inv_out, scale,
                 USE_L2NORM: tl.constexpr):
    """Sub-chunk i's row factors: scale * q_inv (Aqk rows), beta * k_inv (Akk rows), k_inv (columns); stores the
    inverse norms."""
    t = start + i * BC + tl.arange(0, BC)
    valid = t < eos
    q_inv = inverse_norm(q_sq, USE_L2NORM)
    k_inv = inverse_norm(k_sq, USE_L2NORM)
    tl.store(q_inv_out + t * H + h, q_inv, mask=valid)
    tl.store(k_inv_out + t * H + h, k_inv, mask=valid)
    b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)
    return scale * q_inv, b * k_inv, k_inv


@triton.jit
def _scaled(acc, rows_scale, cols_scale):
    return acc * rows_scale[:, None] * cols_scale[None, :]


@triton.jit
def _diagonal_blocks(q, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, i: tl.constexpr,
                     BKD: tl.constexpr, qs, kb, kinv, aqk_out):
    """Block (i, i): stores Aqk's (lower with the diagonal), returns Akk's (strictly lower)."""
    sub = tl.arange(0, BC)
    acc_qk, acc_kk = _diagonal(q, k, g_cum, start, eos, h, H, K, i, BKD)
    store_block(aqk_out, start, eos, h, H, i, i, tl.where(sub[:, None] >= sub[None, :], _scaled(acc_qk, qs, kinv), 0.0))
    return tl.where(sub[:, None] > sub[None, :], _scaled(acc_kk, kb, kinv), 0.0)


@triton.jit
def fused_pairs_kernel(
    q, k, g, beta, cu_seqlens, chunk_offsets, g_cum_out, lower_out, aqk_out, q_inv_out, k_inv_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BKD: tl.constexpr, USE_L2NORM: tl.constexpr,
    SOLVE: tl.constexpr,
):
    # lower_out: X = (I + Akk)^{-1} with SOLVE, else the fp32 Akk for solve_kernel (both: the blocks on and below the
    # diagonal only); AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    h = tl.program_id(1)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(0))
    if live:
        # raw sums of block (i, j) below the diagonal: qk for Aqk, kk for Akk
        qk10 = tl.zeros([BC, BC], tl.float32)
        kk10 = tl.zeros([BC, BC], tl.float32)
        qk20 = tl.zeros([BC, BC], tl.float32)
        kk20 = tl.zeros([BC, BC], tl.float32)
        qk21 = tl.zeros([BC, BC], tl.float32)
        kk21 = tl.zeros([BC, BC], tl.float32)
        qk30 = tl.zeros([BC, BC], tl.float32)
        kk30 = tl.zeros([BC, BC], tl.float32)
        qk31 = tl.zeros([BC, BC], tl.float32)
        kk31 = tl.zeros([BC, BC], tl.float32)
        qk32 = tl.zeros([BC, BC], tl.float32)
        kk32 = tl.zeros([BC, BC], tl.float32)
        q_sq0 = tl.zeros([BC], tl.float32)
        k_sq0 = tl.zeros([BC], tl.float32)
        q_sq1 = tl.zeros([BC], tl.float32)
        k_sq1 = tl.zeros([BC], tl.float32)
        q_sq2 = tl.zeros([BC], tl.float32)
        k_sq2 = tl.zeros([BC], tl.float32)
        q_sq3 = tl.zeros([BC], tl.float32)
        k_sq3 = tl.zeros([BC], tl.float32)
        for d0 in range(0, K, BK):
            kc = d0 + tl.arange(0, BK)
            carry = tl.zeros([BK], tl.float32)
            q0, k0, G0, _, next0, _, carry = _sub_chunk(q, k, g, g_cum_out, start, eos, h, H, K, kc, 0, carry)
            q_sq0 += tl.sum(q0 * q0, axis=1)
            k_sq0 += tl.sum(k0 * k0, axis=1)
            keys0 = _keys(k0, G0, next0)

            q1, k1, G1, first1, next1, valid1, carry = _sub_chunk(q, k, g, g_cum_out, start, eos, h, H, K, kc, 1,
                                                                  carry)
            q_sq1 += tl.sum(q1 * q1, axis=1)
            k_sq1 += tl.sum(k1 * k1, axis=1)
            qr, kr = _row_side(q1, k1, G1, first1, valid1)
            qk10, kk10 = _off_diagonal(qr, kr, keys0, first1, next0, qk10, kk10)
            keys1 = _keys(k1, G1, next1)

            q2, k2, G2, first2, next2, valid2, carry = _sub_chunk(q, k, g, g_cum_out, start, eos, h, H, K, kc, 2,
                                                                  carry)
            q_sq2 += tl.sum(q2 * q2, axis=1)
            k_sq2 += tl.sum(k2 * k2, axis=1)
            qr, kr = _row_side(q2, k2, G2, first2, valid2)
            qk20, kk20 = _off_diagonal(qr, kr, keys0, first2, next0, qk20, kk20)
            qk21, kk21 = _off_diagonal(qr, kr, keys1, first2, next1, qk21, kk21)
            keys2 = _keys(k2, G2, next2)

            q3, k3, G3, first3, _, valid3, carry = _sub_chunk(q, k, g, g_cum_out, start, eos, h, H, K, kc, 3, carry)
            q_sq3 += tl.sum(q3 * q3, axis=1)
            k_sq3 += tl.sum(k3 * k3, axis=1)
            qr, kr = _row_side(q3, k3, G3, first3, valid3)
            qk30, kk30 = _off_diagonal(qr, kr, keys0, first3, next0, qk30, kk30)
            qk31, kk31 = _off_diagonal(qr, kr, keys1, first3, next1, qk31, kk31)
            qk32, kk32 = _off_diagonal(qr, kr, keys2, first3, next2, qk32, kk32)
        qs0, kb0, kinv0 = _row_factors(q_sq0, k_sq0, beta, start, eos, h, H, 0, q_inv_out, k_inv_out, scale, USE_L2NORM)
        qs1, kb1, kinv1 = _row_factors(q_sq1, k_sq1, beta, start, eos, h, H, 1, q_inv_out, k_inv_out, scale, USE_L2NORM)
        qs2, kb2, kinv2 = _row_factors(q_sq2, k_sq2, beta, start, eos, h, H, 2, q_inv_out, k_inv_out, scale, USE_L2NORM)
        qs3, kb3, kinv3 = _row_factors(q_sq3, k_sq3, beta, start, eos, h, H, 3, q_inv_out, k_inv_out, scale, USE_L2NORM)
        store_block(aqk_out, start, eos, h, H, 1, 0, _scaled(qk10, qs1, kinv0))
        store_block(aqk_out, start, eos, h, H, 2, 0, _scaled(qk20, qs2, kinv0))
        store_block(aqk_out, start, eos, h, H, 2, 1, _scaled(qk21, qs2, kinv1))
        store_block(aqk_out, start, eos, h, H, 3, 0, _scaled(qk30, qs3, kinv0))
        store_block(aqk_out, start, eos, h, H, 3, 1, _scaled(qk31, qs3, kinv1))
        store_block(aqk_out, start, eos, h, H, 3, 2, _scaled(qk32, qs3, kinv2))
        L10 = _scaled(kk10, kb1, kinv0)
        L20 = _scaled(kk20, kb2, kinv0)
        L21 = _scaled(kk21, kb2, kinv1)
        L30 = _scaled(kk30, kb3, kinv0)
        L31 = _scaled(kk31, kb3, kinv1)
        L32 = _scaled(kk32, kb3, kinv2)
        # the diagonal pass rereads G from g_cum_out, written above by other threads of this program; a separate
        # pass keeps its eight accumulators out of the main loop (sixteen 16x16 fp32 tiles live there already)
        tl.debug_barrier()
        L00 = _diagonal_blocks(q, k, g_cum_out, start, eos, h, H, K, 0, BKD, qs0, kb0, kinv0, aqk_out)
        L11 = _diagonal_blocks(q, k, g_cum_out, start, eos, h, H, K, 1, BKD, qs1, kb1, kinv1, aqk_out)
        L22 = _diagonal_blocks(q, k, g_cum_out, start, eos, h, H, K, 2, BKD, qs2, kb2, kinv2, aqk_out)
        L33 = _diagonal_blocks(q, k, g_cum_out, start, eos, h, H, K, 3, BKD, qs3, kb3, kinv3, aqk_out)
        if SOLVE:
            X00, X10, X11, X20, X21, X22, X30, X31, X32, X33 = invert_blocks(L00, L10, L11, L20, L21, L22, L30, L31,
                                                                             L32, L33)
            store_lower_blocks(lower_out, start, eos, h, H, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33)
        else:
            store_lower_blocks(lower_out, start, eos, h, H, L00, L10, L11, L20, L21, L22, L30, L31, L32, L33)


def fused_pair_terms(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
                     cu_seqlens: torch.Tensor, offsets: torch.Tensor, num_chunks: int, use_qk_l2norm: bool,
                     g_cum: torch.Tensor, x: torch.Tensor, aqk: torch.Tensor, q_inv: torch.Tensor,
                     k_inv: torch.Tensor, launch=None, solve: bool = True, num_warps: int = 2, block_k: int = 16,
                     block_k_diagonal: int = 32, num_stages: int = 1) -> None:
    """Fill g_cum [T, H, K] fp32 (in-chunk cumsum of the raw g), x = (I + Akk)^{-1} and aqk [T, H, BT] (blocks on
    and below the diagonal), q_inv and k_inv [T, H] fp32: one launch with `solve`, else the pair launch and
    solve_kernel on an fp32 Akk (the solve's registers then stay out of the pair kernel)."""
    T, H, K = k.shape
    N = cu_seqlens.shape[0] - 1
    launch = launch or (lambda fn: fn)
    lower = x if solve else torch.empty(T, H, CHUNK, device=q.device, dtype=torch.float32)
    launch(fused_pairs_kernel)[(num_chunks, H)](
        q, k, g, beta, cu_seqlens, offsets, g_cum, lower, aqk, q_inv, k_inv, scale, N,
        H=H, K=K, BK=min(K, block_k), BKD=min(K, block_k_diagonal), USE_L2NORM=use_qk_l2norm, SOLVE=solve,
        num_warps=num_warps, num_stages=num_stages,
    )
    if not solve:
        launch(solve_kernel)[(num_chunks, H)](lower, x, cu_seqlens, offsets, N, H=H, num_warps=4)
