"""MXFP8 query x MXFP8 keys on the FP8 tensor cores: one e4m3 dot per 32-wide block, the block's two E8M0 scales
applied to its partial scores.

The bf16 path (tiles_kernel.py) turns every key value e4m3 -> f16 -> bf16 and multiplies it by its scale before the
dot, then stores the tile to shared memory for the MMA: a decode key loop on that path is bound by those conversions
(MXFP8 decode at 17-21% of copy against BF16's 40-50%, bench/bench_indexer.py). Here the codes go from the cache to
the MMA as they are (cp.async into shared memory), and the scales cost two multiplies per score and block.

Products of two e4m3 values are exact. The tensor core sums a block's 32 products with a reduced alignment
precision (about 14 bits below the largest product, DeepSeek-V3 report section 3.3.2); the blocks are summed in
fp32. Under the interpreter the operands go to an fp32 dot (its fp8 / bf16 dots are not exact).
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.e8m0_kernel import e8m0_scale
from dayzero.plugins.indexer.pages_kernel import tile_pages

MX: tl.constexpr = tl.constexpr(32)
# the per-block partial scores and their sum take 2 x rows / 2 fp32 registers a thread (4 warps, 64 keys): 128 rows
# spill in the split kernel (2-token rows of 64 heads: 1.43 ms against 1.08 with the bf16 dot at 32K keys)
FP8_DOT_MAX_ROWS = 64
# keys a tile of the select kernel on the FP8 dot (a page a key): 27-35% less GPU time than 64
FP8_DOT_BLOCK_KEYS = 128


def mxfp8_dot_applies(key_quant: bool, q_scales, dot_rows: int) -> bool:
    """Whether a decode call takes the FP8 dot: an MXFP8 query and cache and at most FP8_DOT_MAX_ROWS query rows
    (tokens x heads) per dot."""
    return key_quant and q_scales is not None and dot_rows <= FP8_DOT_MAX_ROWS


@triton.jit
def _operand(codes, DOT_FP32: tl.constexpr):
    if DOT_FP32:
        x = codes.to(tl.float32)
    else:
        x = codes
    return x


@triton.jit
def query_blocks(q, q_scales, row, ok, DI: tl.constexpr, DOT_FP32: tl.constexpr):
    """Rows `row` [M] of an MXFP8 query (e4m3 codes [*, DI] as uint8, E8M0 codes [*, DI / 32]) -> (operands, scales):
    tuples of DI / 32 blocks, [M, 32] dot operands and [M] fp32 scales (0 where not ok)."""
    codes = q.to(tl.pointer_type(tl.float8e4nv))
    operands = ()
    scales = ()
    for b in tl.static_range(DI // MX):
        col = tl.arange(0, MX) + b * MX
        x = tl.load(codes + row.to(tl.int64)[:, None] * DI + col[None, :], mask=ok[:, None], other=0.0)
        operands = operands + (_operand(x, DOT_FP32),)
        code = tl.load(q_scales + row.to(tl.int64) * (DI // MX) + b, mask=ok, other=0)
        scales = scales + (tl.where(ok, e8m0_scale(code), 0.0),)
    return operands, scales


@triton.jit
def _page_base(pages, block, start, DI: tl.constexpr, PAGE: tl.constexpr, BS: tl.constexpr):
    """Byte offsets of the pages holding keys [start, start + BS) -> int64 [BS], from the block's pages."""
    return tile_pages(pages, block, start, PAGE, BS) * (PAGE * (DI + DI // MX))


@triton.jit
def key_scale_words(cache, pages, block, start, end, DI: tl.constexpr, PAGE: tl.constexpr, BS: tl.constexpr):
    """The int32 scale words (four E8M0 codes; DI = 128: one a key) of keys [start, start + BS) -> [BS] (0 past end);
    pages: pages_kernel.block_pages of the block from `block`.

    Loaded a tile ahead by the caller: Triton's pipeline does not prefetch a load whose result it keeps in the MMA's
    layout, and the scales multiply the MMA's results."""
    s = start + tl.arange(0, BS)
    base = _page_base(pages, block, start, DI, PAGE, BS) + PAGE * DI
    return tl.load(cache.to(tl.pointer_type(tl.int32)) + base // 4 + s % PAGE, mask=s < end, other=0)


@triton.jit
def _key_scale_codes(cache, scale_base, ok, words, b: tl.constexpr, DI: tl.constexpr):
    """E8M0 codes [BS] of block b: from the prefetched words (DI = 128), else loaded as bytes."""
    if DI == 128:
        code = (words >> (8 * b)) & 0xFF
    else:
        code = tl.load(cache + scale_base + b, mask=ok, other=0).to(tl.int32)
    return code


@triton.jit
def mxfp8_logits(cache, pages, block, start, end, q_blocks, words, DI: tl.constexpr, PAGE: tl.constexpr,
                 BS: tl.constexpr, DOT_FP32: tl.constexpr):
    """Keys [start, start + BS) (those < end) of an MXFP8 cache (uint8 [P, PAGE * (DI + DI / 32)],
    page-major: values, then scales) . query blocks (query_blocks) -> (logits [BS, M] fp32, 0 past end; the next
    tile's scale words). pages: pages_kernel.block_pages of the block from `block`; `words`: this tile's
    (key_scale_words; unused unless DI = 128)."""
    operands, q_scales = q_blocks
    s = start + tl.arange(0, BS)
    ok = s < end
    offset = (s % PAGE).to(tl.int64)
    page_base = _page_base(pages, block, start, DI, PAGE, BS)
    codes = cache.to(tl.pointer_type(tl.float8e4nv)) + (page_base + offset * DI)[:, None]
    scale_base = page_base + PAGE * DI + offset * (DI // MX)
    next_words = words
    if DI == 128:
        next_words = key_scale_words(cache, pages, block, start + BS, end, DI, PAGE, BS)
    logits = tl.zeros([BS, operands[0].shape[0]], tl.float32)
    for b in tl.static_range(DI // MX):
        k = tl.load(codes + (tl.arange(0, MX) + b * MX)[None, :], mask=ok[:, None], other=0.0)
        if DOT_FP32:
            partial = tl.dot(_operand(k, DOT_FP32), tl.trans(operands[b]), input_precision="ieee")
        else:
            partial = tl.dot(k, tl.trans(operands[b]))
        code = _key_scale_codes(cache, scale_base, ok, words, b, DI)
        logits += partial * e8m0_scale(code)[:, None] * q_scales[b][None, :]
    return logits, next_words
