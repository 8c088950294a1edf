"""MXFP8 key tiles for an f16 tl.dot, with the power-of-two factors kept out of the dot.

Hopper converts e4m3 only to f16 (cvt.rn.f16x2.e4m3x2): a bf16 dot needs a second conversion per value and the
scale multiply on top, which made the MXFP8 decode key loop compute-bound. Here a key's largest block scale
2^(top - 127) stays outside the dot, applied in fp32 to the key's scores, and each block is multiplied in f16 by
2^(7 + code - top). That is exact while a block's scale is within 22 octaves of the key's largest: e4m3 values
<= 448 become <= 57344 (f16 max 65504), and the smallest e4m3 bit, 2^-9, stays >= 2^-24 (f16's smallest
subnormal). Blocks further below round or vanish; with the writer's round-up scale rule (MODEL.md §6) they hold
less than 2^-31 of the key's largest value, far below the fp32 rounding of a score.

Query rows (exact fp32 values of a bf16 or MXFP8 q) get a power of two per row that puts their largest value in
[2^14, 2^15): bf16 values are exact in f16 down to 2^-17, a range of 2^31 under a row's maximum. The head weights
undo it, together with the keys' 2^-7. Every product stays exact, and scores differ from the reference only in the
order of summation. The factor is capped so that the rescaled weight stays a normal fp32 number: only a row whose
largest value lies below 2^-105 / |w| keeps fewer octaves exact.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.tiles_kernel import mxfp8_key_blocks

# a block's values lie in [2^-9, 448] (e4m3) before its factor 2^(KEY_HEADROOM - octaves below the key's top block)
KEY_HEADROOM = tl.constexpr(7)
# the largest value of a query row lands in [2^QUERY_TOP, 2^(QUERY_TOP + 1))
QUERY_TOP = tl.constexpr(14)


@triton.jit
def pow2(exponent):
    """int32 exponents -> fp32 2^exponent, built from the exponent bits (exact for -126..127; 0.0 below)."""
    return (tl.maximum(exponent + 127, 0) << 23).to(tl.float32, bitcast=True)


@triton.jit
def octave(x):
    """floor(log2(|x|)) of normal fp32 numbers from their exponent bits; -127 for 0."""
    return ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def f16_query_rows(q_rows, w_rows):
    """fp32 query rows [M, DP] and their head weights [M] -> (f16 rows, weights that undo the rows' factors and
    the keys' 2^KEY_HEADROOM)."""
    shift = QUERY_TOP - octave(tl.max(tl.abs(q_rows), axis=1))
    # w 2^-(shift + KEY_HEADROOM) stays >= 2^-126 in magnitude
    shift = tl.minimum(shift, 126 - KEY_HEADROOM + tl.minimum(octave(w_rows), 0))
    q16 = (q_rows * pow2(shift)[:, None]).to(tl.float16)
    return q16, w_rows * pow2(-shift - KEY_HEADROOM)


@triton.jit
def load_keys_f16(cache, table_row, s, ok, DI: tl.constexpr, PAGE: tl.constexpr, DP: tl.constexpr):
    """MXFP8 index keys of positions s [BS] -> (k [BS, DP] f16, tops [BS] int32) with
    k * 2^(tops - 127 - KEY_HEADROOM) = the dequantized keys."""
    codes, scales = mxfp8_key_blocks(cache, table_row, s, ok, DI, PAGE, DP)
    scales = scales.to(tl.int32)
    top = tl.max(scales, axis=1)
    factors = pow2(KEY_HEADROOM + scales - top[:, None]).to(tl.float16)
    k = codes.to(tl.float8e4nv, bitcast=True).to(tl.float16) * factors[:, :, None]
    return tl.reshape(k, (k.shape[0], DP)), top


@triton.jit
def dot_kq_f16(k, q):
    """k [BS, DP] f16 . q [M, DP] f16 -> logits [BS, M] fp32 (exact products, fp32 sums)."""
    return tl.dot(k, tl.trans(q), out_dtype=tl.float32)


@triton.jit
def unscale_scores(scores, tops):
    """Scores [BS, LP] of f16 keys (tops [BS]) -> the scores of the true keys."""
    return scores * pow2(tops - 127)[:, None]
