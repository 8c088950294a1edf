"""Sampling parameters a user gets wrong, and the decode-bucket / padding rules of graph mode (checked on the CPU);
the sampler itself: test_batch_sampler.py."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import StepMeta
from dayzero.errors import DayzeroError
from dayzero.runtime.graphs import batch_buckets, bucket_for, pad_decode_inputs
from dayzero.runtime.sampling import SamplingParams


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
