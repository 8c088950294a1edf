"""The KDA context-parallel exchange (kda_context.py) in one process: every rank's chunks, gathered as the ranks
would send them, give each chunk the conv window and recurrent state it would enter with if one rank ran the whole
sequence (hypothesis over lengths, ranks and initial windows / states)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.model import kda_context
from dayzero.model.step import contiguous_meta
from dayzero.model.zigzag import ContextPlan, split_step
from dayzero.plugins.kda.reference import compose

WIDTH, CHANNELS, HEADS, DIM = 3, 5, 2, 4


def _shares(lengths: list[int], cp: int):
    meta = contiguous_meta([9] * len(lengths), lengths, pages_per_seq=4)
    ids = torch.arange(sum(lengths))
    return [split_step(ids, meta, ContextPlan(cp, rank, "0")) for rank in range(cp)]


def _sequence_rows(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, CHANNELS, generator=gen) for n in lengths]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=3), cp=st.integers(2, 4), seed=st.integers(0, 99))
def test_every_chunk_enters_with_the_window_one_rank_would_have(lengths, cp, seed):
    rows = _sequence_rows(lengths, seed)
    initial = torch.randn(len(lengths), WIDTH - 1, CHANNELS, generator=torch.Generator().manual_seed(seed + 1))
    shares = _shares(lengths, cp)
    tails, grids = [], []
    for local_ids, meta, shard in shares:
        flat = torch.cat(rows)[local_ids.clamp(max=sum(lengths) - 1)]
        tails.append(kda_context.segment_tails(flat, meta.cu_seqlens, shard.cells.numel(), WIDTH - 1))
    for (_, _, shard), tail in zip(shares, tails):
        grid = torch.zeros(shard.num_seqs * 2, WIDTH - 1, CHANNELS)
        grid[shard.cells] = tail
        grids.append(grid)
    for rank, (_, _, shard) in enumerate(shares):
        with _patched(grids):
            windows, final = kda_context.entry_windows(tails[rank], shard.chunk_lengths, initial, shard)
        for (n, chunk), window in zip(_segments(shard), windows):
            start = int(shard.chunk_lengths[n, :chunk].sum())
            history = torch.cat([initial[n], rows[n][:start]])
            assert torch.equal(window, history[-(WIDTH - 1):])
        for n in range(len(lengths)):
            assert torch.equal(final[n], torch.cat([initial[n], rows[n]])[-(WIDTH - 1):])


def _segments(shard) -> list[tuple[int, int]]:
    """(sequence, chunk) of each real local segment."""
    per_seq = 2 * shard.plan.cp
    return [(int(c) // per_seq, int(c) % per_seq) for c in shard.chunks]


class _patched:
    """gather_ranks answering with the stacked grids every rank sent."""

    def __init__(self, grids):
        self.grids = grids

    def __enter__(self):
        self.saved = kda_context.gather_ranks
        kda_context.gather_ranks = lambda grid, group, world: torch.stack(self.grids)

    def __exit__(self, *exc):
        kda_context.gather_ranks = self.saved


def _random_summary(gen) -> tuple[torch.Tensor, torch.Tensor]:
    M = torch.eye(DIM).expand(HEADS, DIM, DIM) + 0.3 * torch.randn(HEADS, DIM, DIM, generator=gen)
    return M, torch.randn(HEADS, DIM, DIM + 1, generator=gen)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=3), cp=st.integers(2, 4), seed=st.integers(0, 99))
def test_every_chunk_enters_with_the_state_one_rank_would_have(lengths, cp, seed):
    gen = torch.Generator().manual_seed(seed)
    shares = _shares(lengths, cp)
    summaries = {(n, c): _random_summary(gen) for n in range(len(lengths)) for c in range(2 * cp)}
    initial = torch.randn(len(lengths), HEADS, DIM, DIM + 1, generator=gen)
    grids = []
    for _, _, shard in shares:
        grid = torch.cat([torch.eye(DIM).expand(shard.num_seqs * 2, HEADS, DIM, DIM),
                          torch.zeros(shard.num_seqs * 2, HEADS, DIM, DIM + 1)], dim=-1)
        for cell, key in zip(shard.cells, _segments(shard)):
            grid[cell] = torch.cat(summaries[key], dim=-1)
        grids.append(grid)
    for _, _, shard in shares:
        M = torch.stack([summaries[key][0] for key in _segments(shard)]) if shard.cells.numel() else None
        B = torch.stack([summaries[key][1] for key in _segments(shard)]) if shard.cells.numel() else None
        if M is None:
            continue
        with _patched(grids):
            states, final = kda_context.entry_states(M, B, initial, shard)
        for (n, chunk), state in zip(_segments(shard), states):
            expected = _fold(summaries, n, chunk, initial[n], shard)
            assert torch.allclose(state, expected, atol=1e-4, rtol=1e-4)
        for n in range(len(lengths)):
            assert torch.allclose(final[n], _fold(summaries, n, 2 * cp, initial[n], shard), atol=1e-4, rtol=1e-4)


def _fold(summaries, n, chunks, initial, shard):
    """The state after the first `chunks` chunks of sequence n; empty chunks leave it as it is."""
    total = (torch.eye(DIM).expand(HEADS, DIM, DIM), torch.zeros(HEADS, DIM, DIM + 1))
    for c in range(chunks):
        if shard.chunk_lengths[n, c] > 0:
            total = compose(summaries[(n, c)], total)
    return total[0] @ initial + total[1]
