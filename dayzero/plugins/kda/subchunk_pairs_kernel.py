"""Intra-chunk pair terms of chunked KDA by 16-token sub-chunk blocks, with the triangular solve folded in.

Same products as chunk_intra_kernel.py (Aqk lower with the diagonal, X = (I + Akk)^{-1} with Akk strictly lower), in
two launches instead of a pair kernel plus a solve:

* `diag_blocks_kernel`, one program per (chunk, sub-chunk, head): the four diagonal 16x16 blocks with exact pairwise
  decays e^{G_r - G_c} (c <= r, so every exponent is <= 0 whatever the gate), the L2 row factors of q and k, the
  diagonal Aqk block, and D_i = (I + L_ii)^{-1} kept in fp32 for the second launch.
* `offdiag_solve_kernel`, one program per (chunk, head): the six blocks below the diagonal in one pass over K, each
  factored around the first row n_i of its row sub-chunk i: e^{G_r - G_c} = e^{G_r - G_n} e^{G_n - G_c}, where
  both factors are <= 1 (r is at or after n, c before it, and G falls along the chunk), so nothing can overflow and
  an underflowed factor only drops a term that is smaller still. Then X's blocks from the D_i and the L_ij
  (solve_kernel.compose_inverse). q, k and G of the chunk are read once per program; twelve 16x16 accumulators.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, CHUNK, inverse_norm, load_rows, locate_chunk
from dayzero.plugins.kda.solve_kernel import compose_inverse, inverse_unit_lower, store_lower_blocks
from dayzero.plugins.triton_utils import dot


@triton.jit
def _exact_block(q, k, g_cum, first, eos, h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """Raw k_r.k_c e^{G_r - G_c} and q_r.k_c e^{G_r - G_c} for the sub-chunk starting at token `first` against
    itself (entries above the diagonal are junk, masked by the caller), and its rows' sums of squares of q and k."""
    sub = tl.arange(0, BC)
    t = first + sub
    valid = t < eos
    acc_kk = tl.zeros([BC, BC], tl.float32)
    acc_qk = tl.zeros([BC, BC], tl.float32)
    q_sq = tl.zeros([BC], tl.float32)
    k_sq = tl.zeros([BC], tl.float32)
    for d0 in range(0, K, BK):
        kc = d0 + tl.arange(0, BK)
        qq = load_rows(q, t, valid, h, H, K, kc)
        kk = load_rows(k, t, valid, h, H, K, kc)
        G = load_rows(g_cum, t, valid, h, H, K, kc)
        q_sq += tl.sum(qq * qq, axis=1)
        k_sq += tl.sum(kk * kk, axis=1)
        for c in tl.static_range(BC):
            # column c's key and gate rows again, as vectors (L1 hits: the tiles above hold them)
            ok = (first + c + kc * 0 < eos) & (kc < K)
            key_c = tl.load(k + ((first + c) * H + h) * K + kc, mask=ok, other=0.0).to(tl.float32)
            g_c = tl.load(g_cum + ((first + c) * H + h) * K + kc, mask=ok, other=0.0)
            key = key_c[None, :] * tl.exp(tl.minimum(G - g_c[None, :], 0.0))
            here = sub[None, :] == c
            acc_kk = tl.where(here, acc_kk + tl.sum(kk * key, axis=1)[:, None], acc_kk)
            acc_qk = tl.where(here, acc_qk + tl.sum(qq * key, axis=1)[:, None], acc_qk)
    return acc_kk, acc_qk, q_sq, k_sq


@triton.jit
def diag_blocks_kernel(
    q, k, g_cum, beta, cu_seqlens, chunk_offsets, d_out, aqk_out, q_inv_out, k_inv_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
):
    # AOTInductor passes Python floats as fp64 scalars
    scale = tl.cast(scale, tl.float32)
    i = tl.program_id(1)
    h = tl.program_id(2)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(0))
    first = start + i * BC
    if live & (first < eos):
        sub = tl.arange(0, BC)
        t = first + sub
        valid = t < eos
        acc_kk, acc_qk, q_sq, k_sq = _exact_block(q, k, g_cum, first, eos, h, H, K, BK)
        q_inv = inverse_norm(q_sq, USE_L2NORM)
        k_inv = inverse_norm(k_sq, USE_L2NORM)
        tl.store(q_inv_out + t * H + h, q_inv, mask=valid)
        tl.store(k_inv_out + t * H + h, k_inv, mask=valid)
        b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)
        L = tl.where(sub[:, None] > sub[None, :], acc_kk * (b * k_inv)[:, None] * k_inv[None, :], 0.0)
        aqk = tl.where(sub[:, None] >= sub[None, :], acc_qk * (scale * q_inv)[:, None] * k_inv[None, :], 0.0)
        tl.store(aqk_out + (t[:, None] * H + h) * BT + i * BC + sub[None, :], aqk.to(aqk_out.dtype.element_ty),
                 mask=valid[:, None])
        tl.store(d_out + (t[:, None] * H + h) * BC + sub[None, :], inverse_unit_lower(L), mask=valid[:, None])


@triton.jit
def _sub_chunk(q, k, g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, kc, i: tl.constexpr):
    """Sub-chunk i's q, k and G rows [BC, BK] (0 past eos) and its rows' valid mask."""
    t = start + i * BC + tl.arange(0, BC)
    valid = t < eos
    return (load_rows(q, t, valid, h, H, K, kc), load_rows(k, t, valid, h, H, K, kc),
            load_rows(g_cum, t, valid, h, H, K, kc), valid)


@triton.jit
def _first_gate(g_cum, start, eos, h, H: tl.constexpr, K: tl.constexpr, kc, i: tl.constexpr):
    """G of sub-chunk i's first token [BK] (0 when the sub-chunk is past eos)."""
    n = start + i * BC
    return tl.load(g_cum + (n * H + h) * K + kc, mask=(n + kc * 0 < eos) & (kc < K), other=0.0)


@triton.jit
def _scaled_rows(qi, ki, Gi, valid, g_n):
    """Row sub-chunk i's q and k times e^{G_r - G_n} <= 1; rows past eos (G loaded as 0) get 0, not e^{-G_n}."""
    row_side = tl.where(valid[:, None], tl.exp(tl.minimum(Gi - g_n[None, :], 0.0)), 0.0)
    return qi * row_side, ki * row_side


@triton.jit
def _accumulate(qr, kr, kj, Gj, g_n, acc_qk, acc_kk):
    """Block (i, j) for one K tile: the row side (_scaled_rows) against the keys of the earlier sub-chunk j times
    e^{G_n - G_c} <= 1."""
    key = tl.trans(kj * tl.exp(tl.minimum(g_n[None, :] - Gj, 0.0)))
    return acc_qk + dot(qr, key), acc_kk + dot(kr, key)


@triton.jit
def _scaled(acc, rows_scale, cols_scale):
    return acc * rows_scale[:, None] * cols_scale[None, :]


@triton.jit
def _row_values(ptr, start, eos, h, H: tl.constexpr, i: tl.constexpr):
    """A [T, H] per-token value (beta, q_inv, k_inv) for sub-chunk i's rows [BC] (0 past eos)."""
    t = start + i * BC + tl.arange(0, BC)
    return tl.load(ptr + t * H + h, mask=t < eos, other=0.0).to(tl.float32)


@triton.jit
def _store_aqk(aqk_out, start, eos, h, H: tl.constexpr, i: tl.constexpr, j: tl.constexpr, block):
    sub = tl.arange(0, BC)
    t = start + i * BC + sub
    tl.store(aqk_out + (t[:, None] * H + h) * BT + j * BC + sub[None, :], block.to(aqk_out.dtype.element_ty),
             mask=(t < eos)[:, None])


@triton.jit
def _load_d(d_blocks, start, eos, h, H: tl.constexpr, i: tl.constexpr):
    """D_i [BC, BC] of sub-chunk i as diag_blocks_kernel stored it ([T, H, BC] rows; 0 past eos)."""
    sub = tl.arange(0, BC)
    t = start + i * BC + sub
    return tl.load(d_blocks + (t[:, None] * H + h) * BC + sub[None, :], mask=(t < eos)[:, None], other=0.0)


@triton.jit
def offdiag_solve_kernel(
    q, k, g_cum, beta, d_blocks, q_inv, k_inv, cu_seqlens, chunk_offsets, x_out, aqk_out, scale, N,
    H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr,
):
    scale = tl.cast(scale, tl.float32)
    h = tl.program_id(1)
    start, eos, live = locate_chunk(cu_seqlens, chunk_offsets, N, tl.program_id(0))
    if live:
        # raw sums of block (i, j) below the diagonal: kk for Akk, qk for Aqk
        kk10 = tl.zeros([BC, BC], tl.float32)
        qk10 = tl.zeros([BC, BC], tl.float32)
        kk20 = tl.zeros([BC, BC], tl.float32)
        qk20 = tl.zeros([BC, BC], tl.float32)
        kk21 = tl.zeros([BC, BC], tl.float32)
        qk21 = tl.zeros([BC, BC], tl.float32)
        kk30 = tl.zeros([BC, BC], tl.float32)
        qk30 = tl.zeros([BC, BC], tl.float32)
        kk31 = tl.zeros([BC, BC], tl.float32)
        qk31 = tl.zeros([BC, BC], tl.float32)
        kk32 = tl.zeros([BC, BC], tl.float32)
        qk32 = tl.zeros([BC, BC], tl.float32)
        for d0 in range(0, K, BK):
            kc = d0 + tl.arange(0, BK)
            _, k0, G0, _ = _sub_chunk(q, k, g_cum, start, eos, h, H, K, kc, 0)
            q1, k1, G1, valid1 = _sub_chunk(q, k, g_cum, start, eos, h, H, K, kc, 1)
            q2, k2, G2, valid2 = _sub_chunk(q, k, g_cum, start, eos, h, H, K, kc, 2)
            q3, k3, G3, valid3 = _sub_chunk(q, k, g_cum, start, eos, h, H, K, kc, 3)
            n1 = _first_gate(g_cum, start, eos, h, H, K, kc, 1)
            q1r, k1r = _scaled_rows(q1, k1, G1, valid1, n1)
            qk10, kk10 = _accumulate(q1r, k1r, k0, G0, n1, qk10, kk10)
            n2 = _first_gate(g_cum, start, eos, h, H, K, kc, 2)
            q2r, k2r = _scaled_rows(q2, k2, G2, valid2, n2)
            qk20, kk20 = _accumulate(q2r, k2r, k0, G0, n2, qk20, kk20)
            qk21, kk21 = _accumulate(q2r, k2r, k1, G1, n2, qk21, kk21)
            n3 = _first_gate(g_cum, start, eos, h, H, K, kc, 3)
            q3r, k3r = _scaled_rows(q3, k3, G3, valid3, n3)
            qk30, kk30 = _accumulate(q3r, k3r, k0, G0, n3, qk30, kk30)
            qk31, kk31 = _accumulate(q3r, k3r, k1, G1, n3, qk31, kk31)
            qk32, kk32 = _accumulate(q3r, k3r, k2, G2, n3, qk32, kk32)
        # L2 factors from diag_blocks_kernel: k_inv on every column; scale * q_inv on Aqk's rows, beta * k_inv on Akk's
        kinv0 = _row_values(k_inv, start, eos, h, H, 0)
        kinv1 = _row_values(k_inv, start, eos, h, H, 1)
        kinv2 = _row_values(k_inv, start, eos, h, H, 2)
        kinv3 = _row_values(k_inv, start, eos, h, H, 3)
        qs1 = _row_values(q_inv, start, eos, h, H, 1) * scale
        qs2 = _row_values(q_inv, start, eos, h, H, 2) * scale
        qs3 = _row_values(q_inv, start, eos, h, H, 3) * scale
        _store_aqk(aqk_out, start, eos, h, H, 1, 0, _scaled(qk10, qs1, kinv0))
        _store_aqk(aqk_out, start, eos, h, H, 2, 0, _scaled(qk20, qs2, kinv0))
        _store_aqk(aqk_out, start, eos, h, H, 2, 1, _scaled(qk21, qs2, kinv1))
        _store_aqk(aqk_out, start, eos, h, H, 3, 0, _scaled(qk30, qs3, kinv0))
        _store_aqk(aqk_out, start, eos, h, H, 3, 1, _scaled(qk31, qs3, kinv1))
        _store_aqk(aqk_out, start, eos, h, H, 3, 2, _scaled(qk32, qs3, kinv2))
        kb1 = _row_values(beta, start, eos, h, H, 1) * kinv1
        kb2 = _row_values(beta, start, eos, h, H, 2) * kinv2
        kb3 = _row_values(beta, start, eos, h, H, 3) * kinv3
        X00, X10, X11, X20, X21, X22, X30, X31, X32, X33 = compose_inverse(
            _load_d(d_blocks, start, eos, h, H, 0), _load_d(d_blocks, start, eos, h, H, 1),
            _load_d(d_blocks, start, eos, h, H, 2), _load_d(d_blocks, start, eos, h, H, 3),
            _scaled(kk10, kb1, kinv0), _scaled(kk20, kb2, kinv0), _scaled(kk21, kb2, kinv1),
            _scaled(kk30, kb3, kinv0), _scaled(kk31, kb3, kinv1), _scaled(kk32, kb3, kinv2))
        store_lower_blocks(x_out, start, eos, h, H, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33)


def subchunk_pair_terms(q: torch.Tensor, k: torch.Tensor, g_cum: torch.Tensor, beta: torch.Tensor, scale: float,
                        cu_seqlens: torch.Tensor, offsets: torch.Tensor, num_chunks: int, use_qk_l2norm: bool,
                        x: torch.Tensor, aqk: torch.Tensor, q_inv: torch.Tensor, k_inv: torch.Tensor, launch=None,
                        num_warps: int = 4, block_k: int = 16, num_stages: int = 1) -> None:
    """chunk_intra_kernel.pair_terms by sub-chunk blocks (same outputs); the diagonal inverses go through an fp32
    [T, H, 16] buffer. Off-device sm_90 builds of offdiag_solve_kernel (bench/triton_resources.py): BK 16 at 2-4
    warps 242-252 registers, no spills; BK 32 spills at 1-4 warps (the 16-row dot operands and the twelve 16x16
    accumulators are replicated in every warp), 255 without spills at 8. Not yet timed on the H200."""
    T, H, K = k.shape
    N = cu_seqlens.shape[0] - 1
    launch = launch or (lambda fn: fn)
    block_k = min(K, block_k)
    d_blocks = torch.empty(T, H, BC.value, device=q.device, dtype=torch.float32)
    launch(diag_blocks_kernel)[(num_chunks, CHUNK // BC.value, H)](
        q, k, g_cum, beta, cu_seqlens, offsets, d_blocks, aqk, q_inv, k_inv, scale, N,
        H=H, K=K, BK=block_k, USE_L2NORM=use_qk_l2norm, num_warps=4)
    launch(offdiag_solve_kernel)[(num_chunks, H)](
        q, k, g_cum, beta, d_blocks, q_inv, k_inv, cu_seqlens, offsets, x, aqk, scale, N,
        H=H, K=K, BK=block_k, num_warps=num_warps, num_stages=num_stages)
