"""The steps both AttnRes kernels take on a token: load a tile of its sources, fold the tile into the online softmax
over depth, store the mix (and its RMSNorm)."""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers


@triton.jit
def load_tile(t: tl.constexpr, row, cols, mask, blocks, block_stride, TILE: tl.constexpr,
              NUM_BLOCKS: tl.constexpr, NUM_SOURCES: tl.constexpr, STREAM: tl.constexpr, ALIGNED: tl.constexpr,
              s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    """Sources t*TILE .. t*TILE+TILE-1 of one token: [TILE, BLOCK_D], missing sources (past the last) read as 0."""
    ptrs, valid = source_pointers(t * TILE, TILE, blocks, block_stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    return load_rows(ptrs, valid, row, cols, mask, STREAM)


@triton.jit
def load_rows(ptrs, valid, row, cols, mask, STREAM: tl.constexpr):
    """Row `row` of the sources at base pointers `ptrs` [TILE] -> [TILE, BLOCK_D] (0 where not valid or masked)."""
    where = ptrs[:, None] + (row + cols)[None, :]
    tile_mask = valid[:, None] & mask[None, :]
    if STREAM:
        # read once and larger than the L2: do not let it evict what the next kernels reuse
        return tl.load(where, mask=tile_mask, other=0.0, eviction_policy="evict_first")
    return tl.load(where, mask=tile_mask, other=0.0)


@triton.jit
def row_setup(query, rms_weight, eps, norm_eps, D: tl.constexpr, BLOCK_D: tl.constexpr):
    """What every kernel needs before its first tile: (eps, norm_eps in fp32, cols, mask, score vector w)."""
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    # AOTInductor passes Python floats as fp64 scalars: keep the mix in fp32
    return (tl.cast(eps, tl.float32), tl.cast(norm_eps, tl.float32), cols, mask,
            score_vector(query, rms_weight, cols, mask))


@triton.jit
def score_vector(query, rms_weight, cols, mask):
    """rms_weight * query [BLOCK_D] fp32: <rms_norm(v) * rms_weight, query> = rstd(v) * <v, rms_weight * query>."""
    return tl.load(rms_weight + cols, mask=mask, other=0.0).to(tl.float32) * tl.load(
        query + cols, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _add_pairs(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def mix_tile(v, w, t: tl.constexpr, m, total, acc, TILE: tl.constexpr, NUM_SOURCES: tl.constexpr,
             D: tl.constexpr, eps, PAIRED: tl.constexpr):
    """Fold tile t (v [TILE, BLOCK_D] fp32) into the running (max score, softmax sum, weighted sum): one reduction
    for the scores of all its sources, <rms_norm(v) * rms_weight, query> = rstd(v) * <v, w>. PAIRED: the two sums
    per source reduce as one pair, so a row spread over several warps crosses shared memory once, not twice (the
    one-token-a-program kernel, latency-bound: 2.7 against 2.9 us at 2 x 64 x 2304; the pipelined kernel keeps two
    sums: paired, it takes 107.7-108.4 against 105.3-105.8 us at 9 x 8192 x 2304)."""
    if PAIRED:
        dot, squares = tl.reduce((v * w[None, :], v * v), 1, _add_pairs)
    else:
        dot = tl.sum(v * w[None, :], axis=1)
        squares = tl.sum(v * v, axis=1)
    score = dot * tl.rsqrt(squares / D + eps)
    score = tl.where(t * TILE + tl.arange(0, TILE) < NUM_SOURCES, score, float("-inf"))
    m_new = tl.maximum(m, tl.max(score, axis=0))
    decay = tl.exp(m - m_new)
    p = tl.exp(score - m_new)
    return m_new, total * decay + tl.sum(p, axis=0), acc * decay + tl.sum(p[:, None] * v, axis=0)


@triton.jit
def store_mix(acc, total, out, normed, norm_weight, row, cols, mask, D: tl.constexpr, norm_eps,
              EMIT_NORM: tl.constexpr):
    mix = (acc / total).to(out.dtype.element_ty)
    tl.store(out + row + cols, mix, mask=mask)
    if EMIT_NORM:
        y = mix.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(y * y, axis=0) / D + norm_eps)
        nw = tl.load(norm_weight + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(normed + row + cols, (y * rstd * nw).to(normed.dtype.element_ty), mask=mask)
