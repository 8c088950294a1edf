"""MXFP8 key tiles loaded as int32 words, the bytes split in registers.

mxfp8_key_blocks (tiles_kernel.py) loads a key's DI / 32 E8M0 scales as single bytes. On sm_90 Triton keeps such
a 1-byte load out of its software pipeline (cp.async moves at least 4 bytes): every key tile then waits, in the
loop, on a page-index load and on the dependent scale load. Here a key's codes and scales come as whole int32 words
(four scales a word, so DI must be a multiple of 128), which the pipeline prefetches. The values are the same bytes,
so the keys, and every product of the dot, are bit-identical to the byte loader's.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.tiles_kernel import dequantize_mxfp8_blocks, dot_operand

# E8M0 codes per int32 word
SCALES_PER_WORD = tl.constexpr(4)


@triton.jit
def split_bytes(words):
    """int32 words [M, N] -> their bytes uint8 [M, 4 N], little-endian (byte j of word i at 4 i + j)."""
    even = tl.join(words.to(tl.uint8), (words >> 16).to(tl.uint8))
    odd = tl.join((words >> 8).to(tl.uint8), (words >> 24).to(tl.uint8))
    # [M, N, 2, 2]: index (i, a, c) holds byte 2 a + c of word i
    pairs = tl.join(even, odd)
    return tl.reshape(pairs, (words.shape[0], 4 * words.shape[1]))


@triton.jit
def mxfp8_key_word_blocks(cache, page, s, ok, DI: tl.constexpr, PAGE: tl.constexpr, DP: tl.constexpr):
    """mxfp8_key_blocks with each key's codes and scales loaded as int32 words -> (e4m3 codes [BS, DP / 32, 32],
    E8M0 codes [BS, DP / 32]) uint8; 0 outside DI and where not ok."""
    offset = (s % PAGE).to(tl.int64)
    words = cache.to(tl.pointer_type(tl.int32))
    page_words = page * (PAGE * (DI + DI // 32) // 4)
    NB: tl.constexpr = DP // 32
    NW: tl.constexpr = NB // SCALES_PER_WORD
    col = tl.arange(0, DP // 4)
    code_words = tl.load(words + (page_words + offset * (DI // 4))[:, None] + col[None, :],
                         mask=ok[:, None] & (col < DI // 4)[None, :], other=0)
    codes = tl.reshape(split_bytes(code_words), (s.shape[0], NB, 32))
    word = tl.arange(0, NW)
    scale_words = tl.load(words + (page_words + PAGE * DI // 4 + offset * (DI // 128))[:, None] + word[None, :],
                          mask=ok[:, None] & (word < DI // 128)[None, :], other=0)
    return codes, split_bytes(scale_words)


@triton.jit
def load_keys_words(cache, page, s, ok, DI: tl.constexpr, PAGE: tl.constexpr, DP: tl.constexpr,
                    DOT_FP32: tl.constexpr):
    """MXFP8 index keys of positions s [BS] in pages `page` [BS] (DI a multiple of 128) -> [BS, DP] dot operand."""
    codes, scales = mxfp8_key_word_blocks(cache, page, s, ok, DI, PAGE, DP)
    return dot_operand(dequantize_mxfp8_blocks(codes, scales, DOT_FP32), DOT_FP32)
