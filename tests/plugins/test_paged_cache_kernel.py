"""The Triton cache write vs the reference (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.paged_cache import reference
from tests.plugins.triton_env import DEVICE, needs_triton, sizes

pytestmark = needs_triton


@pytest.mark.parametrize("pages, tokens, dim, dtype", sizes(
    cpu=[(5, 37, 576, torch.bfloat16), (3, 9, 132, torch.float32), (2, 5, 7, torch.float32)],
    gpu=[(4096, 8192, 576, torch.bfloat16), (512, 333, 132, torch.float32)],
))
def test_write_rows_matches_reference(pages, tokens, dim, dtype):
    from dayzero.plugins.paged_cache.kernel import write_rows_launcher

    cache = torch.randn(pages, 64, dim).to(dtype)
    rows = torch.randn(tokens, dim).to(dtype)
    slots = torch.randperm(pages * 64)[:tokens]
    slots[[1, tokens // 2]] = -1
    expected = cache.clone()
    reference.write_rows(expected, rows, slots)
    got = cache.to(DEVICE)
    write_rows_launcher(got, rows.to(DEVICE), slots.to(DEVICE))
    assert torch.equal(got.cpu(), expected)


def test_registered_op_dispatches_to_reference_on_cpu():
    from dayzero.plugins.paged_cache import write_rows

    cache, rows, slots = torch.zeros(2, 64, 8), torch.randn(3, 8), torch.tensor([5, -1, 100])
    write_rows(cache, rows, slots)
    flat = cache.view(-1, 8)
    assert torch.equal(flat[5], rows[0]) and torch.equal(flat[100], rows[2]) and flat.abs().sum() == (
        rows[0].abs().sum() + rows[2].abs().sum())
