"""Prefix caching on multi-rank engines (CPU, gloo): rank 0's state pool sends the workers its slot zeroings and
snapshot copies in order, so a tensor-parallel pair (each rank its KDA heads' states) and a context-parallel pair
(every rank the whole states) resume a cached prefix as one rank does, with speculation."""

from __future__ import annotations

import pytest
import torch

from dayzero.export.options import ExportOptions
from dayzero.llm.api import LLM
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import TINY_CONFIG

SYSTEM = "You are a helpful assistant. Answer in one short line. " * 3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("mrpc") / "tiny", torch.float32, seed=9)


def _turns(checkpoint, prefix_caching: bool, **ranks) -> tuple[list[list[int]], int]:
    """Three requests one after another over a shared system prompt (the later ones start from its snapshot)."""
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    runtime = RuntimeOptions(memory_bytes=64 << 20, prefix_caching=prefix_caching, snapshot_every=64,
                             token_budget=48)
    with LLM(checkpoint, ExportOptions(backend="eager", max_batch=4, num_draft=2, **ranks), runtime) as llm:
        outs = [llm.generate([SYSTEM + question], params)[0].token_ids
                for question in ("What is KDA?", "And MLA?", "What is KDA?")]
        hits = llm.engine.prefix_cache.hit_tokens if prefix_caching else 0
    return outs, hits


@pytest.mark.parametrize("ranks", [{"tp": 2}, {"cp": 2}], ids=["tp2", "cp2"])
def test_multi_rank_prefix_hits_generate_what_one_rank_does(checkpoint, tmp_path, monkeypatch, ranks):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    one_rank, _ = _turns(checkpoint, prefix_caching=False)
    got, hits = _turns(checkpoint, prefix_caching=True, **ranks)
    assert hits >= 2 * 128  # the system prompt's first two pages, at least, for each later request
    assert got == one_rank
