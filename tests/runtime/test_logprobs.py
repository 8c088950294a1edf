"""Log probabilities: each emitted token's entry is the model's own distribution at the step that emitted it (the
eager reference's log-softmax), through chunked prefill and speculative verify rows; none unless asked."""

from __future__ import annotations

import math

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.errors import DayzeroError
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import random_model, tiny_config_dict

TOP = 3


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def runtime(model, num_draft: int) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=512, num_draft=num_draft)
    budget = 5 * (1 + num_draft) * manifest.unit_bytes(SLOT) + 20 * manifest.unit_bytes(PAGE)
    return LLMEngine(EagerEngine(model, manifest), RuntimeOptions(token_budget=24, memory_bytes=budget))


@torch.inference_mode()
def reference(model, prompt: list[int], max_tokens: int) -> list[torch.Tensor]:
    """The log-softmax row greedy decoding draws each of its tokens from."""
    pages = math.ceil((len(prompt) + max_tokens) / PAGE_SIZE)
    caches = model.allocate_caches(pages, 1)
    logits = model.prefill(torch.tensor(prompt), contiguous_meta([0], [len(prompt)], pages), caches)[-1]
    rows = []
    for step in range(max_tokens):
        rows.append(torch.log_softmax(logits.float(), -1))
        token = int(logits.argmax())
        meta = contiguous_meta([len(prompt) + step], [1], pages, decode=True)
        logits = model.decode(torch.tensor([[token]]), meta, caches)[0][-1]
    return rows


def mostly_right_drafts(futures: dict[tuple[int, ...], list[int]]):
    """A proposer that knows the greedy future and gets each run's last draft wrong: verify steps then emit
    accepted drafts and a correction, each from its own logits row."""
    def propose(token_ids: list[int], num_draft: int) -> list[int]:
        prompt = next(p for p in futures if tuple(token_ids[: len(p)]) == p)
        future = futures[prompt][len(token_ids) - len(prompt):][:num_draft]
        return future[:-1] + [(t + 1) % 256 for t in future[-1:]]
    return propose


@pytest.mark.parametrize("num_draft", [0, 3], ids=["plain", "speculative"])
def test_each_token_gets_the_reference_distribution(model, num_draft):
    engine = runtime(model, num_draft)
    # 40 tokens cross the 24-token prefill chunk
    prompts = [torch.randint(0, 256, (40,)).tolist(), torch.randint(0, 256, (13,)).tolist()]
    references = {tuple(p): reference(model, p, 12) for p in prompts}
    engine.propose = mostly_right_drafts({p: [int(r.argmax()) for r in rows] for p, rows in references.items()})
    params = SamplingParams(max_tokens=12, logprobs=TOP, ignore_eos=True)
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_work:
        engine.step()
    assert (engine.stats.accepted_tokens > 0) == (num_draft > 0)
    for seq in seqs:
        rows = references[tuple(seq.prompt_ids)]
        assert seq.output_ids == [int(r.argmax()) for r in rows]
        assert len(seq.logprobs) == len(seq.output_ids)
        for entry, row in zip(seq.logprobs, rows):
            assert entry.token == entry.top[0][0]
            assert entry.logprob == pytest.approx(row[entry.token].item(), abs=1e-4)
            top = torch.topk(row, TOP)
            assert [t for t, _ in entry.top] == top.indices.tolist()
            assert [lp for _, lp in entry.top] == pytest.approx(top.values.tolist(), abs=1e-4)


def test_no_log_probabilities_unless_asked(model):
    engine = runtime(model, 0)
    seq = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3))
    while engine.has_work:
        engine.step()
    assert seq.logprobs is None and len(seq.output_ids) == 3


def test_too_many_alternatives_are_refused():
    with pytest.raises(DayzeroError, match="logprobs must be in"):
        SamplingParams(logprobs=21)
