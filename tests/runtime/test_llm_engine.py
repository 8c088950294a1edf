"""The runtime (engine, batching, pages, slots) generates the eager reference's greedy tokens, with requests arriving
at different steps, chunked prefill and preemption; bad requests get clear errors or wait."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.errors import DayzeroError
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.generate import greedy_generate
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import layer_pattern, random_model, tiny_config_dict


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def runtime(model, num_pages: int, max_batch: int = 4, token_budget: int = 24, max_len: int = 512) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=max_batch, max_len=max_len)
    budget = (max_batch + 1) * manifest.unit_bytes(SLOT) + num_pages * manifest.unit_bytes(PAGE)
    return LLMEngine(EagerEngine(model, manifest), RuntimeOptions(token_budget=token_budget, memory_bytes=budget))


def reference_tokens(model, prompt: list[int], max_tokens: int) -> list[int]:
    return list(greedy_generate(model, prompt, max_tokens))


def prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]


def test_staggered_batch_with_chunked_prefill_and_preemption_matches_reference(model):
    # 5 pages of 64 tokens (one is the dummy): the three ~60-token prompts cross into their second page together
    # while decoding, so the newest gets preempted and later recomputed
    engine = runtime(model, num_pages=5)
    arrivals = {0: [60, 61], 1: [62], 3: [1, 30], 6: [90]}
    max_tokens = 20
    seqs, step = [], 0
    while step in arrivals or engine.has_work or step < max(arrivals):
        for prompt in prompts(arrivals.get(step, []), seed=step):
            seqs.append(engine.add_request(prompt, SamplingParams(max_tokens=max_tokens)))
        engine.step()
        step += 1
        assert step < 2000
    assert engine.stats.preemptions > 0
    assert any(seq.num_preemptions for seq in seqs)
    for seq in seqs:
        assert seq.finish_reason == "length"
        assert seq.output_ids == reference_tokens(model, seq.prompt_ids, max_tokens), seq.request_id
    assert engine.blocks.num_free == engine.blocks.num_pages - 1 and engine.states.num_free == 4


def test_more_requests_than_batch_slots_wait_their_turn(model):
    engine = runtime(model, num_pages=40, max_batch=2)
    seqs = [engine.add_request(p, SamplingParams(max_tokens=3)) for p in prompts([9, 17, 4, 30, 2])]
    while engine.has_work:
        engine.step()
        assert len(engine.scheduler.running) <= 2
    for seq in seqs:
        assert seq.output_ids == reference_tokens(model, seq.prompt_ids, 3)


def test_cancelled_request_returns_its_pages_and_slot(model):
    engine = runtime(model, num_pages=10)
    keep, drop = (engine.add_request(p, SamplingParams(max_tokens=8)) for p in prompts([20, 100]))
    engine.step()
    engine.step()
    assert engine.cancel(drop.request_id) is drop and drop.finish_reason == "cancelled"
    assert drop.pages == [] and drop.slot is None
    while engine.has_work:
        engine.step()
    assert keep.output_ids == reference_tokens(model, keep.prompt_ids, 8)
    assert engine.blocks.num_free == 9 and engine.cancel("no-such-request") is None


@pytest.mark.parametrize("prompt, max_tokens, message", [
    ([], 4, "prompt is empty"),
    ([1, True, 3], 4, "integers in \\[0, 260\\); got True"),
    ([1, 260], 4, "got 260"),
    ([-1], 4, "got -1"),
    (list(range(200)) * 3, 4, "exceeds the engine's max length"),
    (list(range(100)), 450, "exceeds the engine's max length"),
])
def test_requests_that_can_never_run_are_refused_with_the_reason(model, prompt, max_tokens, message):
    engine = runtime(model, num_pages=40)
    with pytest.raises(DayzeroError, match=message):
        engine.add_request(prompt, SamplingParams(max_tokens=max_tokens))
    assert not engine.has_work


def test_a_logit_bias_outside_the_vocabulary_is_refused_before_a_step(model):
    engine = runtime(model, num_pages=10)
    with pytest.raises(DayzeroError, match="outside the vocabulary of 260"):
        engine.add_request([1, 2], SamplingParams(logit_bias=((260, 1.0),)))
    assert not engine.has_work


def test_request_larger_than_the_whole_cache_is_refused(model):
    engine = runtime(model, num_pages=3)
    with pytest.raises(DayzeroError, match="cache pages"):
        engine.add_request(list(range(150)), SamplingParams(max_tokens=10))


def test_too_small_memory_budget_says_what_to_do(model):
    manifest = eager_manifest(model, CacheFormat(), max_batch=4)
    with pytest.raises(DayzeroError, match="give more memory"):
        LLMEngine(EagerEngine(model, manifest), RuntimeOptions(memory_bytes=manifest.unit_bytes(SLOT)))


def test_a_model_of_recurrent_layers_only_takes_long_prompts_side_by_side():
    # no layer keeps a paged cache: pages hold no bytes, and the budget pays for state slots only
    model = random_model(tiny_config_dict(num_hidden_layers=2, linear_attn_config=layer_pattern("kk")))
    manifest = eager_manifest(model, CacheFormat(), max_batch=3, max_len=400)
    assert manifest.unit_bytes(PAGE) == 0
    engine = LLMEngine(EagerEngine(model, manifest),
                       RuntimeOptions(token_budget=96, memory_bytes=4 * manifest.unit_bytes(SLOT)))
    assert engine.capacity.tokens >= 3 * 400
    ids = prompts([300, 170, 230], seed=3)
    seqs = [engine.add_request(p, SamplingParams(max_tokens=4)) for p in ids]
    while engine.has_work:
        engine.step()
    assert [s.output_ids for s in seqs] == [reference_tokens(model, p, 4) for p in ids]
