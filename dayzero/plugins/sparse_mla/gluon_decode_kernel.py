"""Sparse MLA decode over a BF16 or FP8 latent cache in Gluon (Triton's explicit-layout dialect), for Hopper (sm_90).

The key loop of `kernel._mla_attention_kernel` with the row gather scheduled by hand (bench/bench_sparse_mla.py
measures both): Triton's pipeliner issues block i + 1's cp.async gather only after block i's P.V wgmma, so the copy
overlaps little of the loop. Here a program (one token, 64 heads, one split of its key list) keeps a two-deep
shared-memory ring of gathered rows [c_kv (512) | k_pe (64)], and iteration i
1. waits for block i - 1's P.V wgmma, which frees ring slot (i + 1) % 2;
2. gathers block i + 1's rows into that slot (cp.async, rows < 0 zero-filled) and commits them as one group; the
   physical rows were loaded one iteration earlier, so the copy waits on no load;
3. waits until one copy group is left in flight: block i has landed, block i + 1 is still on its way;
4. scores S = q_nope @ K_nope^T + q_pe @ K_pe^T (wgmma, B = permuted views of the slot);
5. runs the online softmax, rescales the accumulator and issues P @ K_nope asynchronously (the values are the
   nope columns of the same slot).
Eight warps; both wgmmas are tiled warps_per_cta = [4, 2], so each warpgroup owns half of the score columns and half
of the [64, 512] fp32 accumulator (128 registers a thread). The row max, row sum and P then cross warpgroups through
shared memory (12 barriers a key block in the sm_90 build). The split outputs and `combine_kernel.py` are those of
the Triton path, so this is a drop-in for its decode launch.

An FP8 cache (656-byte records: e4m3 nope, four fp32 tile scales, bf16 rope) gathers each block's e4m3 bytes into a
two-deep byte ring and its rope straight into the bf16 ring; before the scores, the block's bytes are decoded by bit
placement (e4m3_bits.py) and scaled into one bf16 key buffer that both wgmmas read. Decoded keys come out times
2**-Q_SHIFT, so q's nope part is multiplied by 2**Q_SHIFT in shared memory once and the output by it at the end
(exact: powers of two), as in the Triton kernel.

The default decode on Hopper; DAYZERO_SPARSE_MLA_GLUON=0 turns it off (`gluon_decode_applies` says when it is used).
Gluon is imported guarded: on a Triton without it (or without a GPU) the module imports and `gluon_decode_applies`
is False.
"""

from __future__ import annotations

import os

import torch
import triton

from dayzero.plugins.device import is_eager_cuda
from dayzero.plugins.paged_cache.formats import fp8_latent_record_bytes, is_quantized
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.reference import FP8_TILE
from dayzero.plugins.sparse_mla import schedule
from dayzero.plugins.sparse_mla.combine_kernel import combine_splits_launcher
from dayzero.plugins.sparse_mla.e4m3_bits import BITS_TO_SHIFTED, E4M3X4_TIMES_BF16X4, Q_SCALE
from dayzero.plugins.sparse_mla.kernel import LN2, LOG2E, _check_inputs, _outputs

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_init,
        warpgroup_mma_wait,
    )

    HAS_GLUON = True
except ImportError:
    HAS_GLUON = False

OPT_OUT_ENV = "DAYZERO_SPARSE_MLA_GLUON"
HEADS, NOPE, ROPE = 64, 512, 64
FP8_RECORD = fp8_latent_record_bytes(NOPE, ROPE)
BLOCK_N = 64
NUM_WARPS = 8
# decode batches; prefill keeps the measured Triton kernel (this loop is designed and checked for decode only)
MAX_DECODE_TOKENS = 256


def _jit(fn):
    """gluon.jit where Gluon exists; elsewhere the plain function (never launched)."""
    return gluon.jit(fn) if HAS_GLUON else fn


if HAS_GLUON:
    # 16-byte cp.async vectors, four rows a warp; bf16 nope and rope tiles share it, so one row vector serves both
    HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0]))
    # the [64, 512] P.V accumulator: each warpgroup holds half the value columns
    O_MMA = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                   instr_shape=[16, NOPE // 2, 16]))
    P_OPERAND = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=O_MMA.value, k_width=2))
    SMEM = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))
    # the per-program scan of cu_seqlens: SCAN entries a step, one a thread
    SCAN = gl.constexpr(256)
    SCAN_LAYOUT = gl.constexpr(gl.BlockedLayout([1], [32], [8], [0]))
# the index row's scan takes up to this many slots a step (16 registers a thread, before the key loop)
MAX_ROW_SCAN = 4096


@_jit
def _key_rows(keys, table_row, n, hi, PAGE: gl.constexpr):
    """Flat physical rows of the token's key slots n: its logical positions keys[n] through its sequence's block-table
    row (-1 for an invalid index and at and past hi). Resolved here, a block ahead of its gather, where a kernel of
    its own (with the token-to-sequence search) takes 7 us of a B64 call."""
    key = gl.load(keys + n, mask=n < hi, other=-1)
    page = gl.load(table_row + key // PAGE, mask=key >= 0, other=0)
    return gl.where(key >= 0, page * PAGE + key % PAGE, -1)


@_jit
def _keys_valid(keys, n, hi):
    """Whether the token's key slots n hold a valid index (below hi)."""
    return gl.load(keys + n, mask=n < hi, other=-1) >= 0


@_jit
def _copy_latent_rows(nope_dst, rope_dst, row_ptr, row_ok, DV: gl.constexpr, DR: gl.constexpr,
                      LAYOUT: gl.constexpr):
    """cp.async of rows [n] starting at row_ptr into nope_dst [n, DV] and rope_dst [n, DR]; rows outside row_ok
    read nothing and land as zeros."""
    v = gl.arange(0, DV, layout=gl.SliceLayout(0, LAYOUT))
    r = gl.arange(0, DR, layout=gl.SliceLayout(0, LAYOUT))
    async_copy.async_copy_global_to_shared(nope_dst, row_ptr[:, None] + v[None, :], mask=row_ok[:, None])
    async_copy.async_copy_global_to_shared(rope_dst, row_ptr[:, None] + DV + r[None, :], mask=row_ok[:, None])


@_jit
def _gather_block(nope_dst, rope_dst, cache, rows, ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr,
                  LAYOUT: gl.constexpr):
    """One key block's gather (flat physical rows [BLOCK_N], -1 skipped) as one cp.async group."""
    _copy_latent_rows(nope_dst, rope_dst, cache + rows.to(gl.int64) * ROW, rows >= 0, DV, DR, LAYOUT)
    async_copy.commit_group()


@_jit
def _gather_fp8_block(raw_dst, pe_dst, cache, rows, ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr,
                      BYTES: gl.constexpr, HALVES: gl.constexpr):
    """One key block's FP8 records (flat physical rows [BLOCK_N] in BYTES' row slice, -1 skipped) as one cp.async
    group: e4m3 nope bytes into raw_dst [n, DV] (uint8), the bf16 rope (after the tile scales) into pe_dst [n, DR].
    Returns the four tile scales [n] (loads into registers, used when the block is decoded)."""
    row_ptr = cache + rows.to(gl.int64) * ROW
    row_ok = rows >= 0
    b = gl.arange(0, DV, layout=gl.SliceLayout(0, BYTES))
    async_copy.async_copy_global_to_shared(raw_dst, row_ptr[:, None] + b[None, :], mask=row_ok[:, None])
    # the record ends with the bf16 rope
    rope_ptr = gl.convert_layout(row_ptr + (ROW - 2 * DR), gl.SliceLayout(1, HALVES))
    rope_ptr = rope_ptr.to(gl.pointer_type(gl.bfloat16), bitcast=True)
    rope_ok = gl.convert_layout(row_ok, gl.SliceLayout(1, HALVES))
    r = gl.arange(0, DR, layout=gl.SliceLayout(0, HALVES))
    async_copy.async_copy_global_to_shared(pe_dst, rope_ptr[:, None] + r[None, :], mask=rope_ok[:, None])
    async_copy.commit_group()
    return (_tile_scale(cache, rows, 0, ROW, DV), _tile_scale(cache, rows, 1, ROW, DV),
            _tile_scale(cache, rows, 2, ROW, DV), _tile_scale(cache, rows, 3, ROW, DV))


@_jit
def _tile_scale(cache, rows, tile: gl.constexpr, ROW: gl.constexpr, DV: gl.constexpr):
    """The fp32 scale of nope tile `tile` of each FP8 record (0 for rows < 0)."""
    scales = (cache + rows.to(gl.int64) * ROW + DV).to(gl.pointer_type(gl.float32), bitcast=True)
    return gl.load(scales + tile, mask=rows >= 0, other=0.0)


@_jit
def _decode_block(raw_src, k_dst, scale0, scale1, scale2, scale3, TILE: gl.constexpr, BYTES: gl.constexpr):
    """e4m3 bytes [n, 4 TILE] -> bf16 keys [n, 4 TILE] times 2**-Q_SHIFT (bit placement, one rounding), tile t
    scaled by scale<t> [n]. One store: the shared-memory barrier pass puts a barrier between any two stores into
    k_dst (the sm_90 build: no spills; the row's tile of each 16-byte vector is known at compile time, so the factor's
    choice costs nothing)."""
    raw = raw_src.load(BYTES)
    column = gl.arange(0, 4 * TILE, layout=gl.SliceLayout(0, BYTES))[None, :]
    factor0 = (scale0 * BITS_TO_SHIFTED).to(gl.bfloat16)[:, None]
    factor1 = (scale1 * BITS_TO_SHIFTED).to(gl.bfloat16)[:, None]
    factor2 = (scale2 * BITS_TO_SHIFTED).to(gl.bfloat16)[:, None]
    factor3 = (scale3 * BITS_TO_SHIFTED).to(gl.bfloat16)[:, None]
    factor = gl.where(column < TILE, factor0,
                      gl.where(column < 2 * TILE, factor1, gl.where(column < 3 * TILE, factor2, factor3)))
    keys = gl.inline_asm_elementwise(E4M3X4_TIMES_BF16X4, "=r,=r,r,r,r", [raw, factor], dtype=gl.bfloat16,
                                     is_pure=True, pack=4)
    k_dst.store(keys)


@_jit
def _scale_q_nope(q_nope, DV: gl.constexpr, TILE: gl.constexpr, HALVES: gl.constexpr):
    """q's nope part times 2**Q_SHIFT in shared memory (exact), against keys decoded times 2**-Q_SHIFT."""
    for tile in gl.static_range(DV // TILE):
        part = q_nope.slice(tile * TILE, TILE, dim=1)
        part.store(part.load(HALVES) * Q_SCALE)


@_jit
def _program_keys(indices, cu_seqlens, num_seqs, topk, stride_idx, num_head_blocks, num_splits,
                  BLOCK_N: gl.constexpr, ROW_SCAN: gl.constexpr):
    """This program's (token, its sequence, head block, split, the token's index row) and its slots [lo, hi) of that
    row, in whole key blocks. Slots past the token's last valid index (the indexer's -1 padding) are not visited."""
    pid = gl.program_id(0)
    split = gl.program_id(1)
    token = pid // num_head_blocks
    # the token's sequence: the sequences that end at or before it
    s = gl.arange(0, SCAN, layout=SCAN_LAYOUT)
    seq = token * 0
    for s0 in range(0, num_seqs, SCAN):
        ends = gl.load(cu_seqlens + 1 + s0 + s, mask=s0 + s < num_seqs, other=2147483647)
        seq += gl.sum((ends <= token).to(gl.int32), 0)
    keys = indices + token.to(gl.int64) * stride_idx
    # the whole row in one load where it fits ROW_SCAN: each step of the scan waits for its load before the first
    # gather can be issued
    ROW_LAYOUT: gl.constexpr = gl.BlockedLayout([ROW_SCAN // SCAN], [32], [8], [0])
    k = gl.arange(0, ROW_SCAN, layout=ROW_LAYOUT)
    last = gl.full([ROW_SCAN], -1, gl.int32, ROW_LAYOUT)
    for k0 in range(0, topk, ROW_SCAN):
        valid = gl.load(keys + k0 + k, mask=k0 + k < topk, other=-1) >= 0
        last = gl.maximum(last, gl.where(valid, k0 + k, -1))
    num_keys = gl.max(last, 0) + 1
    chunk = gl.cdiv(gl.cdiv(num_keys, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    return token, seq, pid % num_head_blocks, split, keys, lo, gl.minimum(lo + chunk, num_keys)


@_jit
def _empty_softmax_state(BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, S_MMA: gl.constexpr):
    """Before the first key block: (row max -inf, row sum 0, a zero score tile, the zero accumulator, a zero P)."""
    return (gl.full([BLOCK_H], float("-inf"), gl.float32, gl.SliceLayout(1, S_MMA)),
            gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, S_MMA)), gl.zeros([BLOCK_H, BLOCK_N], gl.float32, S_MMA),
            warpgroup_mma_init(gl.zeros([BLOCK_H, DV], gl.float32, O_MMA)),
            gl.zeros([BLOCK_H, BLOCK_N], gl.bfloat16, P_OPERAND))


@_jit
def _online_softmax(s, key_ok, m_i, l_i, qk_scale):
    """One key block's scores [h, n] into the running row max and sum -> (p fp32, alpha, new max, new sum)."""
    s = gl.where(key_ok[None, :], s * qk_scale, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    # rows that have seen no key yet keep m = -inf; exponentiate against 0 so that they stay exactly 0
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_safe)
    p = gl.exp2(s - m_safe[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@_jit
def _store_outputs(acc, m_i, l_i, out_factor, o, lse, o_part, lse_part, token, split, head_block, num_tokens,
                   num_heads, staging, BLOCK_H: gl.constexpr, DV: gl.constexpr, SPLIT: gl.constexpr,
                   S_MMA: gl.constexpr, O_MMA: gl.constexpr):
    """o = acc * out_factor / l and lse (log-sum-exp of the scores seen, -inf for none) of one program's heads: into
    (o, lse), or with SPLIT into its split's (o_part, lse_part) rows, bf16 through `staging` ([BLOCK_H, DV] bf16
    shared memory, free after the key loop), so that each thread stores whole 16-byte vectors of a row (stored
    straight from the accumulator's layout a thread writes 4 bytes of bf16, and the attention kernel takes 62.4 us
    against 58.8 with fp32 partials). bf16 partials halve the bytes the combine reads: attention + combine 56.5 + 4.1
    us against 58.7 + 4.8 with fp32 partials at B64 H64 BF16 on an H200."""
    seen = l_i > 0
    l_o = gl.convert_layout(gl.where(seen, l_i, 1.0) / out_factor, gl.SliceLayout(1, O_MMA))
    out = acc / l_o[:, None]
    lse_row = gl.where(seen, (m_i + gl.log2(gl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
    head_o = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, O_MMA))
    head_s = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, S_MMA))
    v = gl.arange(0, DV, layout=gl.SliceLayout(0, O_MMA))
    # the flat (split,) token, head row of the program's first head
    first_row = token.to(gl.int64) * num_heads
    if SPLIT:
        first_row += split.to(gl.int64) * num_tokens * num_heads
    flat_o = first_row + head_o
    flat_s = first_row + head_s
    out_ok = (head_o < num_heads)[:, None]
    if SPLIT:
        _store_staged(out, o_part, staging, first_row + head_block * BLOCK_H, DV)
        gl.store(lse_part + flat_s, lse_row, mask=head_s < num_heads)
    else:
        gl.store(o + flat_o[:, None] * DV + v[None, :], out.to(gl.bfloat16), mask=out_ok)
        gl.store(lse + flat_s, lse_row, mask=head_s < num_heads)


@_jit
def _store_staged(out, o_part, staging, first_row, DV: gl.constexpr):
    """out [BLOCK_H, DV] fp32 (the accumulator's layout) -> bf16 rows first_row.. of o_part, through shared memory."""
    # every warp is past the key loop's last reads of the buffer
    gl.thread_barrier()
    staging.store(out.to(gl.bfloat16))
    gl.thread_barrier()
    rows = staging.load(HALVES)
    r = first_row + gl.arange(0, out.shape[0], layout=gl.SliceLayout(1, HALVES))
    v = gl.arange(0, DV, layout=gl.SliceLayout(0, HALVES))
    gl.store(o_part + r[:, None] * DV + v[None, :], rows)


@_jit
def _sparse_mla_decode_kernel(
    q, cache, indices, block_table, cu_seqlens, o, lse, o_part, lse_part,
    sm_scale, num_tokens, num_seqs, num_heads, num_head_blocks, num_splits, topk, stride_qt, stride_qh, stride_idx,
    stride_table, PAGE: gl.constexpr,
    ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLIT: gl.constexpr, FP8: gl.constexpr, TILE: gl.constexpr, ROW_SCAN: gl.constexpr,
):
    # the same rows a thread, 16 e4m3 bytes each: FP8 records' gather, their decode and their tile scales
    BYTES: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [8, 1], [1, 0])
    KEYS: gl.constexpr = BYTES if FP8 else HALVES
    # each warpgroup scores half the BLOCK_N keys
    S_MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, BLOCK_N // 2, 16])

    token, seq, head_block, split, keys, lo, hi = _program_keys(indices, cu_seqlens, num_seqs, topk, stride_idx,
                                                                num_head_blocks, num_splits, BLOCK_N, ROW_SCAN)
    table_row = block_table + seq.to(gl.int64) * stride_table

    q_nope = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DV], SMEM)
    q_pe = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DR], SMEM)
    k_pe_ring = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, DR], SMEM)
    if FP8:
        # gathered e4m3 bytes, two deep; one decoded block that both wgmmas read
        raw_ring = gl.allocate_shared_memory(gl.uint8, [2, BLOCK_N, DV],
                                             gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        k_decoded = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, DV], SMEM)
    else:
        k_nope_ring = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, DV], SMEM)

    m_g = gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, HALVES))
    head_g = head_block * BLOCK_H + m_g
    q_row = q + token.to(gl.int64) * stride_qt + head_g.to(gl.int64) * stride_qh
    _copy_latent_rows(q_nope, q_pe, q_row, head_g < num_heads, DV, DR, HALVES)
    n_g = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, KEYS))
    n_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_MMA))
    rows_now = _key_rows(keys, table_row, lo + n_g, hi, PAGE)
    if FP8:
        # q in a group of its own: it is scaled while block 0 is on its way
        async_copy.commit_group()
        scale0, scale1, scale2, scale3 = _gather_fp8_block(raw_ring.index(0), k_pe_ring.index(0), cache, rows_now,
                                                           ROW, DV, DR, BYTES, HALVES)
        async_copy.wait_group(1)
        gl.thread_barrier()
        _scale_q_nope(q_nope, DV, TILE, HALVES)
    else:
        # q travels in block 0's copy group
        _gather_block(k_nope_ring.index(0), k_pe_ring.index(0), cache, rows_now, ROW, DV, DR, HALVES)
        scale0 = gl.zeros([BLOCK_N], gl.float32, gl.SliceLayout(1, KEYS))
        scale1 = scale0
        scale2 = scale0
        scale3 = scale0
    rows_next = _key_rows(keys, table_row, lo + BLOCK_N + n_g, hi, PAGE)

    qk_scale = sm_scale * LOG2E
    m_i, l_i, s_zero, acc, p = _empty_softmax_state(BLOCK_H, BLOCK_N, DV, S_MMA)
    for start in range(lo, hi, BLOCK_N):
        i = (start - lo) // BLOCK_N
        rows_after = _key_rows(keys, table_row, start + 2 * BLOCK_N + n_g, hi, PAGE)
        key_ok = _keys_valid(keys, start + n_s, hi)
        # block i - 1's P.V has read its keys, in both warpgroups, before block i + 1's rows (BF16) or block i's
        # decoded keys (FP8) overwrite them
        acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
        gl.thread_barrier()
        if FP8:
            next0, next1, next2, next3 = _gather_fp8_block(raw_ring.index((i + 1) % 2), k_pe_ring.index((i + 1) % 2),
                                                           cache, rows_next, ROW, DV, DR, BYTES, HALVES)
            async_copy.wait_group(1)
            # every thread's bytes of block i have landed before any thread decodes them
            gl.thread_barrier()
            _decode_block(raw_ring.index(i % 2), k_decoded, scale0, scale1, scale2, scale3, TILE, BYTES)
            k_nope = k_decoded
            scale0 = next0
            scale1 = next1
            scale2 = next2
            scale3 = next3
        else:
            _gather_block(k_nope_ring.index((i + 1) % 2), k_pe_ring.index((i + 1) % 2), cache, rows_next, ROW, DV,
                          DR, HALVES)
            async_copy.wait_group(1)
            k_nope = k_nope_ring.index(i % 2)
        # block i's keys, written by every thread (cp.async or decode stores, not a bulk async copy), ordered
        # before the wgmma's async-proxy reads
        fence_async_shared()
        gl.thread_barrier()
        s = warpgroup_mma(q_nope, k_nope.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe, k_pe_ring.index(i % 2).permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        p_f32, alpha, m_i, l_i = _online_softmax(s, key_ok, m_i, l_i, qk_scale)
        p = gl.convert_layout(p_f32.to(gl.bfloat16), P_OPERAND)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_MMA))[:, None]
        acc = warpgroup_mma(p, k_nope, acc, is_async=True)
        rows_next = rows_after
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    async_copy.wait_group(0)
    _store_outputs(acc, m_i, l_i, Q_SCALE if FP8 else 1.0, o, lse, o_part, lse_part, token, split, head_block,
                   num_tokens, num_heads, k_decoded if FP8 else k_nope_ring.index(0), BLOCK_H, DV, SPLIT, S_MMA,
                   O_MMA)


def _is_hopper(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] == 9


def _rows_in_16_bytes(q: torch.Tensor) -> bool:
    """Every q row starts on 16 bytes: the kernel copies q in 16-byte cp.async vectors."""
    return q.data_ptr() % 16 == 0 and q.stride(0) % 8 == 0 and q.stride(1) % 8 == 0


def _cache_rows_fit(latent_cache: torch.Tensor) -> bool:
    """BF16 rows of 512 + 64 or FP8 records of them (656 bytes), contiguous."""
    if is_quantized(latent_cache):
        return latent_cache.shape[-1] == FP8_RECORD and latent_cache.is_contiguous()
    return latent_cache.dtype == torch.bfloat16 and latent_cache.shape[-1] == NOPE + ROPE


def gluon_decode_applies(q: torch.Tensor, latent_cache: torch.Tensor, v_dim: int) -> bool:
    """Whether a sparse call goes to the Gluon decode: not turned off, Gluon and a Hopper GPU present, eager, BF16 q
    over a BF16 or FP8 cache of 512 + 64 latent rows, whole 64-head blocks, 16-byte aligned q rows, at most
    MAX_DECODE_TOKENS tokens."""
    if os.environ.get(OPT_OUT_ENV) == "0" or not HAS_GLUON or not is_eager_cuda(q) or not _is_hopper(q.device):
        return False
    return (q.dtype == torch.bfloat16 and _cache_rows_fit(latent_cache) and v_dim == NOPE
            and q.shape[-1] == NOPE + ROPE and q.shape[1] % HEADS == 0 and q.shape[0] <= MAX_DECODE_TOKENS
            and _rows_in_16_bytes(q))


def _split_outputs(splits: int, tokens: int, heads: int, device: torch.device):
    return (torch.empty(splits, tokens, heads, NOPE, dtype=torch.bfloat16, device=device),
            torch.empty(splits, tokens, heads, dtype=torch.float32, device=device))


def sparse_mla_decode_gluon_launcher(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    indices: torch.Tensor, sm_scale: float, v_dim: int = NOPE, num_splits: int | None = None, out=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kernel.sparse_mla_launcher` for BF16 q [T, H, 576] (H a multiple of 64) over a BF16 cache [P, 64, 576] or an
    FP8 one [P, 64, 656] (uint8): indices [T, topk] (logical positions, -1 skipped) -> (o [T, H, 512] bf16, lse [T, H]
    fp32). num_splits: splits of each key list (default schedule.num_splits); with splits, the partial outputs are
    bf16 and `combine_kernel.py` merges them. The index row is scanned in one load of up to MAX_ROW_SCAN slots."""
    assert HAS_GLUON, "this Triton has no Gluon (triton.experimental.gluon)"
    _check_inputs(q, latent_cache, block_table, v_dim)
    tokens, heads, width = q.shape
    assert q.dtype == torch.bfloat16, f"the Gluon decode takes a bf16 q, got {q.dtype}"
    assert (v_dim, width - v_dim) == (NOPE, ROPE), f"the Gluon decode takes {NOPE} + {ROPE} rows, got {width}"
    assert _cache_rows_fit(latent_cache), (
        f"the Gluon decode reads bf16 rows of {NOPE + ROPE} or FP8 records of {FP8_RECORD} bytes, got "
        f"{latent_cache.dtype} {tuple(latent_cache.shape)}")
    assert heads % HEADS == 0, f"the Gluon decode takes whole blocks of {HEADS} heads, got {heads}"
    assert _rows_in_16_bytes(q), f"q rows must start on 16 bytes, got strides {q.stride()}"
    assert indices.dim() == 2 and indices.shape[0] == tokens, f"indices {tuple(indices.shape)} vs q {q.shape}"
    o, lse = _outputs(q, v_dim, out)
    if tokens == 0:
        return o, lse
    indices = indices.contiguous()
    programs = tokens * (heads // HEADS)
    splits = num_splits or schedule.num_splits(programs, indices.shape[1], BLOCK_N, q.device)
    o_part, lse_part = (o, lse) if splits == 1 else _split_outputs(splits, tokens, heads, q.device)
    row_scan = min(MAX_ROW_SCAN, max(256, triton.next_power_of_2(indices.shape[1])))
    _sparse_mla_decode_kernel[(programs, splits)](
        q, latent_cache, indices, block_table, cu_seqlens, o, lse, o_part, lse_part, sm_scale, tokens,
        cu_seqlens.shape[0] - 1, heads, heads // HEADS, splits, indices.shape[1], q.stride(0), q.stride(1),
        indices.stride(0), block_table.stride(0), PAGE=PAGE_SIZE, ROW=latent_cache.shape[-1], DV=NOPE,
        DR=ROPE, BLOCK_H=HEADS, BLOCK_N=BLOCK_N, SPLIT=splits > 1, FP8=is_quantized(latent_cache), TILE=FP8_TILE,
        ROW_SCAN=row_scan, num_warps=NUM_WARPS,
    )
    if splits > 1:
        combine_splits_launcher(o_part, lse_part, o, lse)
    return o, lse
