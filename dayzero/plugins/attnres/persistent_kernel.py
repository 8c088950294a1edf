"""AttnRes depth mix with persistent programs, for calls of thousands of tokens (bandwidth-bound).

The one-program-per-token kernel (kernel.py) holds a whole row of every source in a tile in registers, so only one
or two programs fit on an SM; while they reduce and store, no loads are in flight. Here a fixed grid of programs
walks the tokens (token pid, pid + grid, ...) as one stream of tiles (token 0's tiles, then token 1's, ...) and
keeps PREFETCH (1-3) tiles of that stream in flight ahead of the one it reduces, across token boundaries too: the
next token's first tiles load while the last tile of this one reduces and its mix is stored. Every tile in flight
costs registers (a 16-warp program is capped at 128 a thread), so TILE x PREFETCH is bounded by the row width.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.tiles import load_tile, mix_tile, score_vector, store_mix


@triton.jit
def _load_ahead(j: tl.constexpr, token, grid, num_tokens, cols, mask, blocks, block_stride, D: tl.constexpr,
                TILE: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_SOURCES: tl.constexpr, STREAM: tl.constexpr,
                ALIGNED: tl.constexpr, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    """Tile j of the stream that starts at `token`'s first tile: tile j % NUM_TILES of the program's token
    j // NUM_TILES steps on; masked off past the last token."""
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    AHEAD: tl.constexpr = j // NUM_TILES
    following = token + AHEAD * grid
    if AHEAD > 0:
        mask = mask & (cols * 0 + following < num_tokens)
    return load_tile(j % NUM_TILES, following.to(tl.int64) * D, cols, mask, blocks, block_stride, TILE, NUM_BLOCKS,
                     NUM_SOURCES, STREAM, ALIGNED, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14,
                     s15)


@triton.jit
def attnres_mix_persistent_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps, num_tokens,
    D: tl.constexpr, BLOCK_D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    EMIT_NORM: tl.constexpr, TILE: tl.constexpr, PREFETCH: tl.constexpr, STREAM: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    # AOTInductor passes Python floats as fp64 scalars: keep the mix in fp32
    eps = tl.cast(eps, tl.float32)
    norm_eps = tl.cast(norm_eps, tl.float32)
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    stride = pid.to(tl.int64) * 0 + block_stride
    # a fixed grid (no symbolic size in an exported engine): programs past the last token load nothing, do nothing;
    # a ring of up to three tiles in flight: a1 is reduced next, a2 and a3 follow
    alive = mask & (cols * 0 + pid < num_tokens)
    a1 = _load_ahead(0, pid, grid, num_tokens, cols, alive, blocks, stride, D, TILE, NUM_BLOCKS,
                     NUM_SOURCES, STREAM, ALIGNED,
                     s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    a2 = a1
    a3 = a1
    if PREFETCH >= 2:
        a2 = _load_ahead(1, pid, grid, num_tokens, cols, alive, blocks, stride, D, TILE, NUM_BLOCKS,
                         NUM_SOURCES, STREAM, ALIGNED,
                         s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    if PREFETCH >= 3:
        a3 = _load_ahead(2, pid, grid, num_tokens, cols, alive, blocks, stride, D, TILE, NUM_BLOCKS,
                         NUM_SOURCES, STREAM, ALIGNED,
                         s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    w = score_vector(query, rms_weight, cols, mask)
    for token in range(pid, num_tokens, grid):
        # (a plain int under the interpreter: made a tensor first)
        token = pid * 0 + token
        m = tl.full([], float("-inf"), tl.float32)
        total = tl.zeros([], tl.float32)
        acc = tl.zeros([BLOCK_D], tl.float32)
        for t in tl.static_range(NUM_TILES):
            v = a1
            # the stream's tile PREFETCH steps on goes out before this one reduces
            if PREFETCH == 1:
                a1 = _load_ahead(t + 1, token, grid, num_tokens, cols, mask, blocks, stride, D, TILE, NUM_BLOCKS,
                                 NUM_SOURCES, STREAM, ALIGNED,
                                 s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
            elif PREFETCH == 2:
                a1 = a2
                a2 = _load_ahead(t + 2, token, grid, num_tokens, cols, mask, blocks, stride, D, TILE, NUM_BLOCKS,
                                 NUM_SOURCES, STREAM, ALIGNED,
                                 s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
            else:
                a1 = a2
                a2 = a3
                a3 = _load_ahead(t + 3, token, grid, num_tokens, cols, mask, blocks, stride, D, TILE, NUM_BLOCKS,
                                 NUM_SOURCES, STREAM, ALIGNED,
                                 s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
            m, total, acc = mix_tile(v.to(tl.float32), w, t, m, total, acc, TILE, NUM_SOURCES, D, eps)
        store_mix(acc, total, out, normed, norm_weight, token.to(tl.int64) * D, cols, mask, D, norm_eps, EMIT_NORM)
