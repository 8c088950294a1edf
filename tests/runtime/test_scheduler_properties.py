"""Property tests of block manager + state pool + scheduler over random request streams (no model: the step's
tokens are made up): no page or slot is owned twice, everything returns when requests finish or are cancelled,
and every request either finishes or is refused at submission with a reason."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.errors import DayzeroError
from dayzero.runtime.block_manager import DUMMY_PAGE, BlockManager
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.scheduler import Scheduler
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.state_pool import StatePool

PAGE = 8

requests = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20), st.integers(0, 30), st.booleans()),
                    min_size=1, max_size=12)


def check_ownership(blocks: BlockManager, states: StatePool, live: list[Sequence]) -> None:
    pages = [p for s in live for p in s.pages]
    assert len(pages) == len(set(pages)) and DUMMY_PAGE not in pages
    assert sorted(pages + blocks.free_pages) == list(range(1, blocks.num_pages))
    slots = [s.slot for s in live if s.slot is not None]
    assert len(slots) == len(set(slots)) and 0 not in slots
    assert sorted(slots + states.free_groups) == list(range(1, states.num_groups))


def advance(step) -> None:
    """What the engine does after a step: tokens enter the cache; a finished prompt gains one sampled token."""
    for seq, count in zip(step.seqs, step.num_new):
        seq.num_cached += count
        if not seq.num_uncached:
            seq.output_ids.append(0)


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(3, 16), st.integers(2, 5), st.integers(1, 40))
def test_random_request_streams_keep_ownership_exact(reqs, num_pages, max_batch, token_budget):
    blocks = BlockManager(num_pages, PAGE)
    states = StatePool(max_batch + 1, 1, [torch.zeros(max_batch + 1, 2)])
    scheduler = Scheduler(blocks, states, max_batch, token_budget, max_len=200)
    pending = sorted(enumerate(reqs), key=lambda r: r[1][2])
    seqs, refused, step_no = [], [], 0
    while pending or scheduler.has_work:
        while pending and pending[0][1][2] <= step_no:
            index, (length, max_tokens, _, cancel) = pending.pop(0)
            seq = Sequence(list(range(length)), SamplingParams(max_tokens=max_tokens), request_id=f"r{index}")
            try:
                scheduler.add(seq)
                seqs.append((seq, cancel))
            except DayzeroError:
                assert seq.status is Status.REFUSED and seq.finish_reason
                refused.append(seq)
        step = scheduler.schedule()
        if step is not None:
            assert len(step.seqs) <= max_batch and (step.decode or sum(step.num_new) <= token_budget)
            # decode rows in state-slot order (the KDA pool is read front to back)
            assert not step.decode or [s.slot for s in step.seqs] == sorted(s.slot for s in step.seqs)
            advance(step)
            for seq in step.seqs:
                if len(seq.output_ids) >= seq.params.max_tokens:
                    scheduler.release(seq, Status.FINISHED, "length")
        for seq, cancel in seqs:
            if cancel and step_no == 3 and not seq.is_done:
                scheduler.cancel(seq.request_id)
        check_ownership(blocks, states, [s for s, _ in seqs if not s.is_done])
        step_no += 1
        assert step_no < 5000, "the scheduler stopped making progress"
    assert all(s.status in (Status.FINISHED, Status.CANCELLED) for s, _ in seqs)
    assert all(len(s.output_ids) == s.params.max_tokens for s, _ in seqs if s.status is Status.FINISHED)
    assert blocks.num_free == num_pages - 1 and states.num_free == max_batch
    assert len(seqs) + len(refused) == len(reqs)


def test_state_pool_hands_out_the_lowest_free_group():
    pool = StatePool(6 * 2, 2, [torch.zeros(12, 3)])
    seqs = [Sequence([1], SamplingParams(max_tokens=1), request_id=f"r{n}") for n in range(5)]
    for seq in seqs:
        pool.allocate(seq)
    assert [s.slot for s in seqs] == [1, 2, 3, 4, 5]
    pool.free(seqs[0])
    pool.free(seqs[3])
    late = Sequence([1], SamplingParams(max_tokens=1), request_id="late")
    pool.allocate(late)
    # groups 1 then 4 were freed: the lower one, not the last freed, so the live states stay packed at the start
    assert late.slot == 1 and pool.free_groups == [4]
