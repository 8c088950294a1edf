"""Tensor-parallel engines of a Qwen3-Next checkpoint on CPU (gloo, 2 ranks) == the one-rank reference (the comparison
of test_tensor_parallel.py): each rank holds half of the gated DeltaNet key heads with their value heads (its share of
each of the conv's q, k and v channels), half of the gated-attention heads, half of every expert's and the shared
expert's neurons, or with --ep 2 half of the routed experts whole."""

from __future__ import annotations

import pytest

from dayzero.cache import CompilationCache
from dayzero.export.build import export_engine
from dayzero.export.options import ExportOptions
from dayzero.llm.loader import start_ranks
from tests.model.qwen3_next_checkpoints import write_checkpoint
from tests.parallel.test_tensor_parallel import CPU_RANKS, _compare_with_one_rank


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # 6 experts: --ep 2 gives each rank 3 whole
    return write_checkpoint(tmp_path_factory.mktemp("qwen3_next"), num_experts=6)[0]


@pytest.mark.parametrize("ep", [1, 2])
def test_eager_ranks_match_one_rank(checkpoint, ep, tmp_path):
    entry, _ = export_engine(checkpoint, ExportOptions(backend="eager", tp=2, ep=ep, max_batch=4),
                             CompilationCache(tmp_path))
    engine = start_ranks(entry, 2, CPU_RANKS)
    try:
        state, conv = (next(s for s in engine.manifest.cache_tensors if s.name == name) for name in ("state", "conv"))
        # of 2 key heads of 16 serving 6 value heads of 32: one key head and its 3 value heads
        assert state.unit_shape == (3, 16, 32) and conv.unit_shape == (1, 3, 2 * 16 + 3 * 32)
        _compare_with_one_rank(engine, checkpoint, 1e-5)
    finally:
        workers = list(engine.workers)
        engine.close()
    assert [process.returncode for process in workers] == [0]
