"""Per-token products of chunked KDA given X = (I + Akk)^{-1}, one K or V tile of a chunk at a time:
    W = X (beta e^G k),  U = X (beta v),  qg = scale q e^G,  kt = k e^{G_C - G},  decay = e^{G_C}
(q, k L2-normalized by the row factors of the intra kernel; G the in-chunk cumsum of g, G_C its last row).

`wy_kernel` runs one program per (tile, chunk, head). `wy_stream_kernel` gives each program one tile of a run of
consecutive chunks and walks them in a software-pipelined loop, so that the next chunk's loads are in flight while
this one's dots and stores run: Nsight Compute showed the one-shot programs at 2.5 TB/s with 4 programs an SM (run ba),
each program's loads, dot and stores strictly in turn."""

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
def _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h,
              tile, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """W, qg, kt and the decay of K tile `tile` of a chunk."""
    rows, t, valid, X, b = _chunk_rows(x, beta, start, eos, h, H, w_out.dtype.element_ty)
    kc = tile * BK + tl.arange(0, BK)
    G = load_rows(g_cum, t, valid, h, H, K, kc)
    G_last = row_of(G, rows, tl.minimum(eos - start, BT) - 1)
    kn = load_rows(k, t, valid, h, H, K, kc) * tl.load(k_inv + t * H + h, mask=valid, other=0.0)[:, None]
    qn = load_rows(q, t, valid, h, H, K, kc) * tl.load(q_inv + t * H + h, mask=valid, other=0.0)[:, None]
    eG = tl.exp(G)
    _store_rows(w_out, t, valid, h, H, K, kc, dot(X, (b[:, None] * eG * kn).to(X.dtype)))
    _store_rows(qg_out, t, valid, h, H, K, kc, qn * eG * scale)
    _store_rows(kt_out, t, valid, h, H, K, kc, kn * tl.exp(G_last[None, :] - G))
    tl.store(decay_out + (chunk * H + h) * K + kc, tl.exp(G_last), mask=kc < tl.where(start < eos, K, 0))


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
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):
    chunk = tl.program_id(1)
    tile = tl.program_id(0)
    h = tl.program_id(2)
    start, eos, live = chunk_span(bounds, chunk)
    if live:
        if tile < K // BK:
            _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, chunk, start, eos, h,
                      tile, H, K, BK)
        else:
            _value_tile(v, beta, x, u_out, start, eos, h, tile - K // BK, H, V, BV)


@triton.jit
def _span_of(starts, ends, i, RUN: tl.constexpr):
    pick = tl.arange(0, RUN) == i
    return tl.sum(tl.where(pick, starts, 0)), tl.sum(tl.where(pick, ends, 0))


@triton.jit
def wy_stream_kernel(
    q, k, v, g_cum, beta, x, q_inv, k_inv, bounds, w_out, u_out, qg_out, kt_out, decay_out, scale, num_chunks,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, RUN: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    tile = tl.program_id(0)
    first = tl.program_id(1) * RUN
    h = tl.program_id(2)
    # the run's chunk bounds in one vector load before the loop: the loop's loads then depend on registers only,
    # which the pipeliner can stage ahead (a chunk past the end reads as an empty span)
    ids = first + tl.arange(0, RUN)
    in_grid = ids < num_chunks
    starts = tl.load(bounds + 2 * ids, mask=in_grid, other=0).to(tl.int64)
    ends = tl.load(bounds + 2 * ids + 1, mask=in_grid, other=0).to(tl.int64)
    # the tile kind is the program's, so each loop body is branch-free
    if tile < K // BK:
        for i in tl.range(0, RUN, num_stages=NUM_STAGES):
            start, eos = _span_of(starts, ends, i, RUN)
            _key_tile(q, k, g_cum, beta, x, q_inv, k_inv, w_out, qg_out, kt_out, decay_out, scale, first + i, start,
                      eos, h, tile, H, K, BK)
    else:
        for i in tl.range(0, RUN, num_stages=NUM_STAGES):
            start, eos = _span_of(starts, ends, i, RUN)
            _value_tile(v, beta, x, u_out, start, eos, h, tile - K // BK, H, V, BV)
