"""Intra-chunk terms of chunked gated DeltaNet (a per-head gate: one decay a token and value head), one program per
(chunk, value head): the work that the per-channel path spreads over three kernels (gate_cumsum_kernel.py,
chunk_intra_kernel.py, solve_kernel.py) with two intermediates in memory (G and an fp32 Akk).

For the rows r and columns j of a chunk, with G the in-chunk cumsum of g and q_inv, k_inv = 1 / ||q_r||, 1 / ||k_r||
(1 without L2 normalization):
    Akk[r, j] = beta_r k_inv_r k_inv_j (k_r . k_j) e^{G_r - G_j}    (j < r), solved in registers: X = (I + Akk)^{-1}
    Aqk[r, j] = scale q_inv_r k_inv_j (q_r . k_j) e^{G_r - G_j}     (j <= r)
and the row factors that let the later stages read q and k as they are, on their key head, where the per-channel path
writes gated copies per value head ([T, H, K] each):
    w_scale = beta e^G k_inv                                         (W = X (w_scale k), gdn_wy_kernel)
    q_scale = scale q_inv e^G,  k_scale = k_inv e^{G_C - G},  decay = e^{G_C}  (the state kernel, chunk_kernel.py)
A decay that is one number a (token, head) factors out of the dot products, so the K loop is plain dots in the inputs'
dtype (bf16 MMA for bf16 q, k): Akk as its ten 16 x 16 blocks on and below the diagonal (the form of the blockwise
solve), Aqk as one [64, 64] tile. The exact pairwise decays multiply the blocks once after the loop. A program of
value head h reads the q and k of key head h // (H // Hk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, chunk_span, inverse_norm
from dayzero.plugins.kda.solve_kernel import invert_blocks, store_lower_blocks
from dayzero.plugins.triton_utils import dot

# K columns a step of the K loop
INTRA_BLOCK_K = 64


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
def gdn_intra_kernel(
    q, k, g, beta, bounds, x_out, aqk_out, w_scale_out, q_scale_out, k_scale_out, decay_out, scale,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    # AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    chunk = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // (H // HK)
    start, eos, live = chunk_span(bounds, chunk)
    if live:
        rows = tl.arange(0, BT)
        sub = tl.arange(0, BC)
        t = start + rows
        valid = t < eos
        t0, t1, t2, t3 = start + sub, start + BC + sub, start + 2 * BC + sub, start + 3 * BC + sub
        acc_qk = tl.zeros([BT, BT], tl.float32)
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
        q_sq = tl.zeros([BT], tl.float32)
        k_sq = tl.zeros([BT], tl.float32)
        for d0 in range(0, K, BK):
            kc = d0 + tl.arange(0, BK)
            qq = _rows(q, t, valid, hk, HK, K, kc)
            kk = _rows(k, t, valid, hk, HK, K, kc)
            k0 = _rows(k, t0, t0 < eos, hk, HK, K, kc)
            k1 = _rows(k, t1, t1 < eos, hk, HK, K, kc)
            k2 = _rows(k, t2, t2 < eos, hk, HK, K, kc)
            k3 = _rows(k, t3, t3 < eos, hk, HK, K, kc)
            acc_qk += dot(qq, tl.trans(kk))
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
            qf, kf = qq.to(tl.float32), kk.to(tl.float32)
            q_sq += tl.sum(qf * qf, axis=1)
            k_sq += tl.sum(kf * kf, axis=1)
        # rows past the sequence end read g = 0: G stays at the chunk's last value, and row BT - 1 holds it
        G = tl.cumsum(tl.load(g + t * H + h, mask=valid, other=0.0).to(tl.float32), axis=0)
        G_last = tl.sum(tl.where(rows == BT - 1, G, 0.0), axis=0)
        b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)
        q_inv = inverse_norm(q_sq, USE_L2NORM)
        k_inv = inverse_norm(k_sq, USE_L2NORM)
        q_rows = scale * q_inv
        _store_aqk(aqk_out, acc_qk, G, q_rows, k_inv, start, eos, h, H)
        eG = tl.exp(G)
        tl.store(w_scale_out + t * H + h, b * eG * k_inv, mask=valid)
        tl.store(q_scale_out + t * H + h, q_rows * eG, mask=valid)
        tl.store(k_scale_out + t * H + h, k_inv * tl.exp(G_last - G), mask=valid)
        tl.store(decay_out + chunk * H + h, tl.exp(G_last))
        G0, G1, G2, G3 = _sub_chunk(G, 0), _sub_chunk(G, 1), _sub_chunk(G, 2), _sub_chunk(G, 3)
        c0, c1, c2, c3 = _sub_chunk(k_inv, 0), _sub_chunk(k_inv, 1), _sub_chunk(k_inv, 2), _sub_chunk(k_inv, 3)
        akk_rows = b * k_inv
        r1, r2, r3 = _sub_chunk(akk_rows, 1), _sub_chunk(akk_rows, 2), _sub_chunk(akk_rows, 3)
        X00, X10, X11, X20, X21, X22, X30, X31, X32, X33 = invert_blocks(
            _diagonal(A00, G0, _sub_chunk(akk_rows, 0), c0),
            _off_diagonal(A10, G1, G0, r1, c0), _diagonal(A11, G1, r1, c1),
            _off_diagonal(A20, G2, G0, r2, c0), _off_diagonal(A21, G2, G1, r2, c1), _diagonal(A22, G2, r2, c2),
            _off_diagonal(A30, G3, G0, r3, c0), _off_diagonal(A31, G3, G1, r3, c1),
            _off_diagonal(A32, G3, G2, r3, c2), _diagonal(A33, G3, r3, c3),
        )
        store_lower_blocks(x_out, start, eos, h, H, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33)


def gdn_intra_terms(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
                    bounds: torch.Tensor, use_qk_l2norm: bool, x: torch.Tensor, aqk: torch.Tensor,
                    w_scale: torch.Tensor, q_scale: torch.Tensor, k_scale: torch.Tensor, decay: torch.Tensor,
                    launch=None, block_k: int = INTRA_BLOCK_K) -> None:
    """Fill x = (I + Akk)^{-1} and aqk [T, H, BT] (the blocks on and below the diagonal), the row factors w_scale,
    q_scale, k_scale [T, H] fp32 and decay [chunks, H] fp32 for q, k [T, Hk, K], g [T, H] fp32 (log space, not
    cumulated), beta [T, H]. block_k: K columns a step (tests shrink it to cross K tiles)."""
    T, HK, K = k.shape
    H = beta.shape[1]
    (launch or (lambda fn: fn))(gdn_intra_kernel)[(bounds.shape[0], H)](
        q, k, g, beta, bounds, x, aqk, w_scale, q_scale, k_scale, decay, scale,
        H=H, HK=HK, K=K, BK=min(K, block_k), USE_L2NORM=use_qk_l2norm, num_warps=4, num_stages=1,
    )
