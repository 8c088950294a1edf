"""AttnRes depth mix in two passes over the row, for calls too large for the L2 (thousands of tokens).

One program per token walks its D columns CHUNK at a time with all its sources in one [SP, CHUNK] tile (SP = the
source count rounded up to a power of two; rows past the last source are masked and read nothing). Pass 1 sums each
source's <v, rms_weight * query> and <v, v>, which give the softmax weights; pass 2 reads the same chunks again and
writes the weighted sum. The second read is served by the L2: a token's sources (tens of KB) were read
microseconds before. HBM traffic therefore stays one read per source, while each program needs only a chunk's
registers. Many programs fit on an SM and keep loads in flight, where the one-pass kernel holds whole rows and
fits one program. With the emitted norm, a third pass reads the just-written mix back from the L2.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers


@triton.jit
def _load_chunk(ptrs, valid, row, cols, mask, LAST_USE: tl.constexpr):
    where = ptrs[:, None] + (row + cols)[None, :]
    both = valid[:, None] & mask[None, :]
    if LAST_USE:
        # the second read: nothing reads these lines again
        x = tl.load(where, mask=both, other=0.0, eviction_policy="evict_first")
    else:
        x = tl.load(where, mask=both, other=0.0)
    return x.to(tl.float32)


@triton.jit
def attnres_mix_two_pass_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps,
    D: tl.constexpr, CHUNK: tl.constexpr, SP: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    EMIT_NORM: tl.constexpr, STAGES: tl.constexpr, ALIGNED: tl.constexpr,
):
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    # AOTInductor passes Python floats as fp64 scalars: keep the mix in fp32
    eps = tl.cast(eps, tl.float32)
    norm_eps = tl.cast(norm_eps, tl.float32)
    row = tl.program_id(0).to(tl.int64) * D
    stride = row * 0 + block_stride
    ptrs, valid = source_pointers(0, SP, blocks, stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    dots = tl.zeros([SP], tl.float32)
    squares = tl.zeros([SP], tl.float32)
    for c0 in tl.range(0, D, CHUNK, num_stages=STAGES):
        cols = c0 + tl.arange(0, CHUNK)
        mask = cols < D
        x = _load_chunk(ptrs, valid, row, cols, mask, False)
        w = tl.load(rms_weight + cols, mask=mask, other=0.0).to(tl.float32) * tl.load(
            query + cols, mask=mask, other=0.0).to(tl.float32)
        dots += tl.sum(x * w[None, :], axis=1)
        squares += tl.sum(x * x, axis=1)
    # <rms_norm(v) * rms_weight, query> = rstd(v) * <v, rms_weight * query>
    score = tl.where(valid, dots * tl.rsqrt(squares / D + eps), float("-inf"))
    p = tl.exp(score - tl.max(score, axis=0))
    p = p / tl.sum(p, axis=0)
    mix_squares = tl.zeros([], tl.float32)
    for c0 in tl.range(0, D, CHUNK, num_stages=STAGES):
        cols = c0 + tl.arange(0, CHUNK)
        mask = cols < D
        mix = tl.sum(p[:, None] * _load_chunk(ptrs, valid, row, cols, mask, True), axis=0).to(out.dtype.element_ty)
        tl.store(out + row + cols, mix, mask=mask)
        y = mix.to(tl.float32)
        mix_squares += tl.sum(tl.where(mask, y * y, 0.0), axis=0)
    if EMIT_NORM:
        # the mix this program stored must be visible to all its threads before they read it back
        tl.debug_barrier()
        rstd = tl.rsqrt(mix_squares / D + norm_eps)
        for c0 in range(0, D, CHUNK):
            cols = c0 + tl.arange(0, CHUNK)
            mask = cols < D
            y = tl.load(out + row + cols, mask=mask, other=0.0).to(tl.float32)
            nw = tl.load(norm_weight + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(normed + row + cols, (y * rstd * nw).to(normed.dtype.element_ty), mask=mask)
