"""Per-token products of chunked KDA, one program per (K or V tile, chunk, head), given X = (I + Akk)^{-1}:
    W = X (beta e^G k),  U = X (beta v),  qg = scale q e^G,  kt = k e^{G_C - G},  decay = e^{G_C}
(q, k L2-normalized by the row factors of the intra kernel and read from key head h // (H // Hk); G the in-chunk
cumsum of g, G_C its last row). With a per-head gate (`gdn_wy_kernel`) the gate is a row factor: W = X (w_scale k)
with w_scale = beta e^G k_inv from gdn_intra_kernel.py, and U as above; qg, kt and the decay are not written (the
state kernel scales q and k by their row factors).

On the H200 none of these is faster (bench/bench_kda_prefill.py): one program per chunk looping over its tiles,
64-column tiles, a program walking one tile of 8 consecutive chunks in a software-pipelined loop, a register cap for
more programs an SM."""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BT, chunk_span, load_lower, load_rows, row_of
from dayzero.plugins.triton_utils import dot


@triton.jit
def _store_rows(ptr, t, valid, h, H: tl.constexpr, D: tl.constexpr, cols, tile):
    offs = (t[:, None] * H + h) * D + cols[None, :]
    tl.store(ptr + offs, tile.to(ptr.dtype.element_ty), mask=valid[:, None] & (cols[None, :] < D))


@triton.jit
def _chunk_rows(x, beta, start, eos, h, H: tl.constexpr, dtype: tl.constexpr):
    """Tokens, validity, X (lower triangle, in the work dtype: bf16 operands with fp32 accumulation lose nothing
    more) and beta of the chunk starting at `start`; nothing at or past eos is read."""
    rows = tl.arange(0, BT)
    t = start + rows
    valid = t < eos
    X = load_lower(x, t, valid, h, H, rows).to(dtype)
    b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)
    return rows, t, valid, X, b


@triton.jit
def _tile_gates(g_cum, chunk, start, eos, h, rows, t, valid, kc, decay_out, H: tl.constexpr, K: tl.constexpr):
    """(G, G_C - G) [BT, BK] of the chunk's rows and the K tile's columns, and the chunk's decay e^{G_C} stored."""
    G = load_rows(g_cum, t, valid, h, H, K, kc)
    G_last = row_of(G, rows, tl.minimum(eos - start, BT) - 1)
    tl.store(decay_out + (chunk * H + h) * K + kc, tl.exp(G_last), mask=kc < K)
    return G, G_last[None, :] - G


@triton.jit
def _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h, hk,
              tile, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """W, qg, kt and the decay of K tile `tile` of a chunk (value head h, key head hk)."""
    rows, t, valid, X, b = _chunk_rows(x, beta, start, eos, h, H, w_out.dtype.element_ty)
    kc = tile * BK + tl.arange(0, BK)
    G, to_end = _tile_gates(g_cum, chunk, start, eos, h, rows, t, valid, kc, decay_out, H, K)
    kn = load_rows(k, t, valid, hk, HK, K, kc) * tl.load(k_inv + t * H + h, mask=valid, other=0.0)[:, None]
    qn = load_rows(q, t, valid, hk, HK, K, kc) * tl.load(q_inv + t * H + h, mask=valid, other=0.0)[:, None]
    eG = tl.exp(G)
    _store_rows(w_out, t, valid, h, H, K, kc, dot(X, (b[:, None] * eG * kn).to(X.dtype)))
    _store_rows(qg_out, t, valid, h, H, K, kc, qn * eG * scale)
    _store_rows(kt_out, t, valid, h, H, K, kc, kn * tl.exp(to_end))


@triton.jit
def _value_tile(v, beta, x, u_out, start, eos, h, tile, H: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    """U of V tile `tile` of a chunk."""
    _, t, valid, X, b = _chunk_rows(x, beta, start, eos, h, H, u_out.dtype.element_ty)
    vc = tile * BV + tl.arange(0, BV)
    bv = b[:, None] * load_rows(v, t, valid, h, H, V, vc)
    _store_rows(u_out, t, valid, h, H, V, vc, dot(X, bv.to(X.dtype)))


@triton.jit
def wy_kernel(
    q, k, v, g_cum, beta, x, q_inv, k_inv, bounds, w_out, u_out, qg_out, kt_out, decay_out, scale,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):
    chunk = tl.program_id(1)
    tile = tl.program_id(0)
    h = tl.program_id(2)
    start, eos, live = chunk_span(bounds, chunk)
    if live:
        if tile < K // BK:
            _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h,
                      h // (H // HK), tile, H, HK, K, BK)
        else:
            _value_tile(v, beta, x, u_out, start, eos, h, tile - K // BK, H, V, BV)


@triton.jit
def _head_key_tile(k, beta, x, w_scale, w_out, start, eos, h, hk, tile, H: tl.constexpr, HK: tl.constexpr,
                   K: tl.constexpr, BK: tl.constexpr):
    """W of K tile `tile` of a chunk under a per-head gate: the keys of key head hk scaled by their row factors."""
    _, t, valid, X, _ = _chunk_rows(x, beta, start, eos, h, H, w_out.dtype.element_ty)
    kc = tile * BK + tl.arange(0, BK)
    keys = load_rows(k, t, valid, hk, HK, K, kc) * tl.load(w_scale + t * H + h, mask=valid, other=0.0)[:, None]
    _store_rows(w_out, t, valid, h, H, K, kc, dot(X, keys.to(X.dtype)))


@triton.jit
def gdn_wy_kernel(
    k, v, beta, x, w_scale, bounds, w_out, u_out,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):
    tile = tl.program_id(0)
    h = tl.program_id(2)
    start, eos, live = chunk_span(bounds, tl.program_id(1))
    if live:
        if tile < K // BK:
            _head_key_tile(k, beta, x, w_scale, w_out, start, eos, h, h // (H // HK), tile, H, HK, K, BK)
        else:
            _value_tile(v, beta, x, u_out, start, eos, h, tile - K // BK, H, V, BV)
