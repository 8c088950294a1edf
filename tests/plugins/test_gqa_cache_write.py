"""The Triton write of K / V into the paged GQA cache vs its reference, bit for bit, in the plain and FP8 layouts:
odd head widths and counts, strided k / v, skipped (-1) rows, tokens landing on shuffled pages."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.gqa.cache_layout import gather_kv, kv_cache_shape, write_kv
from dayzero.plugins.gqa.write_kernel import write_kv_launcher
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, needs_triton, sizes

pytestmark = needs_triton
FORMATS = ["float32", "bfloat16", "fp8"]


def poisoned_cache(num_pages: int, heads: int, dim: int, fmt: str) -> torch.Tensor:
    shape = kv_cache_shape(num_pages, heads, dim, fp8=fmt == "fp8")
    if fmt == "fp8":
        return torch.full(shape, 255, dtype=torch.uint8)
    return torch.full(shape, float("nan"), dtype=getattr(torch, fmt))


def random_step(tokens: int, heads: int, dim: int, num_pages: int, dtype: torch.dtype):
    """k, v [T, Hkv, D] as strided views of one [T, 2, Hkv, D] tensor (as the model makes them), distinct slots on
    shuffled pages with every fifth token skipped."""
    kv = (torch.randn(tokens, 2, heads, dim) * torch.logspace(-2, 1, tokens)[:, None, None, None]).to(dtype)
    slots = torch.randperm(num_pages * PAGE_SIZE)[:tokens]
    slots[::5] = -1
    return kv[:, 0], kv[:, 1], slots


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("tokens, heads, dim", sizes(cpu=[(7, 3, 80), (9, 1, 72), (70, 2, 16)],
                                                    gpu=[(4099, 2, 256), (37, 4, 128), (300, 3, 80)]))
def test_write_kv_matches_the_reference_bit_for_bit(tokens, heads, dim, fmt):
    num_pages = -(-tokens // PAGE_SIZE) + 2
    k, v, slots = random_step(tokens, heads, dim, num_pages, torch.float32 if fmt == "float32" else torch.bfloat16)
    expected = poisoned_cache(num_pages, heads, dim, fmt)
    write_kv(expected, k, v, slots)
    got = poisoned_cache(num_pages, heads, dim, fmt).to(DEVICE)
    write_kv_launcher(got, k.to(DEVICE), v.to(DEVICE), slots.to(DEVICE))
    assert torch.equal(got.cpu().view(torch.uint8), expected.view(torch.uint8))


@pytest.mark.parametrize("fmt", FORMATS)
def test_written_rows_read_back_by_position(fmt):
    """The layout's reference read finds each token's K / V (exactly, or within e4m3's rounding) at its page."""
    heads, dim, length = 3, 48, 130
    table = torch.randperm(5)[:3].int()
    positions = torch.arange(length)
    slots = table.long()[positions // PAGE_SIZE] * PAGE_SIZE + positions % PAGE_SIZE
    k, v = torch.randn(length, heads, dim), torch.randn(length, heads, dim)
    cache = poisoned_cache(5, heads, dim, fmt)
    write_kv(cache, k, v, slots)
    got_k, got_v = gather_kv(cache, table, positions)
    tolerance = {"float32": 0.0, "bfloat16": 4e-3, "fp8": 4e-2}[fmt]
    assert rel_err(got_k, k) <= tolerance and rel_err(got_v, v) <= tolerance
