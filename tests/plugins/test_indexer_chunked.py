"""The chunked decode indexer (decode_chunked_kernel.py): rounds of a bounded chunk, splits whose positions interleave.

Every case against the reference bit for bit: scores sorted along the context (one split, or one round, holds the
whole Top-K), integer scores that tie across splits and rounds (the merge must keep the earliest positions although
a row's splits interleave), contexts shorter than K or than one chunk, 1 + d rows per sequence, more splits than a
short context fills.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import reference
from tests.plugins.test_indexer_kernel import assert_rows_follow_the_rule, build_case, run_kernel
from tests.plugins.test_indexer_select import sorted_scores_case
from tests.plugins.triton_env import ON_GPU, needs_triton

pytestmark = needs_triton

# tiny rounds under the interpreter: a few hundred keys make several rounds of several splits
SMALL = {} if ON_GPU else dict(block_keys=16, union_keys=64, chunk_keys=64, range_keys=32)


def chunked(case, topk, **options):
    return run_kernel(case, topk, "decode", decode_kernel="chunked", **{**SMALL, **options})


@pytest.mark.parametrize("order", ["rising", "falling"])
def test_sorted_scores_across_rounds_and_splits(order):
    length, topk = (300, 20) if not ON_GPU else (40000, 2048)
    case = sorted_scores_case(length, order, "fp32")
    assert torch.equal(chunked(case, topk, num_splits=4).cpu(), reference.index_topk_paged(**case, topk=topk).cpu())


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_integer_ties_across_interleaved_splits_and_rounds(splits):
    case = build_case((400, 150), (2, 1), 2, 16, "fp32", torch.float32, integer=True, seed=11)
    got = chunked(case, 40, num_splits=splits)
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=40).cpu())


@pytest.mark.parametrize("lengths, new, topk, splits", [
    ((5, 40, 130), (1, 2, 1), 64, 4), ((200, 97, 64), (4, 3, 4), 16, 2), ((500,), (2,), 24, 8)])
def test_short_contexts_rows_per_sequence_and_empty_splits(lengths, new, topk, splits):
    case = build_case(lengths, new, 3, 32, "fp32", torch.float32, seed=7)
    got = chunked(case, topk, num_splits=splits)
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=topk).cpu())
    assert_rows_follow_the_rule(got, case, topk)


def test_uneven_chunk_split_is_refused():
    case = build_case((100,), (1,), 2, 16, "fp32", torch.float32)
    with pytest.raises(AssertionError, match="split evenly"):
        chunked(case, 8, num_splits=3)
