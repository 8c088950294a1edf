from __future__ import annotations

import pytest
import torch

from dayzero.plugins.attnres.reference import attnres_mix, attnres_weights
from tests.helpers import rel_err


def test_one_source_returns_it():
    v = torch.randn(5, 7, 32)
    assert torch.allclose(attnres_mix(torch.randn(32), [v], torch.rand(32) + 0.5), v)


@pytest.mark.parametrize("num_sources", [2, 3, 9])
def test_weights_sum_to_one_and_mix_is_weighted_sum(num_sources):
    D = 48
    sources = [torch.randn(4, D) * (i + 1) for i in range(num_sources)]
    query, rms_weight = torch.randn(D), torch.rand(D) + 0.5
    alpha = attnres_weights(query, sources, rms_weight)
    assert alpha.shape == (num_sources, 4)
    assert torch.allclose(alpha.sum(0), torch.ones(4))
    expected = sum(alpha[i, :, None] * sources[i] for i in range(num_sources))
    assert rel_err(attnres_mix(query, sources, rms_weight), expected) < 1e-6


def test_scores_use_rms_normalized_sources():
    """Scaling a source does not change its score (the keys are RMS-normalized), only the mixed value."""
    D = 16
    a, b = torch.randn(3, D), torch.randn(3, D)
    query, w = torch.randn(D), torch.rand(D) + 0.5
    assert torch.allclose(attnres_weights(query, [a, b], w), attnres_weights(query, [a * 10, b], w), atol=1e-6)


def test_bf16_sources_keep_dtype():
    sources = [torch.randn(2, 8).bfloat16() for _ in range(3)]
    assert attnres_mix(torch.randn(8), sources, torch.ones(8)).dtype == torch.bfloat16
