"""Triton absorbed-MLA attention over a paged latent cache: sparse (DSA Top-K rows) and dense causal.

One kernel serves prefill and decode. A program owns M = tokens_per_block * block_h query rows (heads are the M
dim of both dots; dense attention also stacks consecutive tokens of one sequence) and walks its key list in blocks
of BLOCK_N rows: each row is gathered once through the block table as [c_kv | k_pe] (FP8 records are dequantized in
registers with their tile scales), scored against q with two tl.dot (576 = 512 + 64), and its first DV columns
are the values of the same online-softmax step. When the grid is too small for the GPU, each key list is split
across programs (flash-decoding) and `combine_kernel.py` merges the partial (o, lse).

Keys: logical position p of sequence n is row p % 64 of page block_table[n, p // 64]. Sparse attention first maps
`indices[t]` (-1 skipped) to physical rows with `_resolve_rows_kernel`, so the main loop has one dependent load
(row -> gather) that it can issue a block ahead; dense attention takes 0..pos of each row's token (no index tensor).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from dayzero.plugins.paged_cache.formats import fp8_latent_record_bytes, is_quantized
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.reference import FP8_TILE
from dayzero.plugins.sparse_mla import schedule
from dayzero.plugins.sparse_mla.combine_kernel import combine_splits_launcher
from dayzero.plugins.sparse_mla.e4m3_bits import BITS_TO_SHIFTED, Q_SCALE, e4m3_bytes_as_bf16, e4m3_words_as_fp32
from dayzero.plugins.triton_utils import mma, online_softmax_step

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
SUPPORTED_Q = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _fp8_tiles(base, row_ok, math_dtype: tl.constexpr, DV: tl.constexpr, DV_PAD: tl.constexpr,
               BLOCK_N: tl.constexpr, TILE: tl.constexpr, E4M3_BITS: tl.constexpr, INLINE_PTX: tl.constexpr):
    """e4m3 nope of FP8 records at `base` [BLOCK_N] -> [BLOCK_N, DV_PAD // TILE, TILE] in math_dtype, scaled by the
    tile scales (times 2**-Q_SHIFT with E4M3_BITS), 0 outside row_ok and past DV."""
    t = tl.arange(0, DV_PAD // TILE)
    tile_ok = row_ok[:, None] & (t < DV // TILE)[None, :]
    scale = tl.load((base + DV).to(tl.pointer_type(tl.float32))[:, None] + t[None, :], mask=tile_ok, other=0.0)
    if E4M3_BITS and not INLINE_PTX:
        w = tl.arange(0, TILE // 4)
        words = tl.load(base.to(tl.pointer_type(tl.int32))[:, None, None] + (t * (TILE // 4))[None, :, None]
                        + w[None, None, :], mask=tile_ok[:, :, None], other=0)
        bits = tl.reshape(e4m3_words_as_fp32(words), (BLOCK_N, DV_PAD // TILE, TILE))
        return bits * (scale * BITS_TO_SHIFTED)[:, :, None]
    c = tl.arange(0, TILE)
    raw = tl.load(base[:, None, None] + (t * TILE)[None, :, None] + c[None, None, :], mask=tile_ok[:, :, None],
                  other=0)
    if E4M3_BITS:
        return e4m3_bytes_as_bf16(raw).to(math_dtype) * (scale * BITS_TO_SHIFTED).to(math_dtype)[:, :, None]
    # e4m3 * power-of-two scale rounds once, to the value the dot operand would get from fp32 math
    return raw.to(tl.float8e4nv, bitcast=True).to(math_dtype) * scale.to(math_dtype)[:, :, None]


@triton.jit
def _gather_latent_rows(cache, rows, row_ok, dtype: tl.constexpr, math_dtype: tl.constexpr, ROW: tl.constexpr,
                        DV: tl.constexpr, DR: tl.constexpr, DV_PAD: tl.constexpr, DR_PAD: tl.constexpr,
                        BLOCK_N: tl.constexpr, FP8: tl.constexpr, TILE: tl.constexpr, E4M3_BITS: tl.constexpr,
                        INLINE_PTX: tl.constexpr):
    """Flat physical rows [BLOCK_N] -> (nope [BLOCK_N, DV_PAD], rope [BLOCK_N, DR_PAD]) in `dtype`, 0 outside row_ok.

    FP8 tiles are scaled in `math_dtype` (the dot dtype; fp32 where bf16 arithmetic is emulated); with E4M3_BITS
    (bf16 only) they are decoded by bit placement and come out times 2**-Q_SHIFT (e4m3_bits.py).
    A plain row is ROW elements [nope | rope]; an FP8 record is ROW bytes [e4m3 nope | fp32 tile scales | bf16 rope].
    """
    base = cache + rows.to(tl.int64) * ROW
    r = tl.arange(0, DR_PAD)
    rope_ok = row_ok[:, None] & (r < DR)[None, :]
    if FP8:
        NUM_TILES: tl.constexpr = DV // TILE
        nope = _fp8_tiles(base, row_ok, math_dtype, DV, DV_PAD, BLOCK_N, TILE, E4M3_BITS, INLINE_PTX)
        nope = tl.reshape(nope, (BLOCK_N, DV_PAD)).to(dtype)
        rope_base = (base + DV + 4 * NUM_TILES).to(tl.pointer_type(tl.bfloat16))
        rope = tl.load(rope_base[:, None] + r[None, :], mask=rope_ok, other=0.0).to(dtype)
    else:
        v = tl.arange(0, DV_PAD)
        nope_ok = row_ok[:, None]
        if DV_PAD != DV:
            nope_ok = nope_ok & (v < DV)[None, :]
        nope = tl.load(base[:, None] + v[None, :], mask=nope_ok, other=0.0).to(dtype)
        rope = tl.load(base[:, None] + DV + r[None, :], mask=rope_ok, other=0.0).to(dtype)
    return nope, rope


@triton.jit
def _resolve_rows_kernel(indices, block_table, token_seq, rows, num_slots, topk, stride_idx, stride_bt,
                         PAGE: tl.constexpr, BLOCK: tl.constexpr):
    """rows[t, k] = flat physical row of logical position indices[t, k] of token t's sequence, or -1;
    num_slots[t] = 1 + the last slot holding a valid index (the attention loop stops there)."""
    t = tl.program_id(0)
    seq = tl.load(token_seq + t)
    last = tl.full([BLOCK], -1, tl.int32)
    for start in range(0, topk, BLOCK):
        k = start + tl.arange(0, BLOCK)
        inside = k < topk
        key = tl.load(indices + t.to(tl.int64) * stride_idx + k, mask=inside, other=-1)
        ok = key >= 0
        page = tl.load(block_table + seq.to(tl.int64) * stride_bt + key // PAGE, mask=ok, other=0)
        row = tl.where(ok, page * PAGE + key % PAGE, -1).to(tl.int32)
        tl.store(rows + t.to(tl.int64) * topk + k, row, mask=inside)
        last = tl.maximum(last, tl.where(ok, k, -1))
    tl.store(num_slots + t, tl.max(last, 0) + 1)


@triton.jit
def _key_rows(row_base, table_row, n, hi, DENSE: tl.constexpr, PAGE: tl.constexpr):
    """Flat physical rows of key slots n [BLOCK_N] (-1 at and past hi): resolved rows, or positions n (dense)."""
    inside = n < hi
    if DENSE:
        page = tl.load(table_row + n // PAGE, mask=inside, other=0)
        row = tl.where(inside, page * PAGE + n % PAGE, -1).to(tl.int32)
    else:
        row = tl.load(row_base + n, mask=inside, other=-1)
    return row


@triton.jit
def _mla_attention_kernel(
    q, cache, block_table, rows, num_slots, positions, block_seq, block_first, cu_seqlens,
    o, lse, o_part, lse_part,
    sm_scale, num_tokens, num_heads, num_head_blocks, num_splits,
    stride_qt, stride_qh, stride_rows, stride_bt,
    ROW: tl.constexpr, DV: tl.constexpr, DR: tl.constexpr, DV_PAD: tl.constexpr, DR_PAD: tl.constexpr,
    FP8: tl.constexpr, DENSE: tl.constexpr, SPLIT: tl.constexpr, TOKENS: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, PAGE: tl.constexpr, TILE: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, E4M3_BITS: tl.constexpr, INLINE_PTX: tl.constexpr,
):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    # the head blocks of one token block are neighbours in launch order, so its gathered rows are re-read from L2
    head_block = pid % num_head_blocks
    block = pid // num_head_blocks
    seq = tl.load(block_seq + block)
    if seq < 0:
        return
    BLOCK_M: tl.constexpr = TOKENS * BLOCK_H
    m = tl.arange(0, BLOCK_M)
    head = head_block * BLOCK_H + m % BLOCK_H
    if DENSE:
        if TOKENS == 1:
            first = block
        else:
            first = tl.load(block_first + block)
        tok = first + m // BLOCK_H
        row_ok = (tok < tl.load(cu_seqlens + seq + 1)) & (head < num_heads)
        pos = tl.load(positions + tok, mask=row_ok, other=-1)
        num_keys = tl.max(pos, 0) + 1
    else:
        tok = block + m // BLOCK_H
        row_ok = head < num_heads
        # slots past the token's last valid index (the indexer's -1 padding) are not visited
        num_keys = tl.load(num_slots + block)
    chunk = tl.cdiv(tl.cdiv(num_keys, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, num_keys)

    dtype = q.dtype.element_ty
    math_dtype = tl.float32 if UPCAST else dtype
    v = tl.arange(0, DV_PAD)
    r = tl.arange(0, DR_PAD)
    q_row = q + tok.to(tl.int64) * stride_qt + head.to(tl.int64) * stride_qh
    q_nope = tl.load(q_row[:, None] + v[None, :], mask=row_ok[:, None] & (v < DV)[None, :], other=0.0)
    q_pe = tl.load(q_row[:, None] + DV + r[None, :], mask=row_ok[:, None] & (r < DR)[None, :], other=0.0)
    # FP8 keys decoded by bit placement arrive times 2**-Q_SHIFT: their scores and the output make up for it,
    # exactly (powers of two); scaling q instead would keep it in registers as the dot operand (wgmma serializes)
    out_factor = 1.0
    if E4M3_BITS:
        out_factor = Q_SCALE
    # AOTInductor passes Python floats as fp64 scalars: keep the online softmax in fp32
    qk_scale = tl.cast(sm_scale, tl.float32) * LOG2E

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DV_PAD], tl.float32)
    row_base = rows + block.to(tl.int64) * stride_rows
    table_row = block_table + seq * stride_bt
    # each block's physical rows are fetched one block ahead, so the pipelined gather does not wait on them
    row_next = _key_rows(row_base, table_row, lo + tl.arange(0, BLOCK_N), hi, DENSE, PAGE)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        row = row_next
        row_next = _key_rows(row_base, table_row, n + BLOCK_N, hi, DENSE, PAGE)
        key_ok = row >= 0
        k_nope, k_pe = _gather_latent_rows(cache, row, key_ok, dtype, math_dtype, ROW, DV, DR, DV_PAD, DR_PAD,
                                           BLOCK_N, FP8, TILE, E4M3_BITS, INLINE_PTX)
        s = mma(q_nope, tl.trans(k_nope), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), PRECISION, UPCAST)
        if E4M3_BITS:
            s = s * Q_SCALE
        s = mma(q_pe, tl.trans(k_pe), s, PRECISION, UPCAST)
        if DENSE:
            visible = (n[None, :] <= pos[:, None]) & key_ok[None, :]
        else:
            visible = key_ok[None, :]
        s = tl.where(visible, s * qk_scale, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_step(s, m_i, l_i)
        # the values are the nope columns of the same rows
        acc = mma(p.to(dtype), k_nope, acc * alpha[:, None], PRECISION, UPCAST)
        m_i = m_new

    seen = l_i > 0
    out = acc * (out_factor / tl.where(seen, l_i, 1.0))[:, None]
    lse_row = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
    flat = tok.to(tl.int64) * num_heads + head
    out_ok = row_ok[:, None] & (v < DV)[None, :]
    if SPLIT:
        flat += split.to(tl.int64) * num_tokens * num_heads
        # a split past the row's keys (the split count is sized for the table's width) stores its -inf lse only
        tl.store(o_part + flat[:, None] * DV + v[None, :], out, mask=out_ok & seen[:, None])
        tl.store(lse_part + flat, lse_row, mask=row_ok)
    else:
        tl.store(o + flat[:, None] * DV + v[None, :], out.to(o.dtype.element_ty), mask=out_ok)
        tl.store(lse + flat, lse_row, mask=row_ok)


# the Triton interpreter (3.9) does bf16 dots and arithmetic on the raw bits, so there bf16 math runs in fp32
_INTERPRETED = isinstance(_mla_attention_kernel, InterpretedFunction)


def _pow2_at_least_16(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _check_inputs(q: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, v_dim: int) -> None:
    assert q.dim() == 3 and q.stride(-1) == 1, f"q must be [T, H, D] with unit last stride, got {tuple(q.shape)}"
    assert q.dtype in SUPPORTED_Q, f"q dtype {q.dtype} is not one of {SUPPORTED_Q}"
    assert 0 < v_dim <= q.shape[-1], f"v_dim {v_dim} vs q width {q.shape[-1]}"
    assert cache.dim() == 3 and cache.shape[1] == PAGE_SIZE and cache.is_contiguous(), (
        f"latent cache must be contiguous [P, {PAGE_SIZE}, row], got {tuple(cache.shape)}")
    if is_quantized(cache):
        assert v_dim % FP8_TILE == 0, f"an FP8 cache needs v_dim to be a multiple of {FP8_TILE}, got {v_dim}"
        expected = fp8_latent_record_bytes(v_dim, q.shape[-1] - v_dim)
        assert cache.shape[2] == expected, f"FP8 record of {cache.shape[2]} bytes, expected {expected}"
    else:
        assert cache.shape[2] == q.shape[-1], f"cache rows of {cache.shape[2]} vs q width {q.shape[-1]}"
    assert block_table.dim() == 2 and block_table.stride(1) == 1, "block_table must be [N, max_pages], row-major"


def _outputs(q: torch.Tensor, v_dim: int, out) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, heads, _ = q.shape
    if out is None:
        return (torch.empty(tokens, heads, v_dim, dtype=q.dtype, device=q.device),
                torch.empty(tokens, heads, dtype=torch.float32, device=q.device))
    o, lse = out
    assert o.shape == (tokens, heads, v_dim) and o.dtype == q.dtype and o.is_contiguous(), "bad o buffer"
    assert lse.shape == (tokens, heads) and lse.dtype == torch.float32 and lse.is_contiguous(), "bad lse buffer"
    return o, lse


def _resolve_rows(indices: torch.Tensor, block_table: torch.Tensor, token_seq: torch.Tensor, launch):
    """indices [T, topk] logical -> (rows int32 [T, topk] flat physical, -1 kept; num_slots int32 [T])."""
    tokens, topk = indices.shape
    rows = torch.empty(tokens, topk, dtype=torch.int32, device=indices.device)
    num_slots = torch.empty(tokens, dtype=torch.int32, device=indices.device)
    kernel = launch(_resolve_rows_kernel) if launch else _resolve_rows_kernel
    kernel[(tokens,)](indices, block_table, token_seq, rows, num_slots, topk, indices.stride(0), block_table.stride(0),
                      PAGE=PAGE_SIZE, BLOCK=min(1024, triton.next_power_of_2(topk)), num_warps=4)
    return rows, num_slots


def _launch_attention(q, cache, block_table, cu_seqlens, keys, sm_scale: float, v_dim: int, dense: bool,
                      config: schedule.TileConfig, splits: int | None, launch, out):
    """Shared launch of both variants; `keys` is indices [T, topk] (sparse) or positions [T] (dense)."""
    tokens, heads, width = q.shape
    o, lse = _outputs(q, v_dim, out)
    if tokens == 0:
        return o, lse
    head_blocks = triton.cdiv(heads, config.block_h)
    if dense:
        block_seq, block_first = schedule.dense_blocks(cu_seqlens, tokens, config.tokens_per_block)
        rows, num_slots, positions = block_seq, block_seq, keys
        key_hint = block_table.shape[1] * PAGE_SIZE
    else:
        block_seq = schedule.sequence_of_tokens(cu_seqlens, tokens)
        rows, num_slots = _resolve_rows(keys, block_table, block_seq, launch)
        block_first, positions = block_seq, block_seq
        key_hint = keys.shape[1]
    programs = block_seq.shape[0] * head_blocks
    if splits is None:
        splits = schedule.num_splits(programs, key_hint, config.block_n, q.device)
    o_part, lse_part = o, lse
    if splits > 1:
        o_part = torch.empty(splits, tokens, heads, v_dim, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(splits, tokens, heads, dtype=torch.float32, device=q.device)
    kernel = launch(_mla_attention_kernel) if launch else _mla_attention_kernel
    kernel[(programs, splits)](
        q, cache, block_table, rows, num_slots, positions, block_seq, block_first, cu_seqlens, o, lse, o_part,
        lse_part, sm_scale, tokens, heads, head_blocks, splits, q.stride(0), q.stride(1), rows.stride(0),
        block_table.stride(0),
        ROW=cache.shape[2], DV=v_dim, DR=width - v_dim, DV_PAD=_pow2_at_least_16(v_dim),
        DR_PAD=_pow2_at_least_16(width - v_dim), FP8=is_quantized(cache), DENSE=dense, SPLIT=splits > 1,
        TOKENS=config.tokens_per_block, BLOCK_H=config.block_h, BLOCK_N=config.block_n, PAGE=PAGE_SIZE,
        TILE=FP8_TILE, PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST=q.dtype == torch.bfloat16 and _INTERPRETED,
        E4M3_BITS=is_quantized(cache) and q.dtype == torch.bfloat16, INLINE_PTX=not _INTERPRETED,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if splits > 1:
        combine_splits_launcher(o_part, lse_part, o, lse, launch=launch)
    return o, lse


def sparse_mla_launcher(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    indices: torch.Tensor, sm_scale: float, v_dim: int = 512, launch=None, num_splits: int | None = None,
    out=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], indices [T, topk] (logical positions, -1 skipped) -> (o [T, H, v_dim] q.dtype, lse [T, H] fp32).

    Tiles from schedule.sparse_tile_config; num_splits: splits of each key list (default schedule.num_splits; tests
    pick several); `out` = (o, lse) buffers.
    """
    _check_inputs(q, latent_cache, block_table, v_dim)
    assert indices.dim() == 2 and indices.shape[0] == q.shape[0], f"indices {tuple(indices.shape)} vs q {q.shape}"
    # the geometry whose three-stage FP8 tiles were measured (and fit in shared memory): 512 + 64 latent rows
    fp8_rows = is_quantized(latent_cache) and v_dim == 512 and q.shape[-1] == 576
    config = schedule.sparse_tile_config(q.shape[1], q.dtype, fp8_rows)
    assert config.tokens_per_block == 1, "sparse attention has one token (its own key list) per program"
    return _launch_attention(q, latent_cache, block_table, cu_seqlens, indices.contiguous(), sm_scale, v_dim,
                             False, config, num_splits, launch, out)


def dense_mla_launcher(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, sm_scale: float, v_dim: int = 512, launch=None, num_splits: int | None = None,
    out=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of token t over logical positions 0..positions[t] of its sequence; shapes as sparse. Tiles
    from schedule.tile_config."""
    _check_inputs(q, latent_cache, block_table, v_dim)
    assert positions.shape == (q.shape[0],), f"positions {tuple(positions.shape)} vs q {tuple(q.shape)}"
    tokens, seqs = q.shape[0], cu_seqlens.shape[0] - 1
    per_seq = -(-tokens // seqs) if schedule.is_concrete(tokens, seqs) and seqs > 0 else None
    config = schedule.tile_config(q.shape[1], q.dtype, dense=True, tokens_per_seq=per_seq)
    return _launch_attention(q, latent_cache, block_table, cu_seqlens, positions.contiguous(), sm_scale, v_dim,
                             True, config, num_splits, launch, out)
