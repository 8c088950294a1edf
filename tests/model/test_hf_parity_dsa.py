"""Parity with transformers for the DeepSeek-V3.2 family (`deepseek_v32`, `glm_moe_dsa`; the checkpoints:
dsa_checkpoints.py): dayzero's reference model gives transformers' fp32 logits, with the indexer's selections
untied, and the runtime's greedy tokens (chunked prefill; speculation) equal transformers' greedy `generate`."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.model import load
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.dsa_checkpoints import ARCHITECTURES, TOPK, VOCAB, write_checkpoint
from tests.model.hf_generation import NEW_TOKENS, HalfRightProposer, transformers_tokens


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def checkpoint(request, tmp_path_factory):
    return write_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


def test_reference_logits_match_transformers(checkpoint, untied):
    directory, hf = checkpoint
    ids = torch.randint(0, VOCAB, (2, 40))
    model = load(directory, dtype=torch.float32)
    got = model.logits(ids)
    assert rel_err(got, expected_logits(hf, ids)) < 1e-4
    indexers = sum(model.config.owns_indexer(layer) for layer in range(3))
    assert len(untied) == indexers * 2 * (40 - TOPK) and min(untied) > 1e-5


@pytest.mark.parametrize("num_draft", [0, 2], ids=["plain", "drafts"])
def test_runtime_greedy_tokens_equal_transformers_generate(checkpoint, num_draft):
    directory, hf = checkpoint
    prompts = [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (37, 5)]
    expected = {tuple(p): transformers_tokens(hf, p) for p in prompts}
    model = load(directory, dtype=torch.float32)
    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=128, num_draft=num_draft)
    memory = 3 * (1 + num_draft) * manifest.unit_bytes(SLOT) + 8 * manifest.unit_bytes(PAGE)
    # a budget of 16 tokens prefills the longer prompt in three chunks
    engine = LLMEngine(EagerEngine(model, manifest), RuntimeOptions(token_budget=16, memory_bytes=memory))
    if num_draft:
        engine.propose = HalfRightProposer(expected, VOCAB)
    seqs = [engine.add_request(p, SamplingParams(max_tokens=NEW_TOKENS)) for p in prompts]
    while engine.has_work:
        engine.step()
    assert [seq.output_ids for seq in seqs] == list(expected.values())
    if num_draft:
        assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
