"""Speculative decoding in the runtime: greedy tokens with drafts equal greedy tokens without them (and the eager
reference) through chunked prefill, preemption and every rollback depth; stops and max_tokens cut an accepted run
exactly; seeded sampling emits the same tokens with drafts as without; the n-gram proposer and the acceptance rule;
pages and state slots all come back."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.contract import PAGE, SLOT, StepMeta
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.generate import greedy_generate
from dayzero.runtime.batch_sampler import BatchSampler
from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.graphs import pad_decode_inputs
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.scheduler import Scheduler
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.spec_decode import NgramProposer, accepted_run
from dayzero.runtime.state_pool import StatePool
from tests.helpers import random_model, tiny_config_dict
from tests.runtime.test_scheduler_properties import check_ownership

MAX_TOKENS = 20


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def runtime(model, num_pages: int, num_draft: int, max_batch: int = 4, token_budget: int = 24,
            detokenize=None) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=max_batch, max_len=512, num_draft=num_draft)
    budget = (max_batch + 1) * (1 + num_draft) * manifest.unit_bytes(SLOT) + num_pages * manifest.unit_bytes(PAGE)
    return LLMEngine(EagerEngine(model, manifest), RuntimeOptions(token_budget=token_budget, memory_bytes=budget),
                     detokenize)


@functools.cache
def _reference(model, prompt: tuple[int, ...], max_tokens: int) -> tuple[int, ...]:
    return tuple(greedy_generate(model, list(prompt), max_tokens))


def reference_tokens(model, prompt: list[int], max_tokens: int = MAX_TOKENS) -> list[int]:
    return list(_reference(model, tuple(prompt), max_tokens))


class OracleProposer:
    """Drafts from the reference continuation, right for a varying number of tokens and then wrong, so every
    rollback depth 0..d (and full acceptance) happens."""

    def __init__(self, model, prompts: list[list[int]], always_right: bool = False):
        self.model, self.prompts, self.always_right = model, prompts, always_right

    def __call__(self, token_ids: list[int], num_draft: int) -> list[int]:
        prompt = next(p for p in self.prompts if token_ids[: len(p)] == p)
        future = reference_tokens(self.model, prompt)[len(token_ids) - len(prompt) :][:num_draft]
        num_right = num_draft if self.always_right else len(token_ids) % (num_draft + 1)
        return future[:num_right] + [(t + 1) % 256 for t in future[num_right:]]


# (kind, length, seed): the tiny random model seldom repeats itself; these repeat prompts are ones where it does
ARRIVALS = {0: [("repeat", 60, 4), ("random", 61, 0)], 1: [("repeat", 62, 1)], 3: [("random", 1, 3), ("repeat", 30, 0)],
            6: [("random", 90, 6)]}


def make_prompt(kind: str, length: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.randint(0, 256, (length,), generator=gen).tolist()
    ngram = torch.randint(0, 256, (5,), generator=gen).tolist()
    return (ngram * length)[:length]


def all_prompts() -> list[list[int]]:
    return [make_prompt(*request) for requests in ARRIVALS.values() for request in requests]


def run_staggered(model, num_draft: int, proposer=None) -> tuple[LLMEngine, list[Sequence]]:
    # 5 pages of 64 tokens (one is the dummy): the ~60-token prompts cross into their second page together while
    # decoding, so the newest gets preempted and later recomputed
    engine = runtime(model, num_pages=5, num_draft=num_draft)
    if proposer is not None:
        engine.propose = proposer
    seqs, step = [], 0
    while step in ARRIVALS or engine.has_work or step < max(ARRIVALS):
        for request in ARRIVALS.get(step, []):
            seqs.append(engine.add_request(make_prompt(*request), SamplingParams(max_tokens=MAX_TOKENS)))
        engine.step()
        step += 1
        assert step < 2000
    return engine, seqs


def assert_everything_returned(engine: LLMEngine) -> None:
    assert engine.blocks.num_free == engine.blocks.num_pages - 1 and not engine.blocks.owner
    assert engine.states.num_free == engine.states.capacity_sequences and not engine.states.owner


@pytest.fixture(scope="module")
def without_drafts(model):
    engine, seqs = run_staggered(model, num_draft=0)
    assert engine.stats.preemptions > 0 and engine.stats.drafted_tokens == 0
    return engine, [seq.output_ids for seq in seqs]


@pytest.mark.parametrize("num_draft", [1, 3], ids=["d1", "d3"])
@pytest.mark.parametrize("drafter", ["ngram", "oracle"])
def test_greedy_tokens_with_drafts_equal_tokens_without_and_the_reference(model, without_drafts, num_draft, drafter):
    proposer = OracleProposer(model, all_prompts()) if drafter == "oracle" else None
    engine, seqs = run_staggered(model, num_draft, proposer)
    assert engine.stats.preemptions > 0 and any(seq.num_preemptions for seq in seqs)
    assert engine.stats.drafted_tokens > 0 and 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
    for seq, plain in zip(seqs, without_drafts[1]):
        assert seq.finish_reason == "length"
        assert seq.output_ids == plain == reference_tokens(model, seq.prompt_ids), seq.request_id
    assert_everything_returned(engine)


def test_accepted_runs_take_fewer_steps(model, without_drafts):
    plain, _ = without_drafts
    fast, _ = run_staggered(model, num_draft=3, proposer=OracleProposer(model, all_prompts(), always_right=True))
    assert fast.stats.acceptance_rate == 1.0 and fast.stats.steps < plain.stats.steps


def finish_with(model, prompt: list[int], params: SamplingParams, detokenize=None) -> tuple[Sequence, LLMEngine]:
    engine = runtime(model, num_pages=8, num_draft=3, detokenize=detokenize)
    engine.propose = OracleProposer(model, [prompt], always_right=True)
    seq = engine.add_request(prompt, params)
    while engine.has_work:
        engine.step()
    assert_everything_returned(engine)
    return seq, engine


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 6, 7, 9])
def test_max_tokens_inside_an_accepted_run_is_exact(model, max_tokens):
    prompt = make_prompt("random", 12, seed=1)
    seq, engine = finish_with(model, prompt, SamplingParams(max_tokens=max_tokens))
    assert seq.output_ids == reference_tokens(model, prompt)[:max_tokens] and seq.finish_reason == "length"
    # drafts past max_tokens are not even verified: every verified (right) draft was emitted
    assert engine.stats.accepted_tokens == engine.stats.drafted_tokens and engine.stats.decode_tokens == max_tokens - 1
    assert engine.stats.steps == 1 + -(-(max_tokens - 1) // 4)


def test_rejection_sampling_of_a_point_mass_reproduces_greedy_tokens(model):
    # top_k = 1 leaves all probability on the argmax: right drafts are always accepted, wrong ones always rejected
    prompt = make_prompt("random", 12, seed=4)
    engine = runtime(model, num_pages=8, num_draft=3)
    engine.propose = OracleProposer(model, [prompt])
    seq = engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, top_k=1, seed=0))
    while engine.has_work:
        engine.step()
    assert seq.output_ids == reference_tokens(model, prompt)
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
    assert_everything_returned(engine)


def test_seeded_sampling_with_drafts_emits_the_tokens_of_sampling_without(model):
    """Acceptance keeps a draft where it equals the token sampled at its position, and draws depend only on (seed,
    position): drafts that are right for a while and then wrong change no token."""
    prompts = [make_prompt("random", 12, seed=5), make_prompt("repeat", 30, seed=0)]
    params = [SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, top_p=0.9, seed=seed) for seed in (11, 12)]
    plain = runtime(model, num_pages=8, num_draft=0)
    expected = [plain.add_request(p, q) for p, q in zip(prompts, params)]
    while plain.has_work:
        plain.step()
    futures = {tuple(seq.prompt_ids): seq.output_ids for seq in expected}

    def propose(token_ids: list[int], num_draft: int) -> list[int]:
        prompt = next(p for p in futures if tuple(token_ids[: len(p)]) == p)
        future = futures[prompt][len(token_ids) - len(prompt):][:num_draft]
        num_right = len(token_ids) % (num_draft + 1)
        return future[:num_right] + [(t + 1) % 256 for t in future[num_right:]]

    engine = runtime(model, num_pages=8, num_draft=3)
    engine.propose = propose
    seqs = [engine.add_request(p, q) for p, q in zip(prompts, params)]
    while engine.has_work:
        engine.step()
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
    assert [seq.output_ids for seq in seqs] == [seq.output_ids for seq in expected]
    assert_everything_returned(engine)


def first_repeat_free_index(tokens: list[int], start: int) -> int:
    """An index >= start whose token does not occur earlier (so stopping on it stops exactly there)."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


@pytest.mark.parametrize("position", [3, 6])
def test_stop_token_inside_an_accepted_run_truncates_after_it(model, position):
    prompt = make_prompt("random", 12, seed=2)
    expected = reference_tokens(model, prompt)
    stop_at = first_repeat_free_index(expected, position)
    params = SamplingParams(max_tokens=MAX_TOKENS, stop_token_ids=(expected[stop_at],))
    seq, engine = finish_with(model, prompt, params)
    assert engine.stats.accepted_tokens > 0
    assert seq.output_ids == expected[: stop_at + 1] and seq.finish_reason == "stop"


def test_stop_string_inside_an_accepted_run_truncates_after_it(model):
    prompt = make_prompt("random", 12, seed=3)
    expected = reference_tokens(model, prompt)
    stop_at = first_repeat_free_index(expected, 4)
    detokenize = lambda ids: "".join(chr(0x100 + t) for t in ids)  # noqa: E731
    params = SamplingParams(max_tokens=MAX_TOKENS, stop=chr(0x100 + expected[stop_at]))
    seq, _ = finish_with(model, prompt, params, detokenize)
    assert seq.output_ids == expected[: stop_at + 1] and seq.finish_reason == "stop"


@pytest.mark.parametrize("tokens, num_draft, expected", [
    ([1, 2, 3, 9, 1, 2, 3], 3, [9, 1, 2]),
    ([1, 2, 3, 9, 5, 2, 3, 7, 2, 3], 2, [7, 2]),  # the most recent match of the longest tail n-gram
    ([4, 8, 1, 5, 8, 2, 4, 8], 2, [1, 5]),  # a 2-gram match beats a more recent 1-gram one
    ([7, 7, 7], 4, [7, 7, 7, 7]),  # a match next to the tail repeats as a cycle
    ([3, 1, 2, 3], 5, [1, 2, 3, 1, 2]),
    ([1, 2, 3, 4], 3, []),
    ([5], 3, []),
    ([1, 1], 0, []),
])
def test_ngram_proposer_continues_the_last_match_of_the_longest_tail(tokens, num_draft, expected):
    assert NgramProposer(max_ngram=3)(tokens, num_draft) == expected


def one_hot_rows(argmaxes: list[int], vocab: int = 10) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(argmaxes), vocab).float()


def verified(logits: torch.Tensor, drafts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    """logits [B, width, vocab] of one verify step -> each sequence's emitted run (sequence b seeded b)."""
    seqs = [Sequence([0], params, seed=seed) for seed in range(len(drafts))]
    outs = BatchSampler(logits.shape[-1])(logits, seqs, drafts)
    return [accepted_run(out.tokens, draft) for out, draft in zip(outs, drafts)]


@pytest.mark.parametrize("argmaxes, drafts, expected", [
    ([4, 5, 6, 7], [4, 5, 6], [4, 5, 6, 7]),
    ([4, 5, 6, 7], [4, 9, 6], [4, 5]),
    ([4, 5, 6, 7], [1, 5, 6], [4]),
    ([4], [], [4]),
])
def test_greedy_acceptance_keeps_the_agreeing_prefix_and_the_next_argmax(argmaxes, drafts, expected):
    assert verified(one_hot_rows(argmaxes)[None], [drafts], SamplingParams()) == [expected]


def test_random_acceptance_keeps_the_sampling_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    runs = verified(probs.log().expand(4000, 3, 4), [[1, 1]] * 4000, SamplingParams(temperature=1.0))
    counts = torch.bincount(torch.tensor([run[0] for run in runs]), minlength=4).float()
    lengths = [len(run) for run in runs]
    assert (counts / counts.sum() - probs).abs().max() < 0.03
    # P(accept a draft) = p(1) = 0.3: runs of length 1, 2, 3 have probability 0.7, 0.21, 0.09
    assert abs(lengths.count(1) / 4000 - 0.7) < 0.03 and abs(lengths.count(3) / 4000 - 0.09) < 0.02


def test_random_acceptance_never_keeps_a_draft_outside_top_k():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]] * 2).expand(200, 2, 4)
    assert all(len(run) == 1 for run in verified(logits, [[3]] * 200, SamplingParams(temperature=1.0, top_k=2)))


def test_padded_verify_rows_write_only_to_the_dummy_page_and_slots():
    meta = StepMeta(positions=torch.arange(6), cu_seqlens=torch.tensor([0, 3, 6], dtype=torch.int32),
                    block_table=torch.tensor([[3], [4]], dtype=torch.int32), slot_mapping=torch.arange(6) + 192,
                    state_slots=torch.tensor([[3, 4, 5], [6, 7, 8]], dtype=torch.int32),
                    num_accepted=torch.tensor([2, 3], dtype=torch.int32))
    ids, padded = pad_decode_inputs(torch.arange(6).view(2, 3), meta, 4)
    assert ids.shape == (4, 3) and padded.cu_seqlens.tolist() == [0, 3, 6, 9, 12]
    assert padded.slot_mapping.tolist() == [*range(192, 198), *[-1] * 6] and padded.positions.shape == (12,)
    assert padded.state_slots[2:].eq(0).all() and padded.num_accepted.tolist() == [2, 3, 1, 1]


requests = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 20), st.integers(0, 30)), min_size=1, max_size=10)


@settings(max_examples=40, deadline=None)
@given(requests, st.integers(4, 16), st.integers(1, 4), st.integers(1, 40), st.integers(1, 3), st.randoms())
def test_random_streams_with_drafts_keep_ownership_exact(reqs, num_pages, max_batch, token_budget, num_draft, rng):
    page = 8
    blocks = BlockManager(num_pages, page)
    states = StatePool((max_batch + 1) * (1 + num_draft), 1 + num_draft, [torch.zeros((max_batch + 1) * 4, 2)])
    scheduler = Scheduler(blocks, states, max_batch, token_budget, max_len=200, num_draft=num_draft)
    pending, live = sorted(reqs, key=lambda r: r[2]), []
    for step_no in range(5000):
        while pending and pending[0][2] <= step_no:
            length, max_tokens, _ = pending.pop(0)
            seq = Sequence(list(range(length)), SamplingParams(max_tokens=max_tokens))
            if blocks.pages_for(length + max_tokens) < num_pages:
                scheduler.add(seq)
                live.append(seq)
        step = scheduler.schedule()
        if step is not None:
            advance_with_drafts(step, rng, scheduler, page)
        check_ownership(blocks, states, [s for s in live if not s.is_done])
        if not pending and not scheduler.has_work:
            break
    assert all(len(s.output_ids) == s.params.max_tokens for s in live)
    assert blocks.num_free == num_pages - 1 and states.num_free == max_batch


def advance_with_drafts(step, rng, scheduler: Scheduler, page: int) -> None:
    """The engine's bookkeeping with a made-up acceptance: 1..num_new tokens of a verify step stay."""
    for seq, count in zip(step.seqs, step.num_new):
        if step.decode:
            assert len(seq.pages) * page >= seq.num_cached + count
            emitted = rng.randint(1, count)
            seq.num_cached += emitted
            seq.num_accepted = emitted
            seq.output_ids += [0] * emitted
        else:
            seq.num_cached += count
            seq.output_ids += [] if seq.num_uncached else [0]
        if len(seq.output_ids) >= seq.params.max_tokens:
            assert len(seq.output_ids) == seq.params.max_tokens
            scheduler.release(seq, Status.FINISHED, "length")
