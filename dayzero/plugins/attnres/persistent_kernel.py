"""AttnRes depth mix with persistent programs, for calls of thousands of tokens that also emit the norm (the others run
pipelined_kernel.py, which holds fewer rows in registers than the norm needs).

The one-program-per-token kernel (kernel.py) holds a whole row of every source in a tile in registers, so only one
or two programs fit on an SM; while they reduce and store, no loads are in flight. Here a fixed grid of programs
walks the tokens (token pid, pid + grid, ...) and loads the next tile before reducing the current one across token
boundaries too: the first tile of the next token is in flight while the last tile of this one reduces and its mix is
stored.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.tiles import load_tile, mix_tile, row_setup, store_mix
from dayzero.plugins.dependent_launch import wait_for_previous_kernel


@triton.jit
def attnres_mix_persistent_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps, num_tokens,
    D: tl.constexpr, BLOCK_D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    EMIT_NORM: tl.constexpr, TILE: tl.constexpr, ALIGNED: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    eps, norm_eps, cols, mask, w = row_setup(query, rms_weight, eps, norm_eps, D, BLOCK_D)
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    stride = pid.to(tl.int64) * 0 + block_stride
    # a fixed grid (no symbolic size in an exported engine): programs past the last token load nothing, do nothing
    a = load_tile(0, pid.to(tl.int64) * D, cols, mask & (cols * 0 + pid < num_tokens), blocks, stride, TILE,
                  NUM_BLOCKS, NUM_SOURCES, True, ALIGNED,
                  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    for token in range(pid, num_tokens, grid):
        # (a plain int under the interpreter: made a tensor first)
        row = (pid * 0 + token).to(tl.int64) * D
        m = tl.full([], float("-inf"), tl.float32)
        total = tl.zeros([], tl.float32)
        acc = tl.zeros([BLOCK_D], tl.float32)
        for t in tl.static_range(NUM_TILES):
            v = a.to(tl.float32)
            if t + 1 < NUM_TILES:
                a = load_tile(t + 1, row, cols, mask, blocks, stride, TILE, NUM_BLOCKS, NUM_SOURCES, True,
                              ALIGNED, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
            else:
                # the next token's first tile (nothing past the last token: masked off)
                following = pid * 0 + token + grid
                a = load_tile(0, following.to(tl.int64) * D, cols, mask & (cols * 0 + following < num_tokens),
                              blocks, stride, TILE, NUM_BLOCKS, NUM_SOURCES, True, ALIGNED,
                              s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
            m, total, acc = mix_tile(v, w, t, m, total, acc, TILE, NUM_SOURCES, D, eps, False)
        store_mix(acc, total, out, normed, norm_weight, row, cols, mask, D, norm_eps, EMIT_NORM)
