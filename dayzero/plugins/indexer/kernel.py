"""Host entry of the fused indexer: checks the inputs and runs the decode (split-N) or the prefill kernel.

The phase is chosen from the shapes alone: a step with at most DECODE_MAX_ROWS query tokens per sequence on
average (decode, speculative verify) runs decode_select_kernel.py, anything longer prefill_kernel.py. Both handle
any varlen batch exactly; the choice only decides which is efficient.
"""

from __future__ import annotations

import os

import torch
import triton
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins.indexer.decode_select_kernel import index_topk_decode_select_launcher
from dayzero.plugins.indexer.prefill_kernel import index_topk_prefill_launcher
from dayzero.plugins.paged_cache.formats import is_quantized, mxfp8_row_bytes
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.reference import MX_BLOCK

DECODE_MAX_ROWS = 8
# q rows (tokens x heads) of one decode tl.dot; more tokens per sequence take several passes over the keys
DECODE_MAX_DOT_ROWS = 256
EXACT_BF16_DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.uint8)


def _check_inputs(q, w, cache, block_table, cu_seqlens, positions, topk, q_scales, page) -> None:
    num_tokens, num_heads, dim = q.shape
    assert q.is_contiguous() and w.is_contiguous() and cache.is_contiguous(), "q, w and the cache must be contiguous"
    assert w.shape == (num_tokens, num_heads), f"w {tuple(w.shape)} vs q {tuple(q.shape)}"
    assert positions.shape == (num_tokens,) and cu_seqlens.dim() == 1, "positions [T], cu_seqlens [N+1]"
    assert block_table.dim() == 2 and block_table.stride(1) == 1 and block_table.dtype == torch.int32
    assert block_table.shape[0] >= cu_seqlens.shape[0] - 1, "one block-table row per sequence"
    expected = (page * mxfp8_row_bytes(dim),) if is_quantized(cache) else (page, dim)
    assert cache.shape[1:] == expected, f"cache {tuple(cache.shape)}, pages of {page} keys"
    assert topk >= 1 and dim >= 1
    if q_scales is not None or is_quantized(cache):
        assert dim % MX_BLOCK == 0, f"MXFP8 needs DI a multiple of {MX_BLOCK}, got {dim}"
    if q_scales is not None:
        assert q.dtype == torch.float8_e4m3fn and q_scales.dtype == torch.uint8 and q_scales.is_contiguous()
        assert q_scales.shape == (num_tokens, num_heads, dim // MX_BLOCK), f"q_scales {tuple(q_scales.shape)}"


def _exact_bf16_dot(q: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether both dot operands are exact in bf16. Not under the Triton interpreter (triton 3.9), whose bf16
    tl.dot returns garbage: there an fp32 dot of the same (exactly converted) values stands in."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return not interpreted and q.dtype in EXACT_BF16_DTYPES and cache.dtype in EXACT_BF16_DTYPES


def is_decode_step(num_tokens, num_seqs) -> bool:
    """Whether a call runs the decode kernel: every size in range has few rows per sequence (traced sizes: no
    guard)."""
    return statically_known_true(num_tokens <= DECODE_MAX_ROWS * num_seqs)


def _decode_rows(num_tokens: int, num_seqs: int, num_heads: int) -> int:
    """Query rows per decode program: the tokens of a sequence (power of two), within DECODE_MAX_DOT_ROWS."""
    rows = triton.next_power_of_2(triton.cdiv(num_tokens, max(num_seqs, 1)))
    while rows > 1 and rows * triton.next_power_of_2(num_heads) > DECODE_MAX_DOT_ROWS:
        rows //= 2
    return rows


def index_topk_paged_launcher(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, scale: float | None = None,
    q_scales: torch.Tensor | None = None, page: int = PAGE_SIZE, launch=None, **sizes,
) -> torch.Tensor:
    """The fused form of reference.index_topk_paged: q [T, HI, DI] (bf16 / fp32, or e4m3 with q_scales
    [T, HI, DI/32] E8M0), w [T, HI] -> indices [T, topk] int32. `page`: keys a cache page holds (PAGE_SIZE; pooled
    index keys: a page's pools), positions counting keys.

    `sizes` (block sizes, splits; out=) go to the phase's launcher."""
    _check_inputs(q, w, index_cache, block_table, cu_seqlens, positions, topk, q_scales, page)
    num_tokens, num_heads, dim = q.shape
    num_seqs = cu_seqlens.shape[0] - 1
    common = dict(
        scale=dim ** -0.5 if scale is None else scale, q_scales=q_scales, key_quant=is_quantized(index_cache),
        dot_fp32=not _exact_bf16_dot(q, index_cache), page=page, launch=launch)
    q_values = q.view(torch.uint8) if q.dtype == torch.float8_e4m3fn else q
    args = (q_values, w, index_cache, block_table, cu_seqlens, positions, topk)
    if is_decode_step(num_tokens, num_seqs):
        rows = _decode_rows(num_tokens, num_seqs, num_heads)
        return index_topk_decode_select_launcher(*args, rows_per_program=rows, **common, **sizes)
    return index_topk_prefill_launcher(*args, **common, **sizes)
