from __future__ import annotations

import pytest
import torch

from dayzero.plugins.moe.activation import gated_activation
from dayzero.plugins.moe.reference import moe_experts, route
from tests.helpers import rel_err


def test_route_picks_by_biased_scores_and_weights_by_unbiased():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    bias = torch.tensor([10.0, 0.0, 0.0, 0.0])
    weights, ids = route(logits, bias, top_k=2, renormalize=False)
    assert sorted(ids[0].tolist()) == [0, 3]
    s = torch.sigmoid(logits[0])
    assert torch.allclose(weights[0].sort().values, torch.stack([s[0], s[3]]).sort().values)


def test_route_renormalizes_and_scales():
    weights, _ = route(torch.randn(5, 8), torch.randn(8), top_k=3, renormalize=True, scaling=2.5)
    assert torch.allclose(weights.sum(-1), torch.full((5,), 2.5))


def test_grouped_topk_only_uses_best_groups():
    # 4 groups of 2; group scores (sum of top-2 biased scores) make groups 1 and 3 the best
    logits = torch.tensor([[-5.0, -5.0, 3.0, 3.0, 0.0, -9.0, 2.0, 2.5]])
    _, ids = route(logits, None, top_k=3, num_groups=4, topk_group=2)
    assert set(ids[0].tolist()) <= {2, 3, 6, 7}


@pytest.mark.parametrize("top_k", [1, 3, 6])
def test_experts_match_a_token_loop(top_k):
    T, D, I, E = 7, 12, 10, 6
    x = torch.randn(T, D)
    w1, w3, w2 = torch.randn(E, I, D), torch.randn(E, I, D), torch.randn(E, D, I)
    # expert 5 gets no token
    logits = torch.randn(T, E)
    logits[:, 5] = -50
    weights, ids = route(logits, None, top_k=min(top_k, 5))
    out = moe_experts(x, weights, ids, w1, w3, w2)
    expected = torch.zeros(T, D)
    for t in range(T):
        for j, e in enumerate(ids[t].tolist()):
            h = gated_activation(x[t] @ w1[e].T, x[t] @ w3[e].T)
            expected[t] += weights[t, j] * (h @ w2[e].T)
    assert rel_err(out, expected) < 1e-5


def test_situ_formula():
    g, u = torch.randn(50), torch.randn(50) * 40
    expected = 4 * torch.tanh(g / 4) * torch.sigmoid(g) * 25 * torch.tanh(u / 25)
    assert torch.allclose(gated_activation(g, u, "situ", beta=4.0, linear_beta=25.0), expected)
