"""Per-token products of chunked KDA, one program per (K or V tile, chunk, head), given X = (I + Akk)^{-1}:
    W = X (beta e^G k),  U = X (beta v),  qg = scale q e^G,  kt = k e^{G_C - G},  decay = e^{G_C}
(q, k L2-normalized by the row factors of the intra kernel and read from key head h // (H // Hk); G the in-chunk
cumsum of g, G_C its last row, one value a row for a per-head gate).

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
def _tile_gates(g_cum, chunk, start, eos, h, rows, t, valid, tile, kc, decay_out, H: tl.constexpr, K: tl.constexpr,
                PER_HEAD_GATE: tl.constexpr):
    """(G, G_C - G) of the chunk's rows shaped to scale a [BT, BK] tile ([BT, BK] per channel, [BT, 1] per head),
    and the chunk's decay e^{G_C} stored: [K] per channel, one value per head (by the first K tile)."""
    if PER_HEAD_GATE:
        G = tl.load(g_cum + t * H + h, mask=valid, other=0.0)[:, None]
        G_last = tl.load(g_cum + (tl.minimum(eos, start + BT) - 1) * H + h)
        tl.store(decay_out + chunk * H + h, tl.exp(G_last), mask=tile == 0)
        to_end = G_last - G
    else:
        G = load_rows(g_cum, t, valid, h, H, K, kc)
        G_last = row_of(G, rows, tl.minimum(eos - start, BT) - 1)
        tl.store(decay_out + (chunk * H + h) * K + kc, tl.exp(G_last), mask=kc < K)
        to_end = G_last[None, :] - G
    return G, to_end


@triton.jit
def _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h, hk,
              tile, H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, PER_HEAD_GATE: tl.constexpr):
    """W, qg, kt and the decay of K tile `tile` of a chunk (value head h, key head hk)."""
    rows, t, valid, X, b = _chunk_rows(x, beta, start, eos, h, H, w_out.dtype.element_ty)
    kc = tile * BK + tl.arange(0, BK)
    G, to_end = _tile_gates(g_cum, chunk, start, eos, h, rows, t, valid, tile, kc, decay_out, H, K, PER_HEAD_GATE)
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
    PER_HEAD_GATE: tl.constexpr,
):
    chunk = tl.program_id(1)
    tile = tl.program_id(0)
    h = tl.program_id(2)
    start, eos, live = chunk_span(bounds, chunk)
    if live:
        if tile < K // BK:
            _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h,
                      h // (H // HK), tile, H, HK, K, BK, PER_HEAD_GATE)
        else:
            _value_tile(v, beta, x, u_out, start, eos, h, tile - K // BK, H, V, BV)
