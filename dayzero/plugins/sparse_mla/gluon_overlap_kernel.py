"""Sparse MLA decode in Gluon with the scores of the next key block computed while this block's softmax runs
(FlashAttention-3's overlap inside a warpgroup), over a BF16 latent cache and (`_sparse_mla_overlap_fp8_kernel`) FP8
records. Bench candidates, not routed by the op.

Nsight Compute on `gluon_decode_kernel` (run ob, bench/README.md "Sparse MLA") put a third of the BF16 loop's stall
samples on its score wgmma, issued and then waited for at once, with the softmax after it overlapping nothing. Here
32-key blocks sit in a four-slot ring (q 72 KB + 4 x 36 KB = 216 KB): blocks i and i + 1 resident, i + 2 and i + 3
on their way. Iteration i, with block i's scores already in registers:
1. waits until block i + 1 has landed and issues its score wgmmas (not waited for);
2. runs block i's online softmax on the CUDA cores while the tensor cores work on block i + 1's scores and block
   i - 1's P.V;
3. waits for block i - 1's P.V, rescales the accumulator and issues block i's P.V. wgmma groups retire in order and
   the scores are two groups (nope, then rope), so this wait also retires block i + 1's nope scores (issued before
   the softmax); only its rope scores may stay in flight;
4. after a barrier (both warpgroups are past block i - 1's P.V, so its slot is free) gathers block i + 3 into it;
5. waits for block i + 1's scores, leaving block i's P.V in flight.
Eight warps, wgmmas tiled warps_per_cta = [4, 2] as in `gluon_decode_kernel`; the split outputs and combine are the
same, so the launcher there runs this kernel with `overlap=True`.
"""

from __future__ import annotations

from dayzero.plugins.sparse_mla.e4m3_bits import Q_SCALE
from dayzero.plugins.sparse_mla.gluon_decode_kernel import (
    HALVES,
    HAS_GLUON,
    O_MMA,
    P_OPERAND,
    SMEM,
    _copy_latent_rows,
    _decode_block,
    _empty_softmax_state,
    _gather_block,
    _gather_fp8_block,
    _jit,
    _key_rows,
    _online_softmax,
    _program_keys,
    _scale_q_nope,
    _store_outputs,
)
from dayzero.plugins.sparse_mla.kernel import LOG2E

if HAS_GLUON:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

BLOCK_N = 32
RING = 4


@_jit
def _issue_scores(q_nope, q_pe, k_nope, k_pe, s_zero):
    """S = q_nope @ k_nope^T + q_pe @ k_pe^T as async wgmmas (one group), not waited for."""
    s = warpgroup_mma(q_nope, k_nope.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    return warpgroup_mma(q_pe, k_pe.permute((1, 0)), s, is_async=True)


@_jit
def _sparse_mla_overlap_kernel(
    q, cache, rows, num_slots, o, lse, o_part, lse_part,
    sm_scale, num_tokens, num_heads, num_head_blocks, num_splits, stride_qt, stride_qh, stride_rows,
    ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    RING: gl.constexpr, SPLIT: gl.constexpr,
):
    S_MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, BLOCK_N // 2, 16])

    token, head_block, split, lo, hi = _program_keys(num_slots, num_head_blocks, num_splits, BLOCK_N)

    q_nope = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DV], SMEM)
    q_pe = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DR], SMEM)
    k_nope_ring = gl.allocate_shared_memory(gl.bfloat16, [RING, BLOCK_N, DV], SMEM)
    k_pe_ring = gl.allocate_shared_memory(gl.bfloat16, [RING, BLOCK_N, DR], SMEM)

    head_g = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, HALVES))
    q_row = q + token.to(gl.int64) * stride_qt + head_g.to(gl.int64) * stride_qh
    # q travels in block 0's copy group; blocks 1 and 2 follow in groups of their own
    _copy_latent_rows(q_nope, q_pe, q_row, head_g < num_heads, DV, DR, HALVES)
    row_base = rows + token.to(gl.int64) * stride_rows
    n_g = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, HALVES))
    n_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_MMA))
    for b in gl.static_range(RING - 1):
        _gather_block(k_nope_ring.index(b), k_pe_ring.index(b), cache, _key_rows(row_base, lo + b * BLOCK_N + n_g, hi),
                      ROW, DV, DR, HALVES)
    rows_next = _key_rows(row_base, lo + (RING - 1) * BLOCK_N + n_g, hi)

    qk_scale = sm_scale * LOG2E
    m_i, l_i, s_zero, acc, p = _empty_softmax_state(BLOCK_H, BLOCK_N, DV, S_MMA)
    # block 0's scores: q and block 0 have landed once two groups are left in flight
    async_copy.wait_group(RING - 2)
    fence_async_shared()
    gl.thread_barrier()
    s = _issue_scores(q_nope, q_pe, k_nope_ring.index(0), k_pe_ring.index(0), s_zero)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    for start in range(lo, hi, BLOCK_N):
        i = (start - lo) // BLOCK_N
        rows_after = _key_rows(row_base, start + RING * BLOCK_N + n_g, hi)
        key_ok = _key_rows(row_base, start + n_s, hi) >= 0
        # 1. block i + 1 has landed (i + 2 may still be on its way); its scores go to the tensor cores
        async_copy.wait_group(RING - 3)
        fence_async_shared()
        gl.thread_barrier()
        slot_next = (i + 1) % RING
        s_next = _issue_scores(q_nope, q_pe, k_nope_ring.index(slot_next), k_pe_ring.index(slot_next), s_zero)
        # 2. block i's online softmax
        p_f32, alpha, m_i, l_i = _online_softmax(s, key_ok, m_i, l_i, qk_scale)
        # 3. block i - 1's P.V has retired (block i + 1's scores may not have); block i's P.V goes out
        acc, p = warpgroup_mma_wait(num_outstanding=1, deps=(acc, p))
        p = gl.convert_layout(p_f32.to(gl.bfloat16), P_OPERAND)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_MMA))[:, None]
        acc = warpgroup_mma(p, k_nope_ring.index(i % RING), acc, is_async=True)
        # 4. both warpgroups are past block i - 1's P.V: its slot takes block i + 3
        gl.thread_barrier()
        slot_free = (i + RING - 1) % RING
        _gather_block(k_nope_ring.index(slot_free), k_pe_ring.index(slot_free), cache, rows_next, ROW, DV, DR, HALVES)
        rows_next = rows_after
        # 5. block i + 1's scores (issued before block i's P.V, so they retire first)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    async_copy.wait_group(0)

    _store_outputs(acc, m_i, l_i, 1.0, o, lse, o_part, lse_part, token, split, head_block, num_tokens, num_heads,
                   BLOCK_H, DV, SPLIT, S_MMA, O_MMA)


@_jit
def _sparse_mla_overlap_fp8_kernel(
    q, cache, rows, num_slots, o, lse, o_part, lse_part,
    sm_scale, num_tokens, num_heads, num_head_blocks, num_splits, stride_qt, stride_qh, stride_rows,
    ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLIT: gl.constexpr, TILE: gl.constexpr, SHORT_PLACEMENT: gl.constexpr,
):
    """The overlapped loop over FP8 records: block i + 2 is decoded (CUDA cores) while the tensor cores work on
    block i + 1's scores and block i's P.V, where `gluon_decode_kernel` decodes with nothing in flight (run ob: the
    decode took a quarter of the FP8 loop's stall samples). Iteration i, with block i's scores in registers and
    blocks i + 2, i + 3 on their way:
    1. issues block i + 1's score wgmmas (decoded one iteration ago);
    2. runs block i's online softmax;
    3. waits for block i - 1's P.V, issues block i's;
    4. after a barrier (block i - 1's decoded slot is free) waits for block i + 2's bytes and decodes them into it;
    5. after a fence and a barrier (the decoded block published to the async proxy, its bytes' slot free) gathers
       block i + 4 into that slot;
    6. waits for block i + 1's scores, leaving block i's P.V in flight."""
    BYTES: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [8, 1], [1, 0])
    S_MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, BLOCK_N // 2, 16])
    # decoded bf16 blocks (i - 1 under its P.V, i, i + 1 under its scores), gathered e4m3 blocks (two in flight),
    # bf16 rope blocks (i + 1 under its scores, i + 2 .. i + 4 landed or landing): 216 KB with q at 32-key blocks
    DECODED: gl.constexpr = 3
    RAW: gl.constexpr = 2
    ROPES: gl.constexpr = 4

    token, head_block, split, lo, hi = _program_keys(num_slots, num_head_blocks, num_splits, BLOCK_N)

    q_nope = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DV], SMEM)
    q_pe = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DR], SMEM)
    decoded = gl.allocate_shared_memory(gl.bfloat16, [DECODED, BLOCK_N, DV], SMEM)
    raw = gl.allocate_shared_memory(gl.uint8, [RAW, BLOCK_N, DV], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    k_pe = gl.allocate_shared_memory(gl.bfloat16, [ROPES, BLOCK_N, DR], SMEM)

    head_g = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, HALVES))
    q_row = q + token.to(gl.int64) * stride_qt + head_g.to(gl.int64) * stride_qh
    _copy_latent_rows(q_nope, q_pe, q_row, head_g < num_heads, DV, DR, HALVES)
    async_copy.commit_group()
    row_base = rows + token.to(gl.int64) * stride_rows
    n_g = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, BYTES))
    n_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_MMA))
    # blocks 0 and 1 in flight behind q; q is scaled by 2**Q_SHIFT while they travel
    a0, a1, a2, a3 = _gather_fp8_block(raw.index(0), k_pe.index(0), cache, _key_rows(row_base, lo + n_g, hi), ROW,
                                       DV, DR, BYTES, HALVES)
    b0, b1, b2, b3 = _gather_fp8_block(raw.index(1), k_pe.index(1), cache,
                                       _key_rows(row_base, lo + BLOCK_N + n_g, hi), ROW, DV, DR, BYTES, HALVES)
    async_copy.wait_group(2)
    gl.thread_barrier()
    _scale_q_nope(q_nope, DV, TILE, HALVES)
    # blocks 0 and 1 decoded into slots 0 and 1, each slot of bytes refilled (blocks 2, 3) once decoded
    async_copy.wait_group(1)
    gl.thread_barrier()
    _decode_block(raw.index(0), decoded.index(0), a0, a1, a2, a3, TILE, BYTES, SHORT_PLACEMENT)
    gl.thread_barrier()
    a0, a1, a2, a3 = _gather_fp8_block(raw.index(0), k_pe.index(2), cache,
                                       _key_rows(row_base, lo + 2 * BLOCK_N + n_g, hi), ROW, DV, DR, BYTES, HALVES)
    async_copy.wait_group(1)
    gl.thread_barrier()
    _decode_block(raw.index(1), decoded.index(1), b0, b1, b2, b3, TILE, BYTES, SHORT_PLACEMENT)
    fence_async_shared()
    gl.thread_barrier()
    b0, b1, b2, b3 = _gather_fp8_block(raw.index(1), k_pe.index(3), cache,
                                       _key_rows(row_base, lo + 3 * BLOCK_N + n_g, hi), ROW, DV, DR, BYTES, HALVES)
    rows_next = _key_rows(row_base, lo + 4 * BLOCK_N + n_g, hi)

    qk_scale = sm_scale * LOG2E
    m_i, l_i, s_zero, acc, p = _empty_softmax_state(BLOCK_H, BLOCK_N, DV, S_MMA)
    s = _issue_scores(q_nope, q_pe, decoded.index(0), k_pe.index(0), s_zero)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    for start in range(lo, hi, BLOCK_N):
        i = (start - lo) // BLOCK_N
        rows_after = _key_rows(row_base, start + 5 * BLOCK_N + n_g, hi)
        key_ok = _key_rows(row_base, start + n_s, hi) >= 0
        # 1. block i + 1's scores
        s_next = _issue_scores(q_nope, q_pe, decoded.index((i + 1) % DECODED), k_pe.index((i + 1) % ROPES), s_zero)
        # 2. block i's online softmax
        p_f32, alpha, m_i, l_i = _online_softmax(s, key_ok, m_i, l_i, qk_scale)
        # 3. block i - 1's P.V has retired; block i's goes out
        acc, p = warpgroup_mma_wait(num_outstanding=1, deps=(acc, p))
        p = gl.convert_layout(p_f32.to(gl.bfloat16), P_OPERAND)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_MMA))[:, None]
        acc = warpgroup_mma(p, decoded.index(i % DECODED), acc, is_async=True)
        # 4. both warpgroups are past block i - 1's P.V and every thread's copies of block i + 2 have landed
        async_copy.wait_group(1)
        gl.thread_barrier()
        _decode_block(raw.index(i % RAW), decoded.index((i + 2) % DECODED), a0, a1, a2, a3, TILE, BYTES,
                      SHORT_PLACEMENT)
        # 5. the decoded block is published before iteration i + 1 scores it; its bytes' slot takes block i + 4,
        # its rope slot (block i's, scored) block i + 4's rope
        fence_async_shared()
        gl.thread_barrier()
        a0, a1, a2, a3 = b0, b1, b2, b3
        b0, b1, b2, b3 = _gather_fp8_block(raw.index(i % RAW), k_pe.index(i % ROPES), cache, rows_next, ROW, DV, DR,
                                           BYTES, HALVES)
        rows_next = rows_after
        # 6. block i + 1's scores
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    async_copy.wait_group(0)

    _store_outputs(acc, m_i, l_i, Q_SCALE, o, lse, o_part, lse_part, token, split, head_block, num_tokens, num_heads,
                   BLOCK_H, DV, SPLIT, S_MMA, O_MMA)
