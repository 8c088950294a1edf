"""Intra-chunk pair terms of chunked KDA, one program per (16-row sub-chunk i, chunk, head).

For rows r of sub-chunk i and columns j <= r of the chunk (G = in-chunk cumsum of g from gate_cumsum_kernel,
q and k L2-normalized):
    Akk[r, j] = beta_r sum_d k_r k_j e^{G_r - G_j}    (strictly lower; the solve kernel inverts I + Akk)
    Aqk[r, j] = scale sum_d q_r k_j e^{G_r - G_j}     (lower with diagonal; zero above)
Per K tile, the [16, 64] rows are one dot with the decay factored around the first row of sub-chunk i: the query
side e^{G_r - G_ref} and, for earlier sub-chunks, the key side e^{G_ref - G_j} are <= 1; inside sub-chunk i the key
factor is capped at e^80 and, when a channel decays by more than 80 nats there, those 16 columns are recomputed with
exact pairwise exponentials. L2 normalization is a row and column scaling, applied once after the K loop.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, EXP_CAP, load_rows, locate_chunk, row_of
from dayzero.plugins.triton_utils import dot


@triton.jit
def _inverse_norm(sum_sq, USE_L2NORM: tl.constexpr):
    """1 / ||x|| from the row sums of squares (1 without L2 normalization)."""
    if USE_L2NORM:
        inv = 1.0 / tl.sqrt(sum_sq + 1e-6)
    else:
        inv = sum_sq * 0.0 + 1.0
    return inv


@triton.jit
def _exact_diagonal(aqk, akk, qq, kk, G_local, first):
    """Columns first..first+BC of the [BC, BT] terms with exact pairwise decays inside the sub-chunk."""
    sub = tl.arange(0, BC)
    cols = tl.arange(0, BT)
    for s in range(BC):
        k_s = row_of(kk, sub, s)
        decay = tl.exp(tl.minimum(G_local - row_of(G_local, sub, s)[None, :], 0.0))
        here = cols[None, :] == first + s
        aqk = tl.where(here, tl.sum(qq * k_s[None, :] * decay, axis=1)[:, None], aqk)
        akk = tl.where(here, tl.sum(kk * k_s[None, :] * decay, axis=1)[:, None], akk)
    return aqk, akk


@triton.jit
def intra_pairs_kernel(
    q, k, g_cum, beta, cu_seqlens, chunk_offsets, akk_out, aqk_out, q_inv_out, k_inv_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    first = tl.program_id(0) * BC
    h = tl.program_id(2)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(1))
    if live & (start + first < eos):
        sub = tl.arange(0, BC)
        rows = tl.arange(0, BT)
        t = start + rows
        valid = t < eos
        t_i = start + first + sub
        valid_i = t_i < eos
        keys_so_far = rows[:, None] < first + BC
        last = tl.minimum(eos - start - first, BC) - 1  # last valid row of the sub-chunk
        aqk = tl.zeros([BC, BT], tl.float32)
        akk = tl.zeros([BC, BT], tl.float32)
        q_ss = tl.zeros([BC], tl.float32)
        k_ss_i = tl.zeros([BC], tl.float32)
        k_ss = tl.zeros([BT], tl.float32)
        for k0 in range(0, K, BK):
            kc = k0 + tl.arange(0, BK)
            G = load_rows(g_cum, t, valid, h, H, K, kc)
            ref = row_of(G, rows, first)
            kk = load_rows(k, t, valid, h, H, K, kc)
            k_ss += tl.sum(kk * kk, axis=1)
            right = tl.where(keys_so_far, kk * tl.exp(tl.minimum(ref[None, :] - G, EXP_CAP)), 0.0)

            G_local = load_rows(g_cum, t_i, valid_i, h, H, K, kc)
            up = tl.exp(tl.minimum(G_local - ref[None, :], 0.0))
            qq = load_rows(q, t_i, valid_i, h, H, K, kc)
            kk_i = load_rows(k, t_i, valid_i, h, H, K, kc)
            q_ss += tl.sum(qq * qq, axis=1)
            k_ss_i += tl.sum(kk_i * kk_i, axis=1)
            aqk_part = dot(qq * up, tl.trans(right))
            akk_part = dot(kk_i * up, tl.trans(right))
            if tl.max(ref - row_of(G_local, sub, last)) > EXP_CAP:
                aqk_part, akk_part = _exact_diagonal(aqk_part, akk_part, qq, kk_i, G_local, first)
            aqk += aqk_part
            akk += akk_part

        q_inv = _inverse_norm(q_ss, USE_L2NORM)
        k_inv_i = _inverse_norm(k_ss_i, USE_L2NORM)
        k_inv = _inverse_norm(k_ss, USE_L2NORM)
        tl.store(q_inv_out + t_i * H + h, q_inv, mask=valid_i)
        tl.store(k_inv_out + t_i * H + h, k_inv_i, mask=valid_i)
        b = tl.load(beta + t_i * H + h, mask=valid_i, other=0.0).to(tl.float32)
        row_ids = (first + sub)[:, None]
        aqk = tl.where(rows[None, :] <= row_ids, aqk * (q_inv * scale)[:, None] * k_inv[None, :], 0.0)
        akk = tl.where(rows[None, :] < row_ids, akk * (b * k_inv_i)[:, None] * k_inv[None, :], 0.0)
        offs = (t_i[:, None] * H + h) * BT + rows[None, :]
        tl.store(aqk_out + offs, aqk.to(aqk_out.dtype.element_ty), mask=valid_i[:, None])
        tl.store(akk_out + offs, akk.to(akk_out.dtype.element_ty), mask=valid_i[:, None])
