"""Second pass of flash-decoding: merge the per-split (o, lse) of each (token, head) into the final pair.

o = sum_s exp(lse_s - lse) o_s and lse = log sum_s exp(lse_s); splits that saw no key have lse_s = -inf and add
nothing; a row with no key anywhere gets o = 0, lse = -inf.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _combine_splits_kernel(o_part, lse_part, o, lse, num_rows, num_splits, DV: tl.constexpr, DV_PAD: tl.constexpr,
                           SPLITS_PAD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, SPLITS_PAD)
    lse_s = tl.load(lse_part + s.to(tl.int64) * num_rows + row, mask=s < num_splits, other=float("-inf"))
    top = tl.max(lse_s, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(tl.exp(lse_s - top), 0)
    v = tl.arange(0, DV_PAD)
    acc = tl.zeros([DV_PAD], tl.float32)
    for i in range(num_splits):
        part = (i * num_rows + row).to(tl.int64)
        weight = tl.exp(tl.load(lse_part + part) - top)
        acc += weight * tl.load(o_part + part * DV + v, mask=v < DV, other=0.0)
    seen = total > 0
    tl.store(o + row * DV + v, (acc / tl.where(seen, total, 1.0)).to(o.dtype.element_ty), mask=v < DV)
    tl.store(lse + row, tl.where(seen, top + tl.log(tl.where(seen, total, 1.0)), float("-inf")))


def combine_splits_launcher(o_part: torch.Tensor, lse_part: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                            launch=None) -> None:
    """o_part [S, T, H, DV] fp32 or bf16, lse_part [S, T, H] -> o [T, H, DV] (its dtype), lse [T, H] fp32, in place."""
    splits, tokens, heads, dim = o_part.shape
    assert lse_part.shape == (splits, tokens, heads) and o.shape == (tokens, heads, dim)
    assert lse.shape == (tokens, heads)
    assert all(t.is_contiguous() for t in (o_part, lse_part, o, lse)), "combine needs contiguous buffers"
    kernel = launch(_combine_splits_kernel) if launch else _combine_splits_kernel
    kernel[(tokens * heads,)](o_part, lse_part, o, lse, tokens * heads, splits, DV=dim,
                              DV_PAD=triton.next_power_of_2(dim), SPLITS_PAD=max(2, triton.next_power_of_2(splits)),
                              num_warps=4)
