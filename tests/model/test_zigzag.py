"""The zigzag split of a prefill step over context-parallel ranks: every token once, equal padded shapes, rank 0
holding each sequence's last token."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.model.step import contiguous_meta
from dayzero.model.zigzag import ContextPlan, chunk_bounds, split_step


@given(length=st.integers(1, 300), cp=st.integers(1, 8))
def test_chunks_cover_the_sequence_and_the_last_is_never_empty(length, cp):
    bounds = chunk_bounds(length, cp)
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    assert bounds[0] == 0 and bounds[-1] == length and len(sizes) == 2 * cp
    assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1 and sizes[-1] >= 1


def _split_all(lengths: list[int], context: list[int], cp: int):
    meta = contiguous_meta(context, lengths, pages_per_seq=8)
    ids = torch.arange(sum(lengths)) + 1000
    return meta, ids, [split_step(ids, meta, ContextPlan(cp, rank, "0")) for rank in range(cp)]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 90), min_size=1, max_size=4), cp=st.integers(2, 4), data=st.data())
def test_every_token_runs_once_with_its_own_position_and_slot(lengths, cp, data):
    context = data.draw(st.lists(st.integers(0, 200), min_size=len(lengths), max_size=len(lengths)))
    meta, ids, shares = _split_all(lengths, context, cp)
    assert len({local_ids.numel() for local_ids, _, _ in shares}) == 1  # equal shapes for the collectives
    seen = []
    for local_ids, local, shard in shares:
        real = local.slot_mapping >= 0
        seen += local_ids[real].tolist()
        token = local_ids[real] - 1000
        assert torch.equal(local.positions[real], meta.positions[token])
        assert torch.equal(local.slot_mapping[real], meta.slot_mapping[token])
        segment = torch.searchsorted(local.cu_seqlens, torch.nonzero(real)[:, 0], right=True) - 1
        seq_of_token = torch.searchsorted(meta.cu_seqlens, token, right=True) - 1
        assert torch.equal(local.block_table[segment], meta.block_table[seq_of_token])
        assert shard.chunk_lengths.sum(1).tolist() == lengths
    assert sorted(seen) == ids.tolist()
    assert (shares[0][0][shares[0][2].last_rows] == ids[meta.cu_seqlens[1:].long() - 1]).all()


def test_a_rank_with_no_tokens_runs_only_padding():
    # 3 tokens over 4 ranks: 8 chunks, sizes [0, 0, 0, 0, 0, 1, 1, 1]; ranks 3 (chunk 4 only) holds nothing
    _, _, shares = _split_all([3], [5], 4)
    local_ids, local, shard = shares[3]
    assert local_ids.numel() == 1 and local.slot_mapping.tolist() == [-1] and shard.cells.numel() == 0
    assert local.cu_seqlens.tolist() == [0, 1] and local.state_slots.tolist() == [[-1]]
    assert [s[2].chunks.tolist() for s in shares] == [[7], [6], [5], []]
