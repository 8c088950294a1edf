"""Sampling parameters a user gets wrong, and the decode-bucket / padding rules of graph mode (checked on the CPU);
the sampler itself: test_batch_sampler.py."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import StepMeta
from dayzero.errors import DayzeroError
from dayzero.runtime.batch import decode_inputs
from dayzero.runtime.block_manager import DUMMY_PAGE
from dayzero.runtime.graphs import GraphDecode, batch_buckets, bucket_for, pad_decode_inputs, width_buckets
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(temperature=-1), dict(top_p=0), dict(top_k=-2)])
def test_bad_sampling_params_are_user_errors(bad):
    with pytest.raises(DayzeroError):
        SamplingParams(**bad)


def test_buckets_cover_every_batch_size():
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert batch_buckets(5) == [1, 2, 4, 5] and batch_buckets(1) == [1]
    buckets = batch_buckets(40)
    for batch in range(1, 41):
        bucket = bucket_for(batch, buckets)
        assert bucket >= batch and all(b < batch for b in buckets if b < bucket)


def test_padded_rows_write_only_to_the_dummy_page_and_slot():
    meta = StepMeta(positions=torch.tensor([5, 9]), cu_seqlens=torch.tensor([0, 1, 2], dtype=torch.int32),
                    block_table=torch.tensor([[3, 0], [4, 6]], dtype=torch.int32),
                    slot_mapping=torch.tensor([197, 265]),
                    state_slots=torch.tensor([[2], [3]], dtype=torch.int32),
                    num_accepted=torch.ones(2, dtype=torch.int32))
    ids, padded = pad_decode_inputs(torch.tensor([[7], [8]]), meta, 4)
    assert ids.tolist() == [[7], [8], [0], [0]]
    assert padded.slot_mapping.tolist() == [197, 265, -1, -1]
    assert padded.cu_seqlens.tolist() == [0, 1, 2, 3, 4]
    assert padded.block_table[2:].eq(0).all() and padded.state_slots[2:].eq(0).all()
    assert padded.num_accepted.tolist() == [1, 1, 1, 1] and padded.positions.tolist() == [5, 9, 0, 0]


def test_a_step_page_table_is_as_wide_as_its_batch_needs():
    seqs = [Sequence([1] * n, SamplingParams()) for n in (70, 200)]
    for seq, pages in zip(seqs, ([5, 2], [7, 1, 9, 4])):
        seq.pages, seq.num_cached, seq.slot = pages, len(seq.token_ids) - 1, 0
    _, meta = decode_inputs(seqs, [[], []], 1, 64, 1, "cpu")
    assert meta.block_table.tolist() == [[5, 2, DUMMY_PAGE, DUMMY_PAGE], [7, 1, 9, 4]]


def test_graph_page_table_gets_the_dummy_page_where_a_wider_step_left_pages():
    runner = GraphDecode(engine=None, caches=[], max_batch=4, max_pages=6)
    static = torch.full((2, 6), DUMMY_PAGE, dtype=torch.int32)
    runner._fill_table((2, 6), static, torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]], dtype=torch.int32))
    runner._fill_table((2, 6), static, torch.tensor([[11], [12]], dtype=torch.int32))
    assert static.tolist() == [[11, *[DUMMY_PAGE] * 5], [12, *[DUMMY_PAGE] * 5]]


def test_page_table_widths_grow_fourfold_up_to_the_longest_sequence():
    assert width_buckets(16384) == [128, 512, 2048, 8192, 16384]
    assert width_buckets(2048) == [128, 512, 2048] and width_buckets(8) == [8]
    buckets = width_buckets(5000)
    assert buckets[-1] == 5000 and [bucket_for(w, buckets) for w in (1, 128, 129, 4097)] == [128, 128, 512, 5000]
