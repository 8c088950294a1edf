"""Intra-chunk terms of chunked gated DeltaNet (a per-head gate: one decay a token and value head) in one launch, two
programs per (chunk, value head): the work that the per-channel path spreads over three kernels (gate_cumsum_kernel.py,
chunk_intra_kernel.py, solve_kernel.py) with two intermediates in memory (G and an fp32 Akk).

For the rows r and columns j of a chunk, with G the in-chunk cumsum of g and q_inv, k_inv = 1 / ||q_r||, 1 / ||k_r||
(1 without L2 normalization):
    Akk[r, j] = beta_r k_inv_r k_inv_j (k_r . k_j) e^{G_r - G_j}    (j < r), solved in registers: X = (I + Akk)^{-1}
    Aqk[r, j] = scale q_inv_r k_inv_j (q_r . k_j) e^{G_r - G_j}     (j <= r)
and the row factors that let the later stages read q and k as they are, on their key head, where the per-channel path
writes gated copies per value head ([T, H, K] each):
    w_scale = beta e^G k_inv                                         (W = X (w_scale k), gdn_wy_kernel)
    q_scale = scale q_inv e^G,  k_scale = k_inv e^{G_C - G},  decay = e^{G_C}  (the state kernel, chunk_kernel.py)
A decay that is one number a (token, head) factors out of the dot products, so the K loops are plain dots in the
inputs' dtype (bf16 MMA for bf16 q, k), and the exact pairwise decays multiply the results once after them. The first
program of a (chunk, head) takes Akk as its ten 16 x 16 blocks on and below the diagonal (the form of the blockwise
solve) and solves; the second takes Aqk as one [64, 64] tile, the norms and the row factors. Split so, neither holds
the other's registers: Triton 3.9's build for sm_90a (K 128, bf16) takes 210 registers and spills nothing, where one
program doing both takes all 255. A program of value head h reads the q and k of key head h // (H // Hk).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, chunk_span, inverse_norm
from dayzero.plugins.kda.solve_kernel import invert_blocks, store_lower_blocks
from dayzero.plugins.triton_utils import dot

# K columns a step of the K loops, and warps a program (bench/bench_gated_deltanet.py's `intra tiles` table times other
# choices)
INTRA_BLOCK_K = 64
INTRA_WARPS = 4


@triton.jit
def _rows(ptr, t, valid, head, HEADS: tl.constexpr, D: tl.constexpr, cols):
    """Rows t of a [T, HEADS, D] tensor at `head`, columns cols, in the stored dtype (0 outside)."""
    return tl.load(ptr + (t[:, None] * HEADS + head) * D + cols[None, :], mask=valid[:, None], other=0.0)


@triton.jit
def _sub_chunk(x, i: tl.constexpr):
    """Entries i * BC .. i * BC + BC - 1 of a chunk's [BT] vector as a [BC] vector."""
    rows = tl.arange(0, BT)
    sub = tl.arange(0, BC)
    return tl.sum(tl.where(rows[:, None] == i * BC + sub[None, :], x[:, None], 0.0), axis=0)


@triton.jit
def _off_diagonal(acc, G_i, G_j, row_i, col_j):
    """Akk block (i, j), i > j, from its key dots: every pair is causal, so e^{G_i - G_j} <= 1 as it stands."""
    return acc * tl.exp(G_i[:, None] - G_j[None, :]) * row_i[:, None] * col_j[None, :]


@triton.jit
def _diagonal(acc, G_i, row_i, col_i):
    """Akk block (i, i): strictly lower; the pairs above the diagonal never exponentiate a positive difference."""
    sub = tl.arange(0, BC)
    lower = sub[:, None] > sub[None, :]
    decay = tl.where(lower, tl.exp(tl.where(lower, G_i[:, None] - G_i[None, :], 0.0)), 0.0)
    return acc * decay * row_i[:, None] * col_i[None, :]


@triton.jit
def _store_aqk(aqk_out, acc, G, q_rows, k_inv, start, eos, h, H: tl.constexpr):
    """Aqk with its decays and factors, stored in the 16 x 16 blocks on and below the diagonal (readers load the rows
    whole and select the lower triangle: load_lower); the block-granular mask keeps the stores vectorized."""
    rows = tl.arange(0, BT)
    t = start + rows
    causal = rows[:, None] >= rows[None, :]
    decay = tl.where(causal, tl.exp(tl.where(causal, G[:, None] - G[None, :], 0.0)), 0.0)
    aqk = acc * decay * q_rows[:, None] * k_inv[None, :]
    mask = (t < eos)[:, None] & (rows[None, :] // BC <= rows[:, None] // BC)
    tl.store(aqk_out + (t[:, None] * H + h) * BT + rows[None, :], aqk.to(aqk_out.dtype.element_ty), mask=mask)


@triton.jit
def _chunk_gate(g, start, eos, h, H: tl.constexpr):
    """G [BT] = the in-chunk cumsum of g (fp32) and G_C, its last value: rows past the sequence end read g = 0, so G
    stays at G_C there and row BT - 1 holds it."""
    rows = tl.arange(0, BT)
    t = start + rows
    G = tl.cumsum(tl.load(g + t * H + h, mask=t < eos, other=0.0).to(tl.float32), axis=0)
    return G, tl.sum(tl.where(rows == BT - 1, G, 0.0), axis=0)


@triton.jit
def _scores_and_factors(q, k, g, beta, aqk_out, w_scale_out, q_scale_out, k_scale_out, decay_out, scale, chunk, start,
                        eos, h, hk, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr,
                        USE_L2NORM: tl.constexpr):
    """Aqk, the row factors and the chunk decay of value head h (key head hk)."""
    rows = tl.arange(0, BT)
    t = start + rows
    valid = t < eos
    acc = tl.zeros([BT, BT], tl.float32)
    q_sq = tl.zeros([BT], tl.float32)
    k_sq = tl.zeros([BT], tl.float32)
    for d0 in range(0, K, BK):
        kc = d0 + tl.arange(0, BK)
        qq = _rows(q, t, valid, hk, HK, K, kc)
        kk = _rows(k, t, valid, hk, HK, K, kc)
        acc += dot(qq, tl.trans(kk))
        qf, kf = qq.to(tl.float32), kk.to(tl.float32)
        q_sq += tl.sum(qf * qf, axis=1)
        k_sq += tl.sum(kf * kf, axis=1)
    G, G_last = _chunk_gate(g, start, eos, h, H)
    q_rows = scale * inverse_norm(q_sq, USE_L2NORM)
    k_inv = inverse_norm(k_sq, USE_L2NORM)
    _store_aqk(aqk_out, acc, G, q_rows, k_inv, start, eos, h, H)
    eG = tl.exp(G)
    b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)
    tl.store(w_scale_out + t * H + h, b * eG * k_inv, mask=valid)
    tl.store(q_scale_out + t * H + h, q_rows * eG, mask=valid)
    tl.store(k_scale_out + t * H + h, k_inv * tl.exp(G_last - G), mask=valid)
    tl.store(decay_out + chunk * H + h, tl.exp(G_last))


@triton.jit
def _sub_chunk_rows(k, start, eos, hk, i: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, kc):
    """Sub-chunk i's keys [BC, BK] (stored dtype, key head hk)."""
    t = start + i * BC + tl.arange(0, BC)
    return _rows(k, t, t < eos, hk, HK, K, kc)


@triton.jit
def _block_rows(beta, k_sq, start, eos, h, i: tl.constexpr, H: tl.constexpr, USE_L2NORM: tl.constexpr):
    """Sub-chunk i's column factors k_inv and row factors beta k_inv [BC]."""
    t = start + i * BC + tl.arange(0, BC)
    k_inv = inverse_norm(k_sq, USE_L2NORM)
    return k_inv, tl.load(beta + t * H + h, mask=t < eos, other=0.0).to(tl.float32) * k_inv


@triton.jit
def _solved_keys(k, g, beta, x_out, start, eos, h, hk, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr,
                 BK: tl.constexpr, USE_L2NORM: tl.constexpr):
    """X = (I + Akk)^{-1} of value head h (key head hk): the ten key blocks, then the blockwise solve."""
    A00 = tl.zeros([BC, BC], tl.float32)
    A10 = tl.zeros([BC, BC], tl.float32)
    A11 = tl.zeros([BC, BC], tl.float32)
    A20 = tl.zeros([BC, BC], tl.float32)
    A21 = tl.zeros([BC, BC], tl.float32)
    A22 = tl.zeros([BC, BC], tl.float32)
    A30 = tl.zeros([BC, BC], tl.float32)
    A31 = tl.zeros([BC, BC], tl.float32)
    A32 = tl.zeros([BC, BC], tl.float32)
    A33 = tl.zeros([BC, BC], tl.float32)
    sq0 = tl.zeros([BC], tl.float32)
    sq1 = tl.zeros([BC], tl.float32)
    sq2 = tl.zeros([BC], tl.float32)
    sq3 = tl.zeros([BC], tl.float32)
    for d0 in range(0, K, BK):
        kc = d0 + tl.arange(0, BK)
        k0 = _sub_chunk_rows(k, start, eos, hk, 0, HK, K, kc)
        k1 = _sub_chunk_rows(k, start, eos, hk, 1, HK, K, kc)
        k2 = _sub_chunk_rows(k, start, eos, hk, 2, HK, K, kc)
        k3 = _sub_chunk_rows(k, start, eos, hk, 3, HK, K, kc)
        A00 += dot(k0, tl.trans(k0))
        A10 += dot(k1, tl.trans(k0))
        A11 += dot(k1, tl.trans(k1))
        A20 += dot(k2, tl.trans(k0))
        A21 += dot(k2, tl.trans(k1))
        A22 += dot(k2, tl.trans(k2))
        A30 += dot(k3, tl.trans(k0))
        A31 += dot(k3, tl.trans(k1))
        A32 += dot(k3, tl.trans(k2))
        A33 += dot(k3, tl.trans(k3))
        sq0 += tl.sum(k0.to(tl.float32) * k0.to(tl.float32), axis=1)
        sq1 += tl.sum(k1.to(tl.float32) * k1.to(tl.float32), axis=1)
        sq2 += tl.sum(k2.to(tl.float32) * k2.to(tl.float32), axis=1)
        sq3 += tl.sum(k3.to(tl.float32) * k3.to(tl.float32), axis=1)
    G, _ = _chunk_gate(g, start, eos, h, H)
    G0, G1, G2, G3 = _sub_chunk(G, 0), _sub_chunk(G, 1), _sub_chunk(G, 2), _sub_chunk(G, 3)
    c0, r0 = _block_rows(beta, sq0, start, eos, h, 0, H, USE_L2NORM)
    c1, r1 = _block_rows(beta, sq1, start, eos, h, 1, H, USE_L2NORM)
    c2, r2 = _block_rows(beta, sq2, start, eos, h, 2, H, USE_L2NORM)
    c3, r3 = _block_rows(beta, sq3, start, eos, h, 3, H, USE_L2NORM)
    X00, X10, X11, X20, X21, X22, X30, X31, X32, X33 = invert_blocks(
        _diagonal(A00, G0, r0, c0),
        _off_diagonal(A10, G1, G0, r1, c0), _diagonal(A11, G1, r1, c1),
        _off_diagonal(A20, G2, G0, r2, c0), _off_diagonal(A21, G2, G1, r2, c1), _diagonal(A22, G2, r2, c2),
        _off_diagonal(A30, G3, G0, r3, c0), _off_diagonal(A31, G3, G1, r3, c1),
        _off_diagonal(A32, G3, G2, r3, c2), _diagonal(A33, G3, r3, c3),
    )
    store_lower_blocks(x_out, start, eos, h, H, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33)


@triton.jit
def gdn_intra_kernel(
    q, k, g, beta, bounds, x_out, aqk_out, w_scale_out, q_scale_out, k_scale_out, decay_out, scale,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    # AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    chunk = tl.program_id(1)
    h = tl.program_id(2)
    hk = h // (H // HK)
    start, eos, live = chunk_span(bounds, chunk)
    if live:
        if tl.program_id(0) == 0:
            _solved_keys(k, g, beta, x_out, start, eos, h, hk, H, HK, K, BK, USE_L2NORM)
        else:
            _scores_and_factors(q, k, g, beta, aqk_out, w_scale_out, q_scale_out, k_scale_out, decay_out, scale, chunk,
                                start, eos, h, hk, H, HK, K, BK, USE_L2NORM)


def gdn_intra_terms(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
                    bounds: torch.Tensor, use_qk_l2norm: bool, x: torch.Tensor, aqk: torch.Tensor,
                    w_scale: torch.Tensor, q_scale: torch.Tensor, k_scale: torch.Tensor, decay: torch.Tensor,
                    launch=None, block_k: int = INTRA_BLOCK_K) -> None:
    """Fill x = (I + Akk)^{-1} and aqk [T, H, BT] (the blocks on and below the diagonal), the row factors w_scale,
    q_scale, k_scale [T, H] fp32 and decay [chunks, H] fp32 for q, k [T, Hk, K], g [T, H] fp32 (log space, not
    cumulated), beta [T, H]. block_k: K columns a step (tests shrink it to cross K tiles)."""
    T, HK, K = k.shape
    H = beta.shape[1]
    (launch or (lambda fn: fn))(gdn_intra_kernel)[(2, bounds.shape[0], H)](
        q, k, g, beta, bounds, x, aqk, w_scale, q_scale, k_scale, decay, scale,
        H=H, HK=HK, K=K, BK=min(K, block_k), USE_L2NORM=use_qk_l2norm, num_warps=INTRA_WARPS, num_stages=1,
    )
