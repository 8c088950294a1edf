"""Context-parallel engines (2 ranks) of a Qwen3-Next checkpoint on CPU == the one-rank reference (the comparison of
test_context_parallel.py): gated DeltaNet states and conv windows folded from the ranks' summaries, the gated
attention's K/V rows written by every rank."""

from __future__ import annotations

import pytest

from tests.model.qwen3_next_checkpoints import write_checkpoint
from tests.parallel.test_context_parallel import _compare_with_one_rank


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("qwen3_next"))[0]


def test_context_parallel_ranks_match_one_rank(checkpoint, tmp_path):
    # the 3-token prompt leaves chunks shorter than the conv window
    _compare_with_one_rank(checkpoint, tmp_path, 2, [37, 70, 3], "bf16", "cpu", 1e-5)
