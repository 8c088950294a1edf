"""Intra-chunk pair terms of chunked KDA, one program per (16-row sub-chunk i, chunk, head).

For rows r of sub-chunk i and columns j <= r of the chunk (G = in-chunk cumsum of g, q and k L2-normalized):
    Akk[r, j] = beta_r sum_d k_r k_j e^{G_r - G_j}    (strictly lower; the solve kernel inverts I + Akk)
    Aqk[r, j] = scale sum_d q_r k_j e^{G_r - G_j}     (lower with diagonal; zero above)
Each 16x16 block (i, j) is one dot with the decay factored around the first row of sub-chunk i: off-diagonal both
factors are <= 1; on the diagonal the key factor is capped at e^80 and, when a channel decays by more than 80 nats
inside the sub-chunk, the block is recomputed with exact pairwise exponentials.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, EXP_CAP, load_rows, locate_chunk, row_of
from dayzero.plugins.triton_utils import dot


@triton.jit
def _inverse_norm(x, USE_L2NORM: tl.constexpr):
    """Per-row 1 / ||x|| of a [BC, K] tile (1 without L2 normalization)."""
    if USE_L2NORM:
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) + 1e-6)
    else:
        inv = tl.full([BC], 1.0, tl.float32)
    return inv


@triton.jit
def _exact_diagonal(qn, kn, G, sub):
    """Diagonal-block q.k and k.k terms with exact pairwise decays (for decays too strong to factor)."""
    aqk = tl.zeros([BC, BC], tl.float32)
    akk = tl.zeros([BC, BC], tl.float32)
    for s in range(BC):
        k_s = row_of(kn, sub, s)
        decay = tl.exp(tl.minimum(G - row_of(G, sub, s)[None, :], 0.0))
        here = sub[None, :] == s
        aqk = tl.where(here, tl.sum(qn * k_s[None, :] * decay, axis=1)[:, None], aqk)
        akk = tl.where(here, tl.sum(kn * k_s[None, :] * decay, axis=1)[:, None], akk)
    return aqk, akk


@triton.jit
def _store_block(ptr, t, valid, h, H: tl.constexpr, j, block):
    cols = j * BC + tl.arange(0, BC)
    tl.store(ptr + (t[:, None] * H + h) * BT + cols[None, :], block.to(ptr.dtype.element_ty), mask=valid[:, None])


@triton.jit
def intra_pairs_kernel(
    q, k, g, beta, cu_seqlens, chunk_offsets, akk_out, aqk_out, q_inv_out, k_inv_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    i = tl.program_id(0)
    h = tl.program_id(2)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(1))
    if live and start + i * BC < eos:
        sub = tl.arange(0, BC)
        ks = tl.arange(0, K)
        t_i = start + i * BC + sub
        valid = t_i < eos
        prefix = tl.zeros([K], tl.float32)
        for j in range(0, i):
            prefix += tl.sum(load_rows(g, start + j * BC + sub, sub >= 0, h, H, K, ks), axis=0)
        G = prefix[None, :] + tl.cumsum(load_rows(g, t_i, valid, h, H, K, ks), axis=0)
        ref = row_of(G, sub, 0)
        qq = load_rows(q, t_i, valid, h, H, K, ks)
        kk = load_rows(k, t_i, valid, h, H, K, ks)
        q_inv = _inverse_norm(qq, USE_L2NORM)
        k_inv = _inverse_norm(kk, USE_L2NORM)
        tl.store(q_inv_out + t_i * H + h, q_inv, mask=valid)
        tl.store(k_inv_out + t_i * H + h, k_inv, mask=valid)
        qn = qq * q_inv[:, None]
        kn = kk * k_inv[:, None]
        b = tl.load(beta + t_i * H + h, mask=valid, other=0.0).to(tl.float32)

        up = tl.exp(tl.minimum(G - ref[None, :], 0.0))
        q_up = qn * up
        k_up = kn * up
        running = tl.zeros([K], tl.float32)
        for j in range(0, i):
            t_j = start + j * BC + sub
            g_j = load_rows(g, t_j, sub >= 0, h, H, K, ks)
            G_j = running[None, :] + tl.cumsum(g_j, axis=0)
            running += tl.sum(g_j, axis=0)
            k_j = load_rows(k, t_j, sub >= 0, h, H, K, ks)
            k_j = k_j * _inverse_norm(k_j, USE_L2NORM)[:, None]
            right = tl.trans(k_j * tl.exp(tl.minimum(ref[None, :] - G_j, 0.0)))
            _store_block(aqk_out, t_i, valid, h, H, j, dot(q_up, right) * scale)
            _store_block(akk_out, t_i, valid, h, H, j, dot(k_up, right) * b[:, None])

        right = tl.trans(kn * tl.exp(tl.minimum(ref[None, :] - G, EXP_CAP)))
        aqk = dot(q_up, right)
        akk = dot(k_up, right)
        if tl.max(ref - row_of(G, sub, BC - 1)) > EXP_CAP:
            aqk, akk = _exact_diagonal(qn, kn, G, sub)
        _store_block(aqk_out, t_i, valid, h, H, i, tl.where(sub[:, None] >= sub[None, :], aqk * scale, 0.0))
        _store_block(akk_out, t_i, valid, h, H, i, tl.where(sub[:, None] > sub[None, :], akk * b[:, None], 0.0))
        for j in range(i + 1, BT // BC):
            _store_block(aqk_out, t_i, valid, h, H, j, tl.zeros([BC, BC], tl.float32))
