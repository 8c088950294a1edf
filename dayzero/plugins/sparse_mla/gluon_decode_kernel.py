"""Sparse MLA decode over a BF16 latent cache in Gluon (Triton's explicit-layout dialect), for Hopper (sm_90).

The key loop of `kernel._mla_attention_kernel` with the row gather scheduled by hand (bench/README.md, "Sparse
MLA"): Triton's pipeliner issues block i + 1's cp.async gather only after block i's P.V wgmma, so the copy overlaps
little of the loop. Here a program (one token, 64 heads, one split of its key list) keeps a two-deep shared-memory
ring of gathered rows [c_kv (512) | k_pe (64)], and iteration i
1. waits for block i - 1's P.V wgmma, which frees ring slot (i + 1) % 2;
2. gathers block i + 1's rows into that slot (cp.async, rows < 0 zero-filled) and commits them as one group; the
   physical rows were loaded one iteration earlier, so the copy waits on no load;
3. waits until one copy group is left in flight: block i has landed, block i + 1 is still on its way;
4. scores S = q_nope @ K_nope^T + q_pe @ K_pe^T (wgmma, B = permuted views of the slot);
5. runs the online softmax, rescales the accumulator and issues P @ K_nope asynchronously (the values are the
   nope columns of the same slot).
Eight warps; both wgmmas are tiled warps_per_cta = [4, 2], so each warpgroup owns half of the score columns and half
of the [64, 512] fp32 accumulator (128 registers a thread). The row max, row sum and P then cross warpgroups through
shared memory (offline sm_90: 12 barriers a key block); `full_scores` instead has each warpgroup compute all score
columns ([8, 1], as Triton's kernel does: twice the score wgmmas, 3 barriers). The split outputs and
`combine_kernel.py` are those of the Triton path, so this is a drop-in for its decode launch.

Opt-in (DAYZERO_SPARSE_MLA_GLUON=1; `gluon_decode_applies` says when it is used). Gluon is imported guarded: on a
Triton without it (or without a GPU) the module imports and `gluon_decode_applies` is False.
"""

from __future__ import annotations

import os

import torch

from dayzero.plugins.device import is_eager_cuda
from dayzero.plugins.sparse_mla import schedule
from dayzero.plugins.sparse_mla.combine_kernel import combine_splits_launcher
from dayzero.plugins.sparse_mla.kernel import LN2, LOG2E, _check_inputs, _outputs, _resolve_rows

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

OPT_IN_ENV = "DAYZERO_SPARSE_MLA_GLUON"
HEADS, NOPE, ROPE = 64, 512, 64
BLOCK_N = 64
NUM_WARPS = 8
# decode batches; prefill keeps the measured Triton kernel (this loop was designed and checked for decode only)
MAX_DECODE_TOKENS = 256


def _jit(fn):
    """gluon.jit where Gluon exists; elsewhere the plain function (never launched)."""
    return gluon.jit(fn) if HAS_GLUON else fn


@_jit
def _key_rows(row_base, n, hi):
    """Flat physical rows of key slots n (-1 at and past hi)."""
    return gl.load(row_base + n, mask=n < hi, other=-1)


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
def _sparse_mla_decode_kernel(
    q, cache, rows, num_slots, o, lse, o_part, lse_part,
    sm_scale, num_tokens, num_heads, num_head_blocks, num_splits, stride_qt, stride_qh, stride_rows,
    ROW: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLIT: gl.constexpr, FULL_SCORES: gl.constexpr,
):
    # 16-byte cp.async vectors, four rows a warp; nope and rope tiles share it, so one row vector serves both
    GATHER: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    # FULL_SCORES: each warpgroup scores all BLOCK_N keys (twice the score wgmmas), so no row max, row sum or P
    # crosses warpgroups through shared memory
    S_WARPS: gl.constexpr = [8, 1] if FULL_SCORES else [4, 2]
    S_MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=S_WARPS,
                                                    instr_shape=[16, BLOCK_N // 2, 16])
    O_MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, DV // 2, 16])
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_MMA, k_width=2)
    SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

    pid = gl.program_id(0)
    split = gl.program_id(1)
    head_block = pid % num_head_blocks
    token = pid // num_head_blocks
    # slots past the token's last valid index (the indexer's -1 padding) are not visited
    num_keys = gl.load(num_slots + token)
    chunk = gl.cdiv(gl.cdiv(num_keys, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = gl.minimum(lo + chunk, num_keys)

    q_nope = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DV], SMEM)
    q_pe = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, DR], SMEM)
    k_nope_ring = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, DV], SMEM)
    k_pe_ring = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, DR], SMEM)

    m_g = gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, GATHER))
    head_g = head_block * BLOCK_H + m_g
    q_row = q + token.to(gl.int64) * stride_qt + head_g.to(gl.int64) * stride_qh
    # q travels in block 0's copy group
    _copy_latent_rows(q_nope, q_pe, q_row, head_g < num_heads, DV, DR, GATHER)
    row_base = rows + token.to(gl.int64) * stride_rows
    n_g = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, GATHER))
    n_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_MMA))
    _gather_block(k_nope_ring.index(0), k_pe_ring.index(0), cache, _key_rows(row_base, lo + n_g, hi), ROW, DV, DR,
                  GATHER)
    rows_next = _key_rows(row_base, lo + BLOCK_N + n_g, hi)

    qk_scale = sm_scale * LOG2E
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, gl.SliceLayout(1, S_MMA))
    l_i = gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, S_MMA))
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, S_MMA)
    acc = warpgroup_mma_init(gl.zeros([BLOCK_H, DV], gl.float32, O_MMA))
    p = gl.zeros([BLOCK_H, BLOCK_N], gl.bfloat16, P_OPERAND)
    for start in range(lo, hi, BLOCK_N):
        i = (start - lo) // BLOCK_N
        rows_after = _key_rows(row_base, start + 2 * BLOCK_N + n_g, hi)
        key_ok = _key_rows(row_base, start + n_s, hi) >= 0
        # block i - 1's P.V has read its slot, in both warpgroups, before block i + 1's rows overwrite it
        acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
        gl.thread_barrier()
        _gather_block(k_nope_ring.index((i + 1) % 2), k_pe_ring.index((i + 1) % 2), cache, rows_next, ROW, DV, DR,
                      GATHER)
        async_copy.wait_group(1)
        # block i's rows, written by every thread's cp.async (not a bulk async copy), ordered before the wgmma's
        # async-proxy reads
        fence_async_shared()
        gl.thread_barrier()
        k_nope = k_nope_ring.index(i % 2)
        s = warpgroup_mma(q_nope, k_nope.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe, k_pe_ring.index(i % 2).permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        s = gl.where(key_ok[None, :], s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        # rows that have seen no key yet keep m = -inf; exponentiate against 0 so that they stay exactly 0
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_safe)
        p_f32 = gl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + gl.sum(p_f32, 1)
        p = gl.convert_layout(p_f32.to(gl.bfloat16), P_OPERAND)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_MMA))[:, None]
        acc = warpgroup_mma(p, k_nope, acc, is_async=True)
        m_i = m_new
        rows_next = rows_after
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    async_copy.wait_group(0)

    seen = l_i > 0
    l_o = gl.convert_layout(gl.where(seen, l_i, 1.0), gl.SliceLayout(1, O_MMA))
    out = acc / l_o[:, None]
    lse_row = gl.where(seen, (m_i + gl.log2(gl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
    head_o = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, O_MMA))
    head_s = head_block * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, S_MMA))
    v = gl.arange(0, DV, layout=gl.SliceLayout(0, O_MMA))
    flat_o = token.to(gl.int64) * num_heads + head_o
    flat_s = token.to(gl.int64) * num_heads + head_s
    out_ok = (head_o < num_heads)[:, None]
    if SPLIT:
        flat_o += split.to(gl.int64) * num_tokens * num_heads
        flat_s += split.to(gl.int64) * num_tokens * num_heads
        gl.store(o_part + flat_o[:, None] * DV + v[None, :], out, mask=out_ok)
        gl.store(lse_part + flat_s, lse_row, mask=head_s < num_heads)
    else:
        gl.store(o + flat_o[:, None] * DV + v[None, :], out.to(gl.bfloat16), mask=out_ok)
        gl.store(lse + flat_s, lse_row, mask=head_s < num_heads)


def _is_hopper(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] == 9


def _rows_in_16_bytes(q: torch.Tensor) -> bool:
    """Every q row starts on 16 bytes: the kernel copies q in 16-byte cp.async vectors."""
    return q.data_ptr() % 16 == 0 and q.stride(0) % 8 == 0 and q.stride(1) % 8 == 0


def gluon_decode_applies(q: torch.Tensor, latent_cache: torch.Tensor, v_dim: int) -> bool:
    """Whether a sparse call goes to the Gluon decode: opted in, Gluon and a Hopper GPU present, eager, BF16 q and
    cache, 512 + 64 latent rows, whole 64-head blocks, 16-byte aligned q rows, at most MAX_DECODE_TOKENS tokens."""
    if torch.compiler.is_compiling() or os.environ.get(OPT_IN_ENV) != "1" or not HAS_GLUON:
        return False
    if not is_eager_cuda(q) or not _is_hopper(q.device):
        return False
    return (q.dtype == torch.bfloat16 and latent_cache.dtype == torch.bfloat16 and v_dim == NOPE
            and q.shape[-1] == NOPE + ROPE and q.shape[1] % HEADS == 0 and q.shape[0] <= MAX_DECODE_TOKENS
            and _rows_in_16_bytes(q))


def _split_outputs(splits: int, tokens: int, heads: int, device: torch.device):
    return (torch.empty(splits, tokens, heads, NOPE, dtype=torch.float32, device=device),
            torch.empty(splits, tokens, heads, dtype=torch.float32, device=device))


def sparse_mla_decode_gluon_launcher(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    indices: torch.Tensor, sm_scale: float, v_dim: int = NOPE, num_splits: int | None = None, out=None,
    full_scores: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kernel.sparse_mla_launcher` for BF16 q [T, H, 576] (H a multiple of 64) over a BF16 cache [P, 64, 576]:
    indices [T, topk] (logical positions, -1 skipped) -> (o [T, H, 512] bf16, lse [T, H] fp32).

    `full_scores`: both warpgroups compute the whole score block (warps_per_cta [8, 1], as Triton's kernel does)
    instead of half each ([4, 2], the design); offline sm_90: 3 barriers a key block instead of 12."""
    assert HAS_GLUON, "this Triton has no Gluon (triton.experimental.gluon)"
    _check_inputs(q, latent_cache, block_table, v_dim)
    tokens, heads, width = q.shape
    assert q.dtype == torch.bfloat16 and latent_cache.dtype == torch.bfloat16, "the Gluon decode is BF16 only"
    assert (v_dim, width - v_dim) == (NOPE, ROPE), f"the Gluon decode takes {NOPE} + {ROPE} rows, got {width}"
    assert heads % HEADS == 0, f"the Gluon decode takes whole blocks of {HEADS} heads, got {heads}"
    assert _rows_in_16_bytes(q), f"q rows must start on 16 bytes, got strides {q.stride()}"
    assert indices.dim() == 2 and indices.shape[0] == tokens, f"indices {tuple(indices.shape)} vs q {q.shape}"
    o, lse = _outputs(q, v_dim, out)
    if tokens == 0:
        return o, lse
    rows, num_slots = _resolve_rows(indices.contiguous(), block_table, schedule.sequence_of_tokens(cu_seqlens, tokens),
                                    None)
    programs = tokens * (heads // HEADS)
    splits = num_splits or schedule.num_splits(programs, indices.shape[1], BLOCK_N, q.device)
    o_part, lse_part = (o, lse) if splits == 1 else _split_outputs(splits, tokens, heads, q.device)
    _sparse_mla_decode_kernel[(programs, splits)](
        q, latent_cache, rows, num_slots, o, lse, o_part, lse_part,
        sm_scale, tokens, heads, heads // HEADS, splits, q.stride(0), q.stride(1), rows.stride(0),
        ROW=width, DV=NOPE, DR=ROPE, BLOCK_H=HEADS, BLOCK_N=BLOCK_N, SPLIT=splits > 1, FULL_SCORES=full_scores,
        num_warps=NUM_WARPS,
    )
    if splits > 1:
        combine_splits_launcher(o_part, lse_part, o, lse)
    return o, lse
