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
from dayzero.plugins.indexer import reference as indexer_reference
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.dsa_checkpoints import ARCHITECTURES, TOPK, VOCAB, write_checkpoint

NEW_TOKENS = 16


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def checkpoint(request, tmp_path_factory):
    return write_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture
def untied(monkeypatch):
    """Records, at every Top-K the reference indexer takes over more keys than it keeps, the gap between the last
    kept and the first dropped score relative to the row's largest; the caller asserts they are far from 0."""
    gaps = []
    causal_topk = indexer_reference.causal_topk

    def recording(scores, positions, topk):
        visible = torch.arange(scores.shape[1])[None, :] <= positions[:, None]
        ranked = scores.masked_fill(~visible, float("-inf")).sort(dim=-1, descending=True).values
        rows = positions + 1 > topk
        scale = ranked[rows, :1].abs()
        gaps.extend(((ranked[rows, topk - 1 : topk] - ranked[rows, topk : topk + 1]) / scale).flatten().tolist())
        return causal_topk(scores, positions, topk)

    monkeypatch.setattr(indexer_reference, "causal_topk", recording)
    return gaps


def test_reference_logits_match_transformers(checkpoint, untied):
    directory, hf = checkpoint
    ids = torch.randint(0, VOCAB, (2, 40))
    model = load(directory, dtype=torch.float32)
    got = model.logits(ids)
    assert rel_err(got, expected_logits(hf, ids)) < 1e-4
    indexers = sum(model.config.owns_indexer(layer) for layer in range(3))
    assert len(untied) == indexers * 2 * (40 - TOPK) and min(untied) > 1e-5


def transformers_tokens(hf, prompt: list[int]) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    return out[0, len(prompt) :].tolist()


class HalfRightProposer:
    """Drafts transformers' continuation, right for a varying number of tokens and then wrong, so that every
    acceptance depth happens."""

    def __init__(self, expected: dict[tuple[int, ...], list[int]]):
        self.expected = expected

    def __call__(self, token_ids: list[int], num_draft: int) -> list[int]:
        prompt = next(p for p in self.expected if tuple(token_ids[: len(p)]) == p)
        future = self.expected[prompt][len(token_ids) - len(prompt) :][:num_draft]
        right = len(token_ids) % (num_draft + 1)
        return future[:right] + [(t + 1) % VOCAB for t in future[right:]]


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
        engine.propose = HalfRightProposer(expected)
    seqs = [engine.add_request(p, SamplingParams(max_tokens=NEW_TOKENS)) for p in prompts]
    while engine.has_work:
        engine.step()
    assert [seq.output_ids for seq in seqs] == list(expected.values())
    if num_draft:
        assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
