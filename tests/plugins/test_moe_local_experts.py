"""Expert parallelism's share of the MoE sum: each rank's `moe_local_experts` over its whole experts, summed over
the ranks, equals `moe_experts` over all of them (the reference ops on the CPU, the kernels on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.moe import op, reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, sizes

pytestmark = [pytest.mark.gpu] if ON_GPU else []


def _layer(tokens, experts, top_k, dim, inter, dtype=torch.float32):
    logits = torch.randn(tokens, experts, device=DEVICE)
    logits[:, 0] = -50  # expert 0 gets no tokens
    weights, ids = reference.route(logits, None, top_k)
    x = torch.randn(tokens, dim, device=DEVICE, dtype=dtype)
    w1, w3 = (torch.randn(experts, inter, dim, device=DEVICE, dtype=dtype) / dim ** 0.5 for _ in range(2))
    w2 = torch.randn(experts, dim, inter, device=DEVICE, dtype=dtype) / inter ** 0.5
    return x, weights, ids, w1, w3, w2


def _rank_sum(x, weights, ids, w1, w3, w2, ranks):
    per_rank = w1.shape[0] // ranks
    shares = [op.moe_local_experts(x, weights, ids, r * per_rank, *(w[r * per_rank:(r + 1) * per_rank]
                                                                    for w in (w1, w3, w2)), "silu")
              for r in range(ranks)]
    return torch.stack(shares).float().sum(0)


@pytest.mark.parametrize("tokens, experts, top_k, ranks, dim, inter", sizes(
    cpu=[(13, 8, 2, 2, 24, 16), (5, 6, 6, 3, 16, 8), (1, 4, 1, 4, 8, 8), (9, 8, 3, 8, 16, 8)],
    gpu=[(4096, 256, 8, 8, 2304, 1024), (64, 256, 8, 4, 2304, 1024), (3, 16, 16, 2, 512, 256)]))
def test_rank_shares_sum_to_all_experts(tokens, experts, top_k, ranks, dim, inter):
    x, weights, ids, w1, w3, w2 = _layer(tokens, experts, top_k, dim, inter)
    expected = reference.moe_experts(x, weights, ids, w1, w3, w2, "silu")
    got = _rank_sum(x, weights, ids, w1, w3, w2, ranks)
    assert rel_err(got, expected) < 1e-4


def test_rows_no_kernel_writes_do_not_leak(monkeypatch):
    """Kernels leave the other ranks' rows (past the last local group) unwritten: poison them."""
    grouped = op.grouped_mlp

    def leaves_garbage(x_sorted, offsets, *args, **kwargs):
        out = grouped(x_sorted, offsets, *args, **kwargs)
        rows = torch.arange(out.shape[0], device=out.device)[:, None]
        return torch.where(rows < offsets[-1], out, float("nan"))

    monkeypatch.setattr(op, "grouped_mlp", leaves_garbage)
    x, weights, ids, w1, w3, w2 = _layer(17, 8, 3, 24, 16)
    got = _rank_sum(x, weights, ids, w1, w3, w2, 4)
    assert torch.isfinite(got).all()
    assert rel_err(got, reference.moe_experts(x, weights, ids, w1, w3, w2, "silu")) < 1e-4


def test_rank_shares_with_shared_partial_sums_add_to_the_whole():
    """Each rank adds its partial sum of the shared experts' output in its un-permutation; the ranks' results sum to
    all experts plus the whole shared output."""
    x, weights, ids, w1, w3, w2 = _layer(11, 8, 3, 24, 16)
    shared = torch.randn(4, 11, 24, device=DEVICE)
    shares = [op.moe_local_experts(x, weights, ids, 2 * r, w1[2 * r:2 * r + 2], w3[2 * r:2 * r + 2],
                                   w2[2 * r:2 * r + 2], "silu", shared[r]) for r in range(4)]
    expected = reference.moe_experts(x, weights, ids, w1, w3, w2, "silu") + shared.sum(0)
    assert rel_err(torch.stack(shares).sum(0), expected) < 1e-4
