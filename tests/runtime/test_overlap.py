"""Overlap (RuntimeOptions.overlap, in_flight.py): the runtime launches decode step n + 1 before it reads step n's
tokens, and emits exactly what it emits without overlap, for greedy and seeded sampled requests, under random mixes
of arrivals mid-run, lengths, max_tokens 1, stop tokens and strings, cancellation, preemption and prefix caching;
every page and state slot comes back. The order of events shows the overlap: step n + 1 runs before step n's tokens
reach the host, and the host waits once a step."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime import transfers
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import layer_pattern, random_model, tiny_config_dict

MAX_BATCH = 4


@pytest.fixture(scope="module")
def model():
    # one KDA and one MLA layer: every cache kind, at the cost of two layers a step
    return random_model(tiny_config_dict(num_hidden_layers=2, linear_attn_config=layer_pattern("km")))


def letters(ids: list[int]) -> str:
    return "".join(chr(ord("a") + t % 26) for t in ids)


def runtime(model, overlap: bool, num_pages: int = 40, prefix_caching: bool = False,
            max_batch: int = MAX_BATCH) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=max_batch, max_len=512)
    groups = max_batch + 1 + (max_batch if prefix_caching else 0)
    budget = groups * manifest.unit_bytes(SLOT) + num_pages * manifest.unit_bytes(PAGE)
    options = RuntimeOptions(token_budget=48, memory_bytes=budget, overlap=overlap, prefix_caching=prefix_caching,
                             snapshot_every=64)
    return LLMEngine(EagerEngine(model, manifest), options, detokenize=letters)


@dataclass
class Mix:
    """Requests by the engine call they arrive before, and cancellations (request numbers) by call."""

    arrivals: dict[int, list[tuple[int, list[int], SamplingParams]]] = field(default_factory=dict)
    cancels: dict[int, list[int]] = field(default_factory=dict)


def random_mix(seed: int, sampled: bool = False, shared_prefixes: bool = False, num_requests: int = 7) -> Mix:
    rng = random.Random(seed)
    bases = [[rng.randrange(256) for _ in range(rng.randrange(64, 90))] for _ in range(2)]
    mix = Mix()
    for number in range(num_requests):
        length = rng.choice([1, 2, rng.randrange(3, 30), rng.randrange(30, 70)])
        prompt = [rng.randrange(256) for _ in range(length)]
        if shared_prefixes:
            prompt = rng.choice(bases) + prompt[: rng.randrange(1, 8)]
        kind = rng.randrange(4)
        max_tokens = rng.choice([1, 2, rng.randrange(3, 16)])
        params = SamplingParams(
            max_tokens=max_tokens,
            stop_token_ids=tuple(rng.sample(range(256), 12)) if kind == 1 else (),
            stop=("q", "xy") if kind == 2 else (),
            temperature=0.9 if sampled else 0.0, top_p=rng.choice([1.0, 0.8]) if sampled else 1.0,
            seed=rng.randrange(2**32) if sampled else None, logprobs=2 if kind == 3 else None,
            min_tokens=min(2, max_tokens) if sampled and kind == 1 else 0,
            frequency_penalty=rng.choice([0.0, 0.0, 0.7]))
        mix.arrivals.setdefault(rng.randrange(12), []).append((number, prompt, params))
        if rng.random() < 0.15:
            mix.cancels.setdefault(rng.randrange(2, 14), []).append(number)
    # one request decodes for a while from the start: the others' arrivals break into its steps
    params = SamplingParams(max_tokens=14, temperature=0.9 if sampled else 0.0, seed=seed)
    mix.arrivals.setdefault(0, []).append((num_requests, [rng.randrange(256) for _ in range(9)], params))
    return mix


def serve(engine: LLMEngine, mix: Mix) -> dict[int, Sequence]:
    seqs, call = {}, 0
    while call <= max([*mix.arrivals, *mix.cancels]) or engine.has_work:
        for number, prompt, params in mix.arrivals.get(call, []):
            seqs[number] = engine.add_request(prompt, params, f"r{number}")
        for number in mix.cancels.get(call, []):
            engine.cancel(f"r{number}")
        engine.step()
        call += 1
        assert call < 500
    return seqs


def assert_same_outputs(synced: dict[int, Sequence], overlapped: dict[int, Sequence]) -> None:
    for number, seq in synced.items():
        other = overlapped[number]
        if "cancelled" in (seq.finish_reason, other.finish_reason):
            # cancelled at different points: both are starts of the same answer
            shorter, longer = sorted((seq.output_ids, other.output_ids), key=len)
            assert longer[: len(shorter)] == shorter, number
            continue
        assert (other.output_ids, other.finish_reason) == (seq.output_ids, seq.finish_reason), number
        # the batches a request shares differ (arrivals land at other steps): its logits differ by float rounding
        for a, b in zip(other.logprobs or [], seq.logprobs or [], strict=True):
            assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-4), number
            assert [t for t, _ in a.top] == [t for t, _ in b.top], number


def assert_all_returned(engine: LLMEngine) -> None:
    if engine.prefix_cache:
        while engine.prefix_cache.evict_one():
            pass
    assert engine.blocks.num_free == engine.blocks.num_pages - 1
    assert engine.states.num_free == engine.states.num_groups - 1
    assert not engine.scheduler.running and not engine.scheduler.waiting


def compare(model, mix: Mix, **options) -> LLMEngine:
    synced, overlapped = runtime(model, False, **options), runtime(model, True, **options)
    assert_same_outputs(serve(synced, mix), serve(overlapped, mix))
    assert synced.stats.overlapped == 0 and overlapped.stats.overlapped > 0
    for engine in (synced, overlapped):
        assert_all_returned(engine)
    return overlapped


@pytest.mark.parametrize("seed", range(3))
def test_greedy_outputs_are_those_without_overlap(model, seed):
    compare(model, random_mix(seed))


@pytest.mark.parametrize("seed", range(2))
def test_seeded_sampled_outputs_are_those_without_overlap(model, seed):
    compare(model, random_mix(100 + seed, sampled=True))


def test_a_batch_of_mixed_requests_matches(model):
    # greedy and seeded rows, penalties and logprobs side by side: each row's next input is its own token
    mix = Mix()
    for number in range(11):
        params = SamplingParams(max_tokens=10, temperature=0.8 if number % 2 else 0.0, seed=number,
                                presence_penalty=0.5 if number % 3 else 0.0, logprobs=1 if number % 4 else None)
        mix.arrivals.setdefault(0, []).append((number, [number, 3, number + 1], params))
    overlapped = compare(model, mix, max_batch=12)
    assert overlapped.stats.overlapped >= 8


def test_preemption_under_a_small_cache_matches(model):
    # 4 pages of 64 tokens beside the dummy: the batch outgrows them while decoding
    mix = random_mix(7, num_requests=3)
    for number, prompt, params in [(20, [5] * 60, SamplingParams(max_tokens=20)),
                                   (21, [6] * 62, SamplingParams(max_tokens=20))]:
        mix.arrivals.setdefault(0, []).append((number, prompt, params))
    overlapped = compare(model, mix, num_pages=5)
    assert overlapped.stats.preemptions > 0


def test_prefix_caching_matches(model):
    overlapped = compare(model, random_mix(11, shared_prefixes=True), prefix_caching=True)
    assert overlapped.prefix_cache.hit_tokens > 0


def test_a_decode_snapshot_taken_in_flight_holds_the_state_of_its_tokens(model):
    """A 60-token prompt's answer crosses its first page boundary while decoding: the snapshot there, copied while
    the token it covers was still on the device, serves a follow-up prompt (the conversation so far) exactly."""
    engine = runtime(model, True, prefix_caching=True)
    first = engine.add_request([7] * 60, SamplingParams(max_tokens=12))
    while engine.has_work:
        engine.step()
    follow_up = first.prompt_ids + first.output_ids[:8]
    seq = engine.add_request(follow_up, SamplingParams(max_tokens=6))
    while engine.has_work:
        engine.step()
    assert engine.stats.overlapped > 0 and engine.prefix_cache.hit_tokens == 64
    reference = runtime(model, False)
    alone = reference.add_request(follow_up, SamplingParams(max_tokens=6))
    while reference.has_work:
        reference.step()
    assert seq.output_ids == alone.output_ids
    assert_all_returned(engine)


class Recorder:
    """The order of a runtime's decode launches and of its reads of tokens on the host."""

    def __init__(self, engine: LLMEngine, monkeypatch):
        self.events: list[str] = []
        decode = engine.decode

        def recorded_decode(input_ids, meta):
            self.events.append("decode")
            return decode(input_ids, meta)

        wait = transfers.Download.wait

        def recorded_wait(download):
            self.events.append("read")
            return wait(download)

        engine.decode = recorded_decode
        monkeypatch.setattr(transfers.Download, "wait", recorded_wait)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_next_step_runs_before_the_host_reads_the_tokens(model, monkeypatch, overlap):
    engine = runtime(model, overlap)
    recorder = Recorder(engine, monkeypatch)
    seq = engine.add_request([3, 1, 4, 1, 5], SamplingParams(max_tokens=5))
    calls = []
    while engine.has_work:
        recorder.events.append("|")
        engine.step()
        calls.append(len(seq.output_ids))
    events = " ".join(recorder.events)
    # the prefill reads its token; then each decode step runs, and, overlapped, is launched before the host reads
    # the previous step's token (the last call launches nothing: max_tokens is reached)
    if overlap:
        assert events == "| read | decode | decode read | decode read | decode read | read"
        assert calls == [1, 1, 2, 3, 4, 5]
    else:
        assert events == "| read | decode read | decode read | decode read | decode read"
        assert calls == [1, 2, 3, 4, 5]


def test_a_sequence_stopped_in_flight_runs_one_dropped_step(model):
    engine = runtime(model, True)
    plain = engine.add_request([9, 8, 7], SamplingParams(max_tokens=6))
    while engine.has_work:
        engine.step()
    stop = plain.output_ids[2]
    engine = runtime(model, True)
    seq = engine.add_request([9, 8, 7], SamplingParams(max_tokens=6, stop_token_ids=(stop,)))
    steps = 0
    while engine.has_work:
        engine.step()
        steps += 1
    first = plain.output_ids.index(stop)
    assert seq.output_ids == plain.output_ids[: first + 1] and seq.finish_reason == "stop"
    # prefill, the decode steps up to the stop token, and the one launched before it was read
    assert engine.stats.steps == 1 + first + (first > 0)
    assert_all_returned(engine)


def test_penalties_count_the_tokens_still_on_the_device(model):
    """Counting penalties see each step's token before the host reads it (counted from the step's token tensor)."""
    mix = Mix()
    for number, params in enumerate([SamplingParams(max_tokens=12, presence_penalty=1.5),
                                     SamplingParams(max_tokens=12, frequency_penalty=2.0, repetition_penalty=1.3),
                                     SamplingParams(max_tokens=12, repetition_penalty=2.0, temperature=0.8, seed=5),
                                     SamplingParams(max_tokens=12)]):
        mix.arrivals.setdefault(number // 2, []).append((number, [4, 4, 4, 9, number], params))
    overlapped = compare(model, mix)
    assert overlapped.stats.overlapped >= 8


def test_a_json_answer_keeps_its_steps_synchronous(model):
    answers = []
    for overlap in (False, True):
        engine = runtime(model, overlap)
        engine.token_bytes = ByteTokenizer().token_bytes
        closing = tuple((ord(c), 4.0) for c in '"}')
        seq = engine.add_request([256, *b"JSON:"], SamplingParams(max_tokens=40, logit_bias=closing,
                                                                  response_format="json_object"))
        while engine.has_work:
            engine.step()
        assert engine.stats.overlapped == 0
        answers.append((seq.output_ids, seq.finish_reason))
    assert answers[0] == answers[1]


def test_a_cancelled_request_in_flight_drops_its_token(model):
    engine = runtime(model, True)
    keep = engine.add_request([2, 7, 1, 8], SamplingParams(max_tokens=8))
    drop = engine.add_request([2, 8, 1, 8], SamplingParams(max_tokens=8))
    while len(drop.output_ids) < 2:
        engine.step()
    assert drop.num_pending == 1
    emitted = list(drop.output_ids)
    engine.cancel(drop.request_id)
    assert drop.pages == [] and drop.slot is None
    while engine.has_work:
        engine.step()
    assert drop.output_ids == emitted and drop.finish_reason == "cancelled"
    reference = runtime(model, False)
    alone = reference.add_request([2, 7, 1, 8], SamplingParams(max_tokens=8))
    while reference.has_work:
        reference.step()
    assert keep.output_ids == alone.output_ids
    assert_all_returned(engine)


def cuda_runtime(overlap: bool, cuda_graphs: bool = True) -> LLMEngine:
    model = random_model(tiny_config_dict(num_hidden_layers=2, linear_attn_config=layer_pattern("km"))).to("cuda")
    manifest = eager_manifest(model, CacheFormat(), max_batch=MAX_BATCH, max_len=512)
    options = RuntimeOptions(memory_bytes=64 << 20, overlap=overlap, cuda_graphs=cuda_graphs)
    return LLMEngine(EagerEngine(model, manifest), options, detokenize=letters)


@pytest.mark.gpu
def test_greedy_and_seeded_outputs_with_cuda_graphs_are_those_without_overlap():
    for mix in (random_mix(3), random_mix(103, sampled=True)):
        synced, overlapped = cuda_runtime(False), cuda_runtime(True)
        assert_same_outputs(serve(synced, mix), serve(overlapped, mix))
        assert overlapped.stats.overlapped > 0
        assert_all_returned(overlapped)


@pytest.mark.gpu
@pytest.mark.parametrize("smallest_table", [1, 2])
def test_cuda_graph_outputs_are_the_eager_ones_while_page_tables_widen_and_narrow(monkeypatch, smallest_table):
    """Each step fills as many columns of its graph's page table as its batch needs (1-2 pages here, the longest
    requests finishing before the others): with width buckets of 1, 4, 8 pages the steps cross buckets, with 2, 8 a
    narrower step follows a wider one in the same graph."""
    from dayzero.runtime import graphs

    monkeypatch.setattr(graphs, "SMALLEST_TABLE_PAGES", smallest_table)
    mix = random_mix(5)
    eager, graphed = cuda_runtime(False, cuda_graphs=False), cuda_runtime(False)
    assert_same_outputs(serve(eager, mix), serve(graphed, mix))
    assert graphed.decode.graphs


@pytest.mark.gpu
def test_an_overlapped_step_waits_for_the_device_once(monkeypatch):
    """In a steady overlapped run no call synchronizes with the device implicitly (torch's sync debug mode raises on
    any: a blocking copy, a .item(), a stream sync); the one wait a step is the event of the tokens' copy."""
    engine = cuda_runtime(True)
    for number, params in enumerate([SamplingParams(), SamplingParams(temperature=1.0, top_p=0.9, seed=1),
                                     SamplingParams(presence_penalty=0.5, logprobs=3), SamplingParams(min_tokens=3)]):
        engine.add_request([5, 6, 7, number], dataclasses.replace(params, max_tokens=30, ignore_eos=True))
    while engine.stats.overlapped < 3:
        engine.step()
    recorder = Recorder(engine, monkeypatch)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(8):
            engine.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert " ".join(recorder.events) == " ".join(["decode read"] * 8)
