"""The KDA references agree with each other: chunked == recurrent, summaries fold exactly, the pool obeys slots."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err


def kda_inputs(B, T, H, K, V, lower_bound=None):
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v = torch.randn(B, T, H, V)
    z = torch.randn(B, T, H, K)
    g = -torch.nn.functional.softplus(z) if lower_bound is None else lower_bound * torch.sigmoid(z)
    beta = torch.rand(B, T, H)
    return q, k, v, g, beta


@pytest.mark.parametrize("T", [1, 15, 16, 37, 64])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "initial-state"])
def test_chunk_equals_recurrent(T, with_state):
    B, H, K, V = 2, 3, 16, 8
    q, k, v, g, beta = kda_inputs(B, T, H, K, V)
    S0 = torch.randn(B, H, K, V) if with_state else None
    o_ref, s_ref = R.recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True)
    o, s = R.chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                       use_qk_l2norm_in_kernel=True, chunk_size=16)
    assert rel_err(o, o_ref) < 1e-5
    assert rel_err(s, s_ref) < 1e-5


def test_chunk_equals_recurrent_varlen_and_strong_decay():
    H, K, V = 2, 16, 16
    cu = torch.tensor([0, 5, 40, 41, 77])
    q, k, v, g, beta = kda_inputs(1, 77, H, K, V, lower_bound=-5.0)
    S0 = torch.randn(4, H, K, V)
    o_ref, s_ref = R.recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o, s = R.chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                       use_qk_l2norm_in_kernel=True, cu_seqlens=cu, chunk_size=16)
    assert rel_err(o, o_ref) < 1e-5
    assert rel_err(s, s_ref) < 1e-5


def test_varlen_equals_separate_sequences():
    H, K, V = 2, 8, 8
    q, k, v, g, beta = kda_inputs(1, 30, H, K, V)
    cu = torch.tensor([0, 12, 30])
    o, s = R.chunk_kda(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu, chunk_size=8)
    for n, (a, b) in enumerate([(0, 12), (12, 30)]):
        part = [x[:, a:b] for x in (q, k, v, g, beta)]
        o_n, s_n = R.chunk_kda(*part, output_final_state=True, chunk_size=8)
        assert rel_err(o[:, a:b], o_n) < 1e-6
        assert rel_err(s[n : n + 1], s_n) < 1e-6


def test_summary_fold_continues_the_sequence():
    """chunk_kda(initial_state=fold(summaries of earlier segments)) == running the whole sequence."""
    H, K, V = 2, 16, 8
    q, k, v, g, beta = kda_inputs(1, 50, H, K, V)
    S0 = torch.randn(1, H, K, V)
    o_all, s_all = R.chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                               use_qk_l2norm_in_kernel=True, chunk_size=16)
    cuts = [(0, 7), (7, 30), (30, 41)]
    summaries = [R.kda_summary(k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], use_qk_l2norm_in_kernel=True,
                               chunk_size=16) for a, b in cuts]
    entry = R.fold(summaries, S0)
    o_tail, s_tail = R.chunk_kda(*(x[:, 41:] for x in (q, k, v, g, beta)), initial_state=entry,
                                 output_final_state=True, use_qk_l2norm_in_kernel=True, chunk_size=16)
    assert rel_err(o_tail, o_all[:, 41:]) < 1e-5
    assert rel_err(s_tail, s_all) < 1e-5


def test_compose_is_associative():
    H, K, V = 2, 8, 4
    parts = []
    for _ in range(3):
        q, k, v, g, beta = kda_inputs(1, 9, H, K, V)
        parts.append(R.kda_summary(k, v, g, beta, use_qk_l2norm_in_kernel=True))
    a, b, c = parts
    left = R.compose(c, R.compose(b, a))
    right = R.compose(R.compose(c, b), a)
    assert rel_err(left[0], right[0]) < 1e-5 and rel_err(left[1], right[1]) < 1e-5


@pytest.mark.parametrize("num_accepted", [1, 2, 3])
def test_pool_decode_follows_slots(num_accepted):
    """Start from slot state_slots[b, num_accepted-1], write the state after token t to state_slots[b, t]."""
    B, L, H, K, V = 3, 3, 2, 8, 8
    q, k, v, g, beta = kda_inputs(B, L, H, K, V)
    pool = torch.randn(12, H, K, V)
    slots = torch.tensor([[0, 1, 2], [-1, -1, -1], [5, 6, 7]], dtype=torch.int32)
    accepted = torch.full((B,), num_accepted, dtype=torch.int32)
    before = pool.clone()
    o = R.recurrent_kda_pool(q, k, v, g, beta, pool, slots, accepted, use_qk_l2norm_in_kernel=True)
    for b in (0, 2):
        start = before[slots[b, num_accepted - 1]][None]
        o_ref, _ = R.recurrent_kda(q[b : b + 1], k[b : b + 1], v[b : b + 1], g[b : b + 1], beta[b : b + 1],
                                   initial_state=start, use_qk_l2norm_in_kernel=True)
        assert rel_err(o[b], o_ref[0]) < 1e-6
        for t in range(L):
            _, s_t = R.recurrent_kda(*(x[b : b + 1, : t + 1] for x in (q, k, v, g, beta)), initial_state=start,
                                     output_final_state=True, use_qk_l2norm_in_kernel=True)
            assert rel_err(pool[slots[b, t]], s_t[0]) < 1e-6
    assert torch.equal(o[1], torch.zeros_like(o[1]))
    untouched = [i for i in range(12) if i not in (0, 1, 2, 5, 6, 7)]
    assert torch.equal(pool[untouched], before[untouched])
