"""AttnRes depth mix over groups of whole tokens packed without padding, for calls of thousands of tokens on rows
that are not a power of two wide (D = 2304 = 9 x 256).

The other kernels hold a row in a power-of-two tile: a row of 2304 takes 4096 lanes, so 44% of every load mask,
conversion, product and sum is padding, and each token pays its own reductions, softmax restart and store. Here a
row is PER_TOKEN = D / CHUNK chunks of CHUNK lanes (CHUNK a power of two dividing D), and a step of the
software-pipelined loop takes GROUP consecutive tokens, whose rows are one contiguous run of every source, as a
[TILE, CHUNKS, CHUNK] block (GROUP = CHUNKS // PER_TOKEN: 7 tokens of 2304 fill 63 of 64 chunks of 256). The sums
over each chunk's lanes fold into per-token sums through a [CHUNKS, GROUP] one-hot map, the softmax over the sources
runs per token, and its weights go back to the chunks the same way. Every source is in the one tile, so nothing
carries from one step to the next.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.attnres.sources import source_pointers
from dayzero.plugins.attnres.tiles import add_pairs


@triton.jit
def _bf16_bits_to_fp32(x):
    """bf16 -> fp32 by bit placement: the same values as x.to(fp32), written as other operations so that the
    compiler keeps the 16-bit tile alive between its two uses instead of a second, 32-bit copy."""
    return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _as_fp32(x, BF16_BITS: tl.constexpr):
    if BF16_BITS:
        return _bf16_bits_to_fp32(x)
    return x.to(tl.float32)


@triton.jit
def attnres_mix_packed_kernel(
    query, rms_weight, out, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, num_tokens,
    D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr, TILE: tl.constexpr,
    CHUNK: tl.constexpr, CHUNKS: tl.constexpr, GROUP_P: tl.constexpr, STREAM: tl.constexpr,
    ALIGNED: tl.constexpr, STAGES: tl.constexpr, BF16_BITS: tl.constexpr,
):
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    PER_TOKEN: tl.constexpr = D // CHUNK
    GROUP: tl.constexpr = CHUNKS // PER_TOKEN
    eps = tl.cast(eps, tl.float32)
    c = tl.arange(0, CHUNKS)
    lane = tl.arange(0, CHUNK)
    chunk_token = c // PER_TOKEN
    used = c < GROUP * PER_TOKEN
    # offsets inside a group's contiguous GROUP x D run of a source, and the row columns they hold
    offs = (c * CHUNK)[:, None] + lane[None, :]
    cols = ((c % PER_TOKEN) * CHUNK)[:, None] + lane[None, :]
    w = tl.load(rms_weight + cols, mask=used[:, None], other=0.0).to(tl.float32) * tl.load(
        query + cols, mask=used[:, None], other=0.0).to(tl.float32)
    onehot = (chunk_token[:, None] == tl.arange(0, GROUP_P)[None, :]).to(tl.float32)
    pid = tl.program_id(0)
    stride = pid.to(tl.int64) * 0 + block_stride
    ptrs, valid = source_pointers(0, TILE, blocks, stride, NUM_BLOCKS, NUM_SOURCES, ALIGNED,
                                  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    grid = tl.num_programs(0)
    groups = tl.cdiv(num_tokens, GROUP)
    for it in tl.range(0, tl.cdiv(tl.maximum(groups - pid, 0), grid), num_stages=STAGES):
        first = (pid + it * grid).to(tl.int64) * GROUP
        ok = used & (first + chunk_token < num_tokens)
        where = ptrs[:, None, None] + (first * D + offs)[None, :, :]
        block_mask = valid[:, None, None] & ok[None, :, None]
        if STREAM:
            raw = tl.load(where, mask=block_mask, other=0.0, eviction_policy="evict_first")
        else:
            raw = tl.load(where, mask=block_mask, other=0.0)
        v = _as_fp32(raw, BF16_BITS)
        dot, squares = tl.reduce((v * w[None, :, :], v * v), 2, add_pairs)
        # [TILE, CHUNKS] chunk sums -> [TILE, GROUP_P] token sums
        dot, squares = tl.reduce((dot[:, :, None] * onehot[None, :, :], squares[:, :, None] * onehot[None, :, :]), 1,
                                 add_pairs)
        score = tl.where(valid[:, None], dot * tl.rsqrt(squares / D + eps), float("-inf"))
        p = tl.exp(score - tl.max(score, axis=0)[None, :])
        p = p / tl.sum(p, axis=0)[None, :]
        weight = tl.sum(p[:, None, :] * onehot[None, :, :], axis=2)
        mix = tl.sum(weight[:, :, None] * raw.to(tl.float32), axis=0)
        tl.store(out + first * D + offs, mix.to(out.dtype.element_ty), mask=ok[:, None])
