"""Tile loaders of the indexer kernels: query rows and paged index keys, ready for an exact tl.dot.

Both sides reach the dot either in bf16 (bf16 inputs; MXFP8 values, whose e4m3 x 2^e is exact in bf16) or in fp32
(any fp32 input, with an IEEE dot), so every product is exact and scores differ from the fp32 reference only in
the order of summation. Hopper has no MX MMA: MXFP8 tiles are dequantized in registers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.e8m0_kernel import e8m0_scale, e8m0_scale_bf16
from dayzero.plugins.indexer.fp8_dot_kernel import query_blocks


@triton.jit
def dot_operand(x, DOT_FP32: tl.constexpr):
    if DOT_FP32:
        y = x.to(tl.float32)
    else:
        y = x.to(tl.bfloat16)
    return y


@triton.jit
def load_query(q, q_scales, token, head, ok, d, HI: tl.constexpr, DI: tl.constexpr, Q_QUANT: tl.constexpr,
               DOT_FP32: tl.constexpr):
    """Rows (token [M], head [M]) of q [T, HI, DI] -> [M, DP] dot operand (0 where not ok).

    MXFP8 q: q holds the e4m3 bytes (uint8), q_scales [T, HI, DI / 32] the E8M0 codes."""
    row = token.to(tl.int64) * HI + head
    mask = ok[:, None] & (d < DI)[None, :]
    x = tl.load(q + row[:, None] * DI + d[None, :], mask=mask, other=0)
    if Q_QUANT:
        code = tl.load(q_scales + row[:, None] * (DI // 32) + (d // 32)[None, :], mask=mask, other=127)
        x = x.to(tl.float8e4nv, bitcast=True).to(tl.float32) * e8m0_scale(code)
    return dot_operand(x, DOT_FP32)


@triton.jit
def load_keys(cache, page, s, ok, d, DI: tl.constexpr, PAGE: tl.constexpr, KEY_QUANT: tl.constexpr,
              DOT_FP32: tl.constexpr):
    """Index keys of logical positions s [BS] of one sequence, in pages `page` [BS] (pages_kernel.py) -> [BS, DP]
    dot operand.

    Plain cache [P, PAGE, DI]; MXFP8 cache uint8 [P, PAGE * (DI + DI / 32)], page-major (values, then scales)."""
    if KEY_QUANT:
        k = _dequantize_mxfp8_keys(cache, page, s, ok, DI, PAGE, d.shape[0], DOT_FP32)
    else:
        offset = (s % PAGE).to(tl.int64)
        mask = ok[:, None] & (d < DI)[None, :]
        k = tl.load(cache + ((page * PAGE + offset) * DI)[:, None] + d[None, :], mask=mask, other=0.0)
    return dot_operand(k, DOT_FP32)


@triton.jit
def mxfp8_key_codes(cache, page_base, offset, ok, DI: tl.constexpr, DP: tl.constexpr):
    """The e4m3 codes of keys at `offset` [BS] in pages starting at byte `page_base` [BS] -> uint8 [BS, DP / 32, 32],
    0 outside DI and where not ok."""
    block = tl.arange(0, DP // 32)
    col = block[:, None] * 32 + tl.arange(0, 32)[None, :]
    return tl.load(cache + (page_base + offset * DI)[:, None, None] + col[None, :, :],
                   mask=ok[:, None, None] & (col < DI)[None, :, :], other=0)


@triton.jit
def mxfp8_key_blocks(cache, page, s, ok, DI: tl.constexpr, PAGE: tl.constexpr, DP: tl.constexpr):
    """MXFP8 keys of positions s [BS] in pages `page` [BS] as (e4m3 codes [BS, DP / 32, 32], E8M0 codes
    [BS, DP / 32]), uint8; 0 outside DI and where not ok. Blocks, so that each scale byte is loaded once per thread
    and block and broadcast over its 32 values (a per-value scale gather cost more than the keys)."""
    offset = (s % PAGE).to(tl.int64)
    page_base = page * (PAGE * (DI + DI // 32))
    codes = mxfp8_key_codes(cache, page_base, offset, ok, DI, DP)
    block = tl.arange(0, DP // 32)
    scales = tl.load(cache + (page_base + PAGE * DI + offset * (DI // 32))[:, None] + block[None, :],
                     mask=ok[:, None] & (block < DI // 32)[None, :], other=0)
    return codes, scales


@triton.jit
def _dequantize_mxfp8_keys(cache, page, s, ok, DI: tl.constexpr, PAGE: tl.constexpr, DP: tl.constexpr,
                           DOT_FP32: tl.constexpr):
    """MXFP8 keys [BS, DP] dequantized (fp32 or bf16)."""
    codes, scales = mxfp8_key_blocks(cache, page, s, ok, DI, PAGE, DP)
    return dequantize_mxfp8_blocks(codes, scales, DOT_FP32)


@triton.jit
def dequantize_mxfp8_blocks(codes, scales, DOT_FP32: tl.constexpr):
    """e4m3 codes [BS, NB, 32] and E8M0 codes [BS, NB] (uint8) -> keys [BS, NB * 32] (fp32 or bf16)."""
    if DOT_FP32:
        k = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32) * e8m0_scale(scales)[:, :, None]
    else:
        # e4m3 -> bf16 is exact, and so is the power-of-two scale in bf16: fewer instructions than via fp32
        k = codes.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16) * e8m0_scale_bf16(scales)[:, :, None]
    return tl.reshape(k, (k.shape[0], k.shape[1] * k.shape[2]))


@triton.jit
def dot_qk(q, k, DOT_FP32: tl.constexpr):
    """q [M, DP] . k [BS, DP] -> logits [M, BS] fp32."""
    if DOT_FP32:
        logits = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        logits = tl.dot(q, tl.trans(k))
    return logits


@triton.jit
def dot_kq(k, q, DOT_FP32: tl.constexpr):
    """k [BS, DP] . q [M, DP] -> logits [BS, M] fp32 (keys on the MMA rows: a sum over q rows stays in-thread)."""
    if DOT_FP32:
        logits = tl.dot(k, tl.trans(q), input_precision="ieee")
    else:
        logits = tl.dot(k, tl.trans(q))
    return logits


@triton.jit
def sequence_span(cu_seqlens, block_table, table_stride, seq):
    """(first row, end row, block-table row) of sequence `seq` in a decode call."""
    first = tl.load(cu_seqlens + seq)
    end = tl.load(cu_seqlens + seq + 1)
    return first, end, block_table + seq.to(tl.int64) * table_stride


@triton.jit
def decode_row_group(q, q_scales, w, positions, row0, end, HI: tl.constexpr, DI: tl.constexpr, LP: tl.constexpr,
                     HP: tl.constexpr, DP: tl.constexpr, Q_QUANT: tl.constexpr, DOT_FP32: tl.constexpr,
                     FP8_DOT: tl.constexpr = False):
    """The LP query rows from row0 of a decode program -> (rows, row_ok, pos (-1 past the sequence), q_rows
    [LP * HP, DP] dot operand, w_rows [LP * HP] fp32): all heads of a row side by side on the dot's N axis.
    FP8_DOT (an MXFP8 query): q_rows are the query's 32-wide blocks and scales (fp8_dot_kernel.query_blocks)."""
    rows = row0 + tl.arange(0, LP)
    row_ok = rows < end
    pos = tl.load(positions + rows, mask=row_ok, other=-1).to(tl.int32)
    m = tl.arange(0, LP * HP)
    m_ok = (row0 + m // HP < end) & (m % HP < HI)
    if FP8_DOT:
        q_rows = query_blocks(q, q_scales, (row0 + m // HP) * HI + m % HP, m_ok, DI, DOT_FP32)
    else:
        q_rows = load_query(q, q_scales, row0 + m // HP, m % HP, m_ok, tl.arange(0, DP), HI, DI, Q_QUANT, DOT_FP32)
    w_rows = tl.load(w + (row0 + m // HP).to(tl.int64) * HI + m % HP, mask=m_ok, other=0.0).to(tl.float32)
    return rows, row_ok, pos, q_rows, w_rows


@triton.jit
def split_chunk(pos, num_splits, min_chunk, BS: tl.constexpr):
    """Keys per split of the rows' sequence: num_splits chunks of at least min_chunk keys, whole BS-key tiles (fewer
    splits for short contexts) -> (num_keys, chunk)."""
    num_keys = tl.max(pos) + 1
    return num_keys, tl.cdiv(tl.maximum(tl.cdiv(num_keys, num_splits), min_chunk), BS) * BS
