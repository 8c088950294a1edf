"""DSA references: Top-K selection rules, paged addressing, and sparse == dense when nothing is dropped."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer.reference import index_scores, index_topk, index_topk_paged
from dayzero.plugins.paged_cache.reference import PAGE_SIZE, write_rows
from dayzero.plugins.sparse_mla.reference import dense_mla_paged, sparse_mla_paged
from tests.helpers import rel_err


def paged_layout(lengths: list[int], num_pages: int, seed: int = 0):
    """A shuffled block table for sequences of `lengths` and the flat rows of each token."""
    gen = torch.Generator().manual_seed(seed)
    pages = torch.randperm(num_pages, generator=gen)
    max_pages = max(-(-n // PAGE_SIZE) for n in lengths)
    table = torch.full((len(lengths), max_pages), -1, dtype=torch.int32)
    rows, used = [], 0
    for n, length in enumerate(lengths):
        count = -(-length // PAGE_SIZE)
        table[n, :count] = pages[used : used + count].int()
        used += count
        pos = torch.arange(length)
        rows.append(table[n, pos // PAGE_SIZE].long() * PAGE_SIZE + pos % PAGE_SIZE)
    return table, torch.cat(rows)


def test_index_scores_formula():
    q, k, w = torch.randn(3, 4, 16), torch.randn(5, 16), torch.randn(3, 4)
    brute = torch.zeros(3, 5)
    for t in range(3):
        for s in range(5):
            brute[t, s] = sum(w[t, h] * torch.relu(q[t, h] @ k[s]) for h in range(4)) * 16 ** -0.5
    assert rel_err(index_scores(q, k, w), brute) < 1e-6


@pytest.mark.parametrize("topk", [1, 4, 9, 40])
def test_topk_is_causal_counted_and_padded(topk):
    B, T, HI, DI = 2, 9, 2, 16
    q, k, w = torch.randn(B, T, HI, DI), torch.randn(B, 20, DI), torch.randn(B, T, HI)
    positions = torch.arange(5, 5 + T).expand(B, T)
    idx = index_topk(q, k, w, topk, positions)
    assert idx.shape == (B, T, topk)
    for b in range(B):
        for t in range(T):
            row = idx[b, t]
            valid = row[row >= 0]
            assert valid.numel() == min(topk, int(positions[b, t]) + 1)
            assert (valid <= positions[b, t]).all() and bool((valid[1:] > valid[:-1]).all())
            assert (row[valid.numel():] == -1).all()
            scores = index_scores(q[b, t : t + 1], k[b], w[b, t : t + 1])[0, : int(positions[b, t]) + 1]
            assert scores[valid.long()].min() >= scores.topk(valid.numel()).values.min()


def test_ties_go_to_the_earlier_position():
    k = torch.zeros(6, 4)
    k[1] = k[4] = 1.0
    q, w = torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1)
    idx = index_topk(q, k[None], w, topk=3, positions=torch.tensor([[5]]))
    # 1 and 4 tie at the best score, 0 wins the tie of the zero scores; listed in ascending position
    assert idx[0, 0].tolist() == [0, 1, 4]


def test_paged_index_topk_equals_dense():
    lengths, HI, DI, topk = [70, 130], 2, 32, 16
    table, rows = paged_layout(lengths, num_pages=8)
    keys = [torch.randn(n, DI) for n in lengths]
    cache = torch.full((8, PAGE_SIZE, DI), float("nan"))
    write_rows(cache, torch.cat(keys), rows)
    new = [5, 3]
    q, w = torch.randn(sum(new), HI, DI), torch.randn(sum(new), HI)
    cu = torch.tensor([0, 5, 8], dtype=torch.int32)
    positions = torch.cat([torch.arange(n - m, n) for n, m in zip(lengths, new)])
    got = index_topk_paged(q, w, cache, table, cu, positions, topk)
    for n, (a, b) in enumerate([(0, 5), (5, 8)]):
        dense = index_topk(q[None, a:b], keys[n][None], w[None, a:b], topk, positions[None, a:b])[0]
        assert torch.equal(got[a:b], dense)


@pytest.mark.parametrize("lengths", [[1], [37, 64], [65, 130, 3]], ids=str)
def test_sparse_with_every_index_equals_dense_causal(lengths):
    """The indexer with topk >= sequence length keeps every past token: sparse MLA == dense causal MLA."""
    H, D, topk = 4, 96, 256
    table, rows = paged_layout(lengths, num_pages=12, seed=1)
    cache = torch.full((12, PAGE_SIZE, D), float("nan"))
    write_rows(cache, torch.randn(sum(lengths), D), rows)
    positions = torch.cat([torch.arange(n) for n in lengths])
    cu = torch.tensor([0, *lengths]).cumsum(0).int()
    q_idx, w = torch.randn(len(positions), 2, 16), torch.randn(len(positions), 2)
    index_cache = torch.zeros(12, PAGE_SIZE, 16)
    write_rows(index_cache, torch.randn(sum(lengths), 16), rows)
    indices = index_topk_paged(q_idx, w, index_cache, table, cu, positions, topk)
    q = torch.randn(len(positions), H, D)
    o_sparse, lse_sparse = sparse_mla_paged(q, cache, table, cu, indices, sm_scale=D ** -0.5, v_dim=64)
    o_dense, lse_dense = dense_mla_paged(q, cache, table, cu, positions, sm_scale=D ** -0.5, v_dim=64)
    assert rel_err(o_sparse, o_dense) < 1e-5
    assert rel_err(lse_sparse, lse_dense) < 1e-6


def test_sparse_attention_over_a_subset():
    D, v_dim = 24, 16
    table, rows = paged_layout([50], num_pages=2)
    kv = torch.randn(50, D)
    cache = torch.zeros(2, PAGE_SIZE, D)
    write_rows(cache, kv, rows)
    q = torch.randn(1, 3, D)
    picked = torch.tensor([[7, 0, 42, -1, 13, -1]], dtype=torch.int32)
    o, lse = sparse_mla_paged(q, cache, table, torch.tensor([0, 1]), picked, sm_scale=0.3, v_dim=v_dim)
    sub = kv[[7, 0, 42, 13]]
    scores = q[0] @ sub.T * 0.3
    assert rel_err(o[0], scores.softmax(-1) @ sub[:, :v_dim]) < 1e-6
    assert rel_err(lse[0], scores.logsumexp(-1)) < 1e-6


def test_nothing_visible_gives_zero_output():
    cache = torch.randn(1, PAGE_SIZE, 8)
    q = torch.randn(2, 2, 8)
    none = torch.full((2, 4), -1, dtype=torch.int32)
    o, lse = sparse_mla_paged(q, cache, torch.zeros(1, 1, dtype=torch.int32), torch.tensor([0, 2]), none, 1.0, 4)
    assert torch.equal(o, torch.zeros_like(o)) and torch.isneginf(lse).all()
