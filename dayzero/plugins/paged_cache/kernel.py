"""Triton scatter of new token rows into a paged cache (the plain-format cache write)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_rows_kernel(cache, rows, slot_mapping, D: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping + token).to(tl.int64)
    if slot < 0:
        return
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    values = tl.load(rows + token.to(tl.int64) * D + cols, mask=mask)
    tl.store(cache + slot * D + cols, values.to(cache.dtype.element_ty), mask=mask)


def write_rows_launcher(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, launch=None) -> None:
    """cache [P, PAGE, D] <- rows [T, D] at slot_mapping [T] (-1 skipped); `launch` wraps the kernel (wrap_triton)."""
    assert cache.is_contiguous() and rows.is_contiguous(), "write_rows needs contiguous cache and rows"
    assert rows.dim() == 2 and cache.shape[-1] == rows.shape[1], f"rows {tuple(rows.shape)} vs cache {cache.shape}"
    assert slot_mapping.shape == (rows.shape[0],)
    tokens, dim = rows.shape
    if tokens == 0:
        return
    block = min(triton.next_power_of_2(dim), 1024)
    kernel = launch(_write_rows_kernel) if launch else _write_rows_kernel
    kernel[(tokens, triton.cdiv(dim, block))](cache, rows, slot_mapping, dim, block)
