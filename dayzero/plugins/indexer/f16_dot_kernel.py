"""MXFP8 query x MXFP8 keys through one f16 accumulator: the scales folded into the operands, not the scores.

The FP8 dot (fp8_dot_kernel.py) keeps each 32-wide block's partial scores apart and scales them: a multiply and a
fused multiply-add per score and block, 8 x HI operations a key, which bind the decode key loop (bench/README.md,
"Where the MXFP8 split kernel's instructions go"). Here each block goes into the same f16 dot accumulator, its
scales already in its operands:
* a key's block b is e4m3 -> f16 (exact; cvt.rn.f16x2.e4m3x2) times 2^(KEY_HEADROOM + s_b - top), s_b its E8M0 code
  and `top` the key's largest, so one multiply a value pair, whatever HI; the key's 2^(top - 127) multiplies its
  head-weighted score sum (relu and the weights commute with a positive power of two), one multiply a key and row;
* a query row's blocks are dequantized once a program and put in f16 by a power of two a row that lands its largest
  value in [2^QUERY_TOP, 2^(QUERY_TOP + 1)); the head weights undo it, with the keys' 2^-KEY_HEADROOM.

Every product is exact and summed in fp32, so scores differ from the reference only in the order of summation, while
a key's blocks lie within 22 octaves of its largest (e4m3 values <= 448 times 2^7 stay below f16's 65504; its
smallest step, 2^-9 x 2^(7 - 22), is f16's smallest subnormal) and a query row's within 35. Blocks further below
round or vanish: under the writer's rule (MODEL.md §6) they hold less than 2^-13 of the key's largest value each.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.e8m0_kernel import e8m0_scale
from dayzero.plugins.indexer.fp8_dot_kernel import MX, key_page_base, key_scale_words
from dayzero.plugins.quant.kernel import pow2

# a key block's values lie in [2^-9, 448] (e4m3) before their factor 2^(KEY_HEADROOM - octaves below the key's top)
KEY_HEADROOM = tl.constexpr(7)
# the largest value of a query row lands in [2^QUERY_TOP, 2^(QUERY_TOP + 1))
QUERY_TOP = tl.constexpr(14)


@triton.jit
def octave(x):
    """floor(log2(|x|)) of normal fp32 numbers from their exponent bits; -127 for 0."""
    return ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def f16_query_blocks(q_blocks, w_rows, DI: tl.constexpr, DOT_FP32: tl.constexpr):
    """fp8_dot_kernel.query_blocks' (e4m3 operands [M, 32], fp32 scales [M]) and the head weights [M] -> (f16 block
    operands [M, 32] (fp32 under DOT_FP32), the weights times 2^-(row shift + KEY_HEADROOM))."""
    operands, scales = q_blocks
    largest = tl.zeros_like(w_rows)
    for b in tl.static_range(DI // MX):
        largest = tl.maximum(largest, tl.max(tl.abs(operands[b].to(tl.float32)), axis=1) * scales[b])
    shift = QUERY_TOP - octave(largest)
    # the weight's factor 2^-(shift + KEY_HEADROOM) keeps it a normal fp32 number (and pow2's exponents in range)
    shift = tl.minimum(shift, 126 - KEY_HEADROOM + tl.minimum(octave(w_rows), 0))
    rows = ()
    for b in tl.static_range(DI // MX):
        x = (operands[b].to(tl.float32) * (scales[b] * pow2(shift))[:, None]).to(tl.float16)
        rows = rows + (x.to(tl.float32) if DOT_FP32 else x,)
    return rows, w_rows * pow2(-shift - KEY_HEADROOM)


@triton.jit
def mxfp8_f16_logits(cache, pages, block, start, end, q_rows, words, DI: tl.constexpr, PAGE: tl.constexpr,
                     BS: tl.constexpr, DOT_FP32: tl.constexpr):
    """Keys [start, start + BS) (those < end) of an MXFP8 cache (DI = 128) . f16 query blocks (f16_query_blocks) ->
    (logits [BS, M] fp32 of the keys divided by 2^(top - 127), 0 past end; 2^(top - 127) [BS]; the next tile's scale
    words). pages, words: as fp8_dot_kernel.mxfp8_logits'."""
    s = start + tl.arange(0, BS)
    ok = s < end
    page_base = key_page_base(pages, block, start, DI, PAGE, BS)
    codes = cache.to(tl.pointer_type(tl.float8e4nv)) + (page_base + (s % PAGE).to(tl.int64) * DI)[:, None]
    next_words = key_scale_words(cache, pages, block, start + BS, end, DI, PAGE, BS)
    top = words & 0xFF
    for b in tl.static_range(1, DI // MX):
        top = tl.maximum(top, (words >> (8 * b)) & 0xFF)
    logits = tl.zeros([BS, q_rows[0].shape[0]], tl.float32)
    for b in tl.static_range(DI // MX):
        k = tl.load(codes + (tl.arange(0, MX) + b * MX)[None, :], mask=ok[:, None], other=0.0)
        # blocks more than 127 octaves below the key's top: 2^-127 as the bits of 0.0 (f16 rounds them to 0 anyway)
        factor = pow2(tl.maximum(KEY_HEADROOM + ((words >> (8 * b)) & 0xFF) - top, -127)).to(tl.float16)
        k = k.to(tl.float16) * factor[:, None]
        if DOT_FP32:
            logits = tl.dot(k.to(tl.float32), tl.trans(q_rows[b]), logits, input_precision="ieee")
        else:
            logits = tl.dot(k, tl.trans(q_rows[b]), logits)
    return logits, e8m0_scale(top), next_words
