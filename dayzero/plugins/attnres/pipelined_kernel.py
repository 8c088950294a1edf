"""AttnRes depth mix through a software-pipelined loop, for calls of thousands of tokens (bandwidth-bound).

persistent_kernel.py keeps one tile ahead in registers: with rows of a few thousand elements the registers cap the
bytes in flight per SM below what the copy rate needs. Here a fixed grid of programs walks (token, tile) pairs in one
flat loop that Triton pipelines `STAGES` deep: the tiles of the next iterations are copied asynchronously into
shared memory (cp.async) while the current one reduces, so several rows per program are in flight without holding
registers. The online softmax restarts at each token's first tile (its running max reset to -inf makes the decay of
the previous token's sums 0) and the mix is stored at its last tile.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers_at
from dayzero.plugins.attnres.tiles import load_rows, mix_tile, row_setup, store_mix
from dayzero.plugins.dependent_launch import wait_for_previous_kernel


@triton.jit
def attnres_mix_pipelined_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps, num_tokens,
    D: tl.constexpr, BLOCK_D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    EMIT_NORM: tl.constexpr, TILE: tl.constexpr, ALIGNED: tl.constexpr,
    STAGES: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    eps, norm_eps, cols, mask, w = row_setup(query, rms_weight, eps, norm_eps, D, BLOCK_D)
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    stride = pid.to(tl.int64) * 0 + block_stride
    m = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    my_tokens = tl.cdiv(tl.maximum(num_tokens - pid, 0), grid)
    for it in tl.range(0, my_tokens * NUM_TILES, num_stages=STAGES):
        # (a plain int under the interpreter: made a tensor first)
        step = pid * 0 + it
        t = step % NUM_TILES
        row = (pid + (step // NUM_TILES) * grid).to(tl.int64) * D
        ptrs, valid = source_pointers_at(t * TILE, TILE, blocks, stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                         s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
        a = load_rows(ptrs, valid, row, cols, mask, True)
        # a token's first tile: the decay exp(-inf - m_new) = 0 drops the previous token's sums
        m = tl.where(t == 0, float("-inf"), m)
        m, total, acc = mix_tile(a.to(tl.float32), w, t, m, total, acc, TILE, NUM_SOURCES, D, eps, False)
        if t == NUM_TILES - 1:
            store_mix(acc, total, out, normed, norm_weight, row, cols, mask, D, norm_eps, EMIT_NORM)
