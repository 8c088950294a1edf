"""AttnRes depth mix of calls whose sources all fit one tile, TOKENS tokens per step of a software-pipelined loop.

pipelined_kernel.py walks (token, tile) pairs: with two sources a step is one token's two rows, so each step's fixed
work (its shared-memory reduction, the pipeline's wait and barrier, the softmax, the store) is paid per 9 KB of a
row of 2304. Here a step loads a [TOKENS, TILE, BLOCK_D] block of several tokens' sources, reduces all their scores
together and stores TOKENS mixed rows; with every source in the one tile no online softmax carries across steps.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers
from dayzero.plugins.attnres.tiles import add_pairs, row_setup


@triton.jit
def attnres_mix_token_groups_kernel(
    query, rms_weight, out, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, num_tokens,
    D: tl.constexpr, BLOCK_D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    TILE: tl.constexpr, TOKENS: tl.constexpr, STREAM: tl.constexpr, ALIGNED: tl.constexpr, STAGES: tl.constexpr,
):
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    eps, _, cols, mask, w = row_setup(query, rms_weight, eps, eps, D, BLOCK_D)
    pid = tl.program_id(0)
    # int64 whether or not Triton specialized the integer argument into a constant
    stride = pid.to(tl.int64) * 0 + block_stride
    ptrs, valid = source_pointers(0, TILE, blocks, stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    grid = tl.num_programs(0)
    groups = tl.cdiv(num_tokens, TOKENS)
    block_mask = valid[None, :, None] & mask[None, None, :]
    for it in tl.range(0, tl.cdiv(tl.maximum(groups - pid, 0), grid), num_stages=STAGES):
        tokens = (pid + it * grid) * TOKENS + tl.arange(0, TOKENS)
        tokens_ok = tokens < num_tokens
        rows = tokens.to(tl.int64) * D
        where = ptrs[None, :, None] + rows[:, None, None] + cols[None, None, :]
        in_block = tokens_ok[:, None, None] & block_mask
        if STREAM:
            v = tl.load(where, mask=in_block, other=0.0, eviction_policy="evict_first")
        else:
            v = tl.load(where, mask=in_block, other=0.0)
        v = v.to(tl.float32)
        dot, squares = tl.reduce((v * w[None, None, :], v * v), 2, add_pairs)
        score = tl.where(valid[None, :], dot * tl.rsqrt(squares / D + eps), float("-inf"))
        p = tl.exp(score - tl.max(score, axis=1)[:, None])
        mix = tl.sum(p[:, :, None] * v, axis=1) / tl.sum(p, axis=1)[:, None]
        tl.store(out + rows[:, None] + cols[None, :], mix.to(out.dtype.element_ty),
                 mask=tokens_ok[:, None] & mask[None, :])

