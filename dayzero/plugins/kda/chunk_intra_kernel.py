"""Intra-chunk pair terms of chunked KDA and the triangular solve, one program per (chunk, head).

For rows r and columns j <= r of a chunk (G = in-chunk cumsum of g from gate_cumsum_kernel, q and k L2-normalized):
    Akk[r, j] = beta_r sum_d k_r k_j e^{G_r - G_j}    (strictly lower)
    Aqk[r, j] = scale sum_d q_r k_j e^{G_r - G_j}     (lower with diagonal; the blocks above are not written)
and X = (I + Akk)^{-1} (solve_kernel.invert_blocks), stored instead of Akk.

The chunk is cut into four 16-row sub-chunks and the K axis into BK tiles; every tile of q, k and G is loaded
once per program and feeds the ten (i, j <= i) block pairs. Each pair is a [16, BK] x [BK, 16] dot with the decay
factored around the first row n_i of sub-chunk i: the query side e^{G_r - G_n} and, for j < i, the key side
e^{G_n - G_j} are <= 1. On the diagonal (j = i) the key side is >= 1; it is exact while a channel decays by at most
80 nats inside the sub-chunk (e^80 is far from fp32 overflow), else that block is recomputed for the tile with
exact pairwise exponentials. L2 normalization and beta are row and column scalings, applied after the K loop.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, EXP_CAP, load_rows, locate_chunk, row_of
from dayzero.plugins.kda.solve_kernel import invert_blocks, store_lower_blocks
from dayzero.plugins.triton_utils import dot


@triton.jit
def _sub_chunk(a, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, kc, i: tl.constexpr):
    """One K tile of sub-chunk i: rows of a (q or k), k, G [BC, BK] and the G rows n_i (its first) and of its last
    valid token."""
    t = start + i * BC + tl.arange(0, BC)
    valid = t < eos
    G = load_rows(g_cum, t, valid, h, H, K, kc)
    first = start + i * BC
    last = tl.minimum(first + BC, eos) - 1
    live = (kc < K) & (kc * 0 + first < eos)
    g_first = tl.load(g_cum + (first * H + h) * K + kc, mask=live, other=0.0)
    g_last = tl.load(g_cum + (last * H + h) * K + kc, mask=live, other=0.0)
    return load_rows(a, t, valid, h, H, K, kc), load_rows(k, t, valid, h, H, K, kc), G, g_first, g_last


@triton.jit
def _pair(a_up, k_j, G_j, g_first, cap, acc):
    """Accumulate block (i, j): a_up carries e^{G_r - G_n}, the keys get e^{min(G_n - G_j, cap)}."""
    return acc + dot(a_up, tl.trans(k_j * tl.exp(tl.minimum(g_first[None, :] - G_j, cap))))


@triton.jit
def _exact_diagonal(a, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr,
                    i: tl.constexpr):
    """Block (i, i) over all of K with exact pairwise decays (entries above the diagonal are junk, masked later)."""
    sub = tl.arange(0, BC)
    acc = tl.zeros([BC, BC], tl.float32)
    for d0 in range(0, K, BK):
        kc = d0 + tl.arange(0, BK)
        aa, kk, G, _, _ = _sub_chunk(a, k, g_cum, start, eos, h, H, K, kc, i)
        for s in range(BC):
            decay = tl.exp(tl.minimum(G - row_of(G, sub, s)[None, :], 0.0))
            column = tl.sum(aa * row_of(kk, sub, s)[None, :] * decay, axis=1)
            acc = tl.where(sub[None, :] == s, acc + column[:, None], acc)
    return acc


@triton.jit
def _exact_if_needed(acc, spread, a, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr,
                     i: tl.constexpr):
    """The factored block (i, i) is exact while no channel decays by more than EXP_CAP inside the sub-chunk (the
    key factor was capped there); else recompute it pairwise. Rare, and outside the main loop to keep it lean."""
    if spread > EXP_CAP:
        acc = _exact_diagonal(a, k, g_cum, start, eos, h, H, K, BK, i)
    return acc


@triton.jit
def _pair_blocks(a, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """sum_d a_r k_j e^{G_r - G_j} for the ten blocks (i, j <= i) of a chunk, a = q or k (not normalized), and the
    row sums of squares of a per sub-chunk. One pass per operand keeps ten [16, 16] accumulators live, not twenty:
    a 16x16 dot result is replicated in every warp and twenty of them spill."""
    z = tl.zeros([BC, BC], tl.float32)
    a00, a10, a11, a20, a21, a22, a30, a31, a32, a33 = z, z, z, z, z, z, z, z, z, z
    zv = tl.zeros([BC], tl.float32)
    s0, s1, s2, s3 = zv, zv, zv, zv
    # largest decay of a channel inside each sub-chunk (first row minus last row of G)
    w0, w1, w2, w3 = 0.0, 0.0, 0.0, 0.0
    for d0 in range(0, K, BK):
        kc = d0 + tl.arange(0, BK)
        x0, k0, G0, n0, l0 = _sub_chunk(a, k, g_cum, start, eos, h, H, K, kc, 0)
        u0 = x0 * tl.exp(tl.minimum(G0 - n0[None, :], 0.0))
        a00 = _pair(u0, k0, G0, n0, EXP_CAP, a00)

        x1, k1, G1, n1, l1 = _sub_chunk(a, k, g_cum, start, eos, h, H, K, kc, 1)
        u1 = x1 * tl.exp(tl.minimum(G1 - n1[None, :], 0.0))
        a10 = _pair(u1, k0, G0, n1, 0.0, a10)
        a11 = _pair(u1, k1, G1, n1, EXP_CAP, a11)

        x2, k2, G2, n2, l2 = _sub_chunk(a, k, g_cum, start, eos, h, H, K, kc, 2)
        u2 = x2 * tl.exp(tl.minimum(G2 - n2[None, :], 0.0))
        a20 = _pair(u2, k0, G0, n2, 0.0, a20)
        a21 = _pair(u2, k1, G1, n2, 0.0, a21)
        a22 = _pair(u2, k2, G2, n2, EXP_CAP, a22)

        x3, k3, G3, n3, l3 = _sub_chunk(a, k, g_cum, start, eos, h, H, K, kc, 3)
        u3 = x3 * tl.exp(tl.minimum(G3 - n3[None, :], 0.0))
        a30 = _pair(u3, k0, G0, n3, 0.0, a30)
        a31 = _pair(u3, k1, G1, n3, 0.0, a31)
        a32 = _pair(u3, k2, G2, n3, 0.0, a32)
        a33 = _pair(u3, k3, G3, n3, EXP_CAP, a33)
        s0, s1, s2, s3 = s0 + tl.sum(x0 * x0, 1), s1 + tl.sum(x1 * x1, 1), s2 + tl.sum(x2 * x2, 1), \
            s3 + tl.sum(x3 * x3, 1)
        w0, w1 = tl.maximum(w0, tl.max(n0 - l0)), tl.maximum(w1, tl.max(n1 - l1))
        w2, w3 = tl.maximum(w2, tl.max(n2 - l2)), tl.maximum(w3, tl.max(n3 - l3))
    a00 = _exact_if_needed(a00, w0, a, k, g_cum, start, eos, h, H, K, BK, 0)
    a11 = _exact_if_needed(a11, w1, a, k, g_cum, start, eos, h, H, K, BK, 1)
    a22 = _exact_if_needed(a22, w2, a, k, g_cum, start, eos, h, H, K, BK, 2)
    a33 = _exact_if_needed(a33, w3, a, k, g_cum, start, eos, h, H, K, BK, 3)
    return a00, a10, a11, a20, a21, a22, a30, a31, a32, a33, s0, s1, s2, s3


@triton.jit
def _inverse_norm(sum_sq, USE_L2NORM: tl.constexpr):
    """1 / ||x|| from the row sums of squares (1 without L2 normalization)."""
    if USE_L2NORM:
        inv = 1.0 / tl.sqrt(sum_sq + 1e-6)
    else:
        inv = sum_sq * 0.0 + 1.0
    return inv


@triton.jit
def _row_inverse_norms(sum_sq, out, start, eos, h, H: tl.constexpr, i: tl.constexpr, USE_L2NORM: tl.constexpr):
    """Sub-chunk i's 1/||x|| as an fp32 [BC] vector, also stored for the WY kernel."""
    t = start + i * BC + tl.arange(0, BC)
    inv = _inverse_norm(sum_sq, USE_L2NORM)
    tl.store(out + t * H + h, inv, mask=t < eos)
    return inv


@triton.jit
def _beta(beta, start, eos, h, H: tl.constexpr, i: tl.constexpr):
    t = start + i * BC + tl.arange(0, BC)
    return tl.load(beta + t * H + h, mask=t < eos, other=0.0).to(tl.float32)


@triton.jit
def _scale_block(acc, row, col, DIAGONAL: tl.constexpr, STRICT: tl.constexpr):
    """acc * row[:, None] * col[None, :]; a diagonal block keeps its lower triangle (without the diagonal if STRICT)."""
    acc = acc * row[:, None] * col[None, :]
    if DIAGONAL:
        sub = tl.arange(0, BC)
        keep = (sub[:, None] > sub[None, :]) if STRICT else (sub[:, None] >= sub[None, :])
        acc = tl.where(keep, acc, 0.0)
    return acc


@triton.jit
def _scale_blocks(b00, b10, b11, b20, b21, b22, b30, b31, b32, b33, r0, r1, r2, r3, c0, c1, c2, c3,
                  STRICT: tl.constexpr):
    """Scale the ten blocks by row factors r_i and column factors c_j (see _scale_block)."""
    return (_scale_block(b00, r0, c0, True, STRICT), _scale_block(b10, r1, c0, False, STRICT),
            _scale_block(b11, r1, c1, True, STRICT), _scale_block(b20, r2, c0, False, STRICT),
            _scale_block(b21, r2, c1, False, STRICT), _scale_block(b22, r2, c2, True, STRICT),
            _scale_block(b30, r3, c0, False, STRICT), _scale_block(b31, r3, c1, False, STRICT),
            _scale_block(b32, r3, c2, False, STRICT), _scale_block(b33, r3, c3, True, STRICT))


@triton.jit
def intra_pairs_kernel(
    q, k, g_cum, beta, cu_seqlens, chunk_offsets, x_out, aqk_out, q_inv_out, k_inv_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    # AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    h = tl.program_id(1)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(0))
    if live:
        # Akk first, solved and stored before the Aqk pass: only ten blocks are live at a time
        b00, b10, b11, b20, b21, b22, b30, b31, b32, b33, s0, s1, s2, s3 = _pair_blocks(
            k, k, g_cum, start, eos, h, H, K, BK)
        c0 = _row_inverse_norms(s0, k_inv_out, start, eos, h, H, 0, USE_L2NORM)
        c1 = _row_inverse_norms(s1, k_inv_out, start, eos, h, H, 1, USE_L2NORM)
        c2 = _row_inverse_norms(s2, k_inv_out, start, eos, h, H, 2, USE_L2NORM)
        c3 = _row_inverse_norms(s3, k_inv_out, start, eos, h, H, 3, USE_L2NORM)
        r0, r1 = _beta(beta, start, eos, h, H, 0) * c0, _beta(beta, start, eos, h, H, 1) * c1
        r2, r3 = _beta(beta, start, eos, h, H, 2) * c2, _beta(beta, start, eos, h, H, 3) * c3
        b00, b10, b11, b20, b21, b22, b30, b31, b32, b33 = _scale_blocks(
            b00, b10, b11, b20, b21, b22, b30, b31, b32, b33, r0, r1, r2, r3, c0, c1, c2, c3, True)
        b00, b10, b11, b20, b21, b22, b30, b31, b32, b33 = invert_blocks(
            b00, b10, b11, b20, b21, b22, b30, b31, b32, b33)
        store_lower_blocks(x_out, start, eos, h, H, b00, b10, b11, b20, b21, b22, b30, b31, b32, b33)

        b00, b10, b11, b20, b21, b22, b30, b31, b32, b33, s0, s1, s2, s3 = _pair_blocks(
            q, k, g_cum, start, eos, h, H, K, BK)
        r0 = _row_inverse_norms(s0, q_inv_out, start, eos, h, H, 0, USE_L2NORM) * scale
        r1 = _row_inverse_norms(s1, q_inv_out, start, eos, h, H, 1, USE_L2NORM) * scale
        r2 = _row_inverse_norms(s2, q_inv_out, start, eos, h, H, 2, USE_L2NORM) * scale
        r3 = _row_inverse_norms(s3, q_inv_out, start, eos, h, H, 3, USE_L2NORM) * scale
        b00, b10, b11, b20, b21, b22, b30, b31, b32, b33 = _scale_blocks(
            b00, b10, b11, b20, b21, b22, b30, b31, b32, b33, r0, r1, r2, r3, c0, c1, c2, c3, False)
        store_lower_blocks(aqk_out, start, eos, h, H, b00, b10, b11, b20, b21, b22, b30, b31, b32, b33)
