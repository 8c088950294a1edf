"""AttnRes depth mix through a software-pipelined loop, for calls of thousands of tokens (bandwidth-bound).

persistent_kernel.py keeps one tile ahead in registers: with rows of a few thousand elements the registers cap the
bytes in flight per SM below what the copy rate needs. Here a fixed grid of programs walks (token, tile) pairs in one
flat loop that Triton pipelines `STAGES` deep: the tiles of the next iterations are copied asynchronously into
shared memory (cp.async) while the current one reduces, so several rows per program are in flight without holding
registers. The online softmax restarts at each token's first tile (its running max reset to -inf makes the decay of
the previous token's sums 0) and the mix is stored at its last tile.

A row is covered by a power-of-two head of BLOCK_D columns and, where REST > 0, a power-of-two rest from column
BLOCK_D (rows of 2304 = 2048 + 256: no padded lanes, where one block of 4096 would copy and reduce 44% zeros).
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers_at
from dayzero.plugins.attnres.tiles import score_vector, softmax_step


@triton.jit
def _load_part(ptrs, valid, row, cols, mask, STREAM: tl.constexpr):
    where = ptrs[:, None] + (row + cols)[None, :]
    if STREAM:
        # read once and larger than the L2: do not let it evict what the next kernels reuse
        a = tl.load(where, mask=valid[:, None] & mask[None, :], other=0.0, eviction_policy="evict_first")
    else:
        a = tl.load(where, mask=valid[:, None] & mask[None, :], other=0.0)
    return a.to(tl.float32)


@triton.jit
def _store_parts(acc, rest_acc, total, out, normed, norm_weight, row, cols, mask, rest_cols, rest_mask,
                 D: tl.constexpr, REST: tl.constexpr, norm_eps, EMIT_NORM: tl.constexpr):
    mix = (acc / total).to(out.dtype.element_ty)
    tl.store(out + row + cols, mix, mask=mask)
    rest_mix = (rest_acc / total).to(out.dtype.element_ty)
    if REST > 0:
        tl.store(out + row + rest_cols, rest_mix, mask=rest_mask)
    if EMIT_NORM:
        y = mix.to(tl.float32)
        squares = tl.sum(y * y, axis=0)
        y_rest = rest_mix.to(tl.float32)
        if REST > 0:
            squares += tl.sum(y_rest * y_rest, axis=0)
        rstd = tl.rsqrt(squares / D + norm_eps)
        nw = tl.load(norm_weight + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(normed + row + cols, (y * rstd * nw).to(normed.dtype.element_ty), mask=mask)
        if REST > 0:
            nw_rest = tl.load(norm_weight + rest_cols, mask=rest_mask, other=0.0).to(tl.float32)
            tl.store(normed + row + rest_cols, (y_rest * rstd * nw_rest).to(normed.dtype.element_ty), mask=rest_mask)


@triton.jit
def attnres_mix_pipelined_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps, num_tokens,
    D: tl.constexpr, BLOCK_D: tl.constexpr, REST: tl.constexpr, NUM_BLOCKS: tl.constexpr,
    NUM_LISTED: tl.constexpr, EMIT_NORM: tl.constexpr, TILE: tl.constexpr, STREAM: tl.constexpr,
    ALIGNED: tl.constexpr, STAGES: tl.constexpr,
):
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    # the rest's tensors exist (one dummy lane) even without a rest: they are carried through the loop
    REST_LANES: tl.constexpr = REST if REST > 0 else 1
    # AOTInductor passes Python floats as fp64 scalars: keep the mix in fp32
    eps = tl.cast(eps, tl.float32)
    norm_eps = tl.cast(norm_eps, tl.float32)
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    rest_cols = BLOCK_D + tl.arange(0, REST_LANES)
    rest_mask = (rest_cols < D) & (REST > 0)
    stride = pid.to(tl.int64) * 0 + block_stride
    w = score_vector(query, rms_weight, cols, mask)
    w_rest = score_vector(query, rms_weight, rest_cols, rest_mask)
    m = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    rest_acc = tl.zeros([REST_LANES], tl.float32)
    my_tokens = tl.cdiv(tl.maximum(num_tokens - pid, 0), grid)
    for it in tl.range(0, my_tokens * NUM_TILES, num_stages=STAGES):
        # (a plain int under the interpreter: made a tensor first)
        step = pid * 0 + it
        t = step % NUM_TILES
        row = (pid + (step // NUM_TILES) * grid).to(tl.int64) * D
        ptrs, valid = source_pointers_at(t * TILE, TILE, blocks, stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                         s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
        v = _load_part(ptrs, valid, row, cols, mask, STREAM)
        dots = tl.sum(v * w[None, :], axis=1)
        squares = tl.sum(v * v, axis=1)
        v_rest = tl.zeros([TILE, REST_LANES], tl.float32)
        if REST > 0:
            v_rest = _load_part(ptrs, valid, row, rest_cols, rest_mask, STREAM)
            dots += tl.sum(v_rest * w_rest[None, :], axis=1)
            squares += tl.sum(v_rest * v_rest, axis=1)
        # a token's first tile: the decay exp(-inf - m_new) = 0 drops the previous token's sums
        m, decay, p = softmax_step(dots, squares, t, tl.where(t == 0, float("-inf"), m), TILE, NUM_SOURCES, D, eps)
        total = total * decay + tl.sum(p, axis=0)
        acc = acc * decay + tl.sum(p[:, None] * v, axis=0)
        if REST > 0:
            rest_acc = rest_acc * decay + tl.sum(p[:, None] * v_rest, axis=0)
        if t == NUM_TILES - 1:
            _store_parts(acc, rest_acc, total, out, normed, norm_weight, row, cols, mask, rest_cols, rest_mask, D,
                         REST, norm_eps, EMIT_NORM)
