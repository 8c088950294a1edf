"""Prefix caching (prefix_cache.py): requests that share a prefix with earlier ones reuse its pages and KDA state
snapshot and still generate the eager reference's greedy tokens; pages and state groups all come back; cached
prefixes are evicted, least recently used first, when a running request needs their room."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.contract import PAGE, SLOT
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.prefix_cache import PrefixCache, page_keys
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence
from dayzero.runtime.state_pool import StatePool
from tests.helpers import random_model, tiny_config_dict
from tests.runtime.test_llm_engine import reference_tokens


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def runtime(model, num_pages: int, max_batch: int = 4, token_budget: int = 96, snapshot_every: int = 128,
            prefix_caching: bool = True, num_draft: int = 0) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=max_batch, max_len=1024, num_draft=num_draft)
    # slot groups: the batch's, the dummy and (with caching) one snapshot group a sequence of the batch
    groups = max_batch + 1 + (max_batch if prefix_caching else 0)
    budget = groups * (1 + num_draft) * manifest.unit_bytes(SLOT) + num_pages * manifest.unit_bytes(PAGE)
    options = RuntimeOptions(token_budget=token_budget, memory_bytes=budget, prefix_caching=prefix_caching,
                             snapshot_every=snapshot_every)
    return LLMEngine(EagerEngine(model, manifest), options)


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run(engine: LLMEngine, prompts: list[list[int]], max_tokens: int, together: bool = False) -> list[list[int]]:
    """Each prompt after the previous one finished (or all at once)."""
    seqs = []
    for prompt in prompts:
        seqs.append(engine.add_request(prompt, SamplingParams(max_tokens=max_tokens)))
        while engine.has_work and not together:
            engine.step()
    while engine.has_work:
        engine.step()
    return [seq.output_ids for seq in seqs]


def assert_all_returned(engine: LLMEngine) -> None:
    """Nothing but cached prefixes holds pages or groups, and evicting them frees everything."""
    assert not engine.blocks.owner and not engine.states.owner
    while engine.prefix_cache.evict_one():
        pass
    assert engine.blocks.num_free == engine.blocks.num_pages - 1 and not engine.blocks.cached
    assert engine.states.num_free == engine.states.capacity_sequences and engine.states.num_spare_held == 0


def test_a_repeated_prompt_reuses_all_its_full_pages_but_the_last(model):
    prompt = tokens(200, 1)  # snapshots at 128 (every) and at 192 (the last full page before token 199)
    engine = runtime(model, num_pages=40)
    first, second = run(engine, [prompt, prompt], max_tokens=6)
    assert engine.prefix_cache.hit_tokens == 192
    assert engine.capacity.snapshot_groups == 4 and "(+ 4 prefix snapshots)" in engine.capacity.describe()
    assert first == second == reference_tokens(model, prompt, 6)
    assert engine.stats.prefill_tokens == 200 + 8
    assert_all_returned(engine)


@pytest.mark.parametrize("num_draft", [0, 2])
def test_a_hit_that_leaves_one_token_decodes_it(model, num_draft):
    """129 tokens: the first 128 come from the cache, and the last one runs as a decode (verify) row."""
    prompt = tokens(129, 7)
    engine = runtime(model, num_pages=40, num_draft=num_draft)
    first, second = run(engine, [prompt, prompt], max_tokens=7)
    assert engine.prefix_cache.hit_tokens == 128
    assert first == second == reference_tokens(model, prompt, 7)
    assert_all_returned(engine)


@pytest.mark.parametrize("num_draft", [0, 2])
def test_a_chat_turn_reuses_the_previous_answer(model, num_draft):
    """Turn 1: 100 prompt tokens and 40 answered, which crosses the page boundary at 128 while decoding. Turn 2
    repeats both and adds 10: it starts from the decode snapshot at 128, not the prompt's at 64."""
    engine = runtime(model, num_pages=40, num_draft=num_draft)
    turn1 = tokens(100, 8)
    answer = run(engine, [turn1], max_tokens=40)[0]
    turn2 = turn1 + answer + tokens(10, 9)
    assert run(engine, [turn2], max_tokens=5)[0] == reference_tokens(model, turn2, 5)
    assert engine.prefix_cache.hit_tokens == 128
    assert answer == reference_tokens(model, turn1, 40)
    assert_all_returned(engine)


def test_a_verify_step_across_a_boundary_snapshots_the_slot_of_the_token_that_reached_it():
    """Verify inputs t = 0..3 from 126 cached tokens, all accepted: input 1 brought the sequence to 128 tokens, so
    slot 1 of its group is the snapshot."""
    blocks, state = BlockManager(num_pages=8, page_size=64), torch.zeros(3 * 4, 2)
    states = StatePool(num_slots=12, slots_per_seq=4, slot_tensors=[state])
    cache = PrefixCache(blocks, states, snapshot_every=1024)
    seq = Sequence(tokens(126, 12), SamplingParams(max_tokens=8))
    states.allocate(seq)
    blocks.grow(seq, 130)
    seq.num_cached, seq.output_ids = 130, tokens(4, 13)
    state[:] = torch.arange(12.0)[:, None]  # slot s holds s
    cache.remember_decoded(seq, before=126)
    (prefix,) = cache.prefixes.values()
    assert prefix.length == 128 and prefix.pages == seq.pages[:2]
    assert state[states.first_slot(prefix.group)].tolist() == [states.first_slot(seq.slot) + 1.0] * 2


def test_a_decoding_sequence_keeps_only_its_latest_boundary(model):
    engine = runtime(model, num_pages=40)
    run(engine, [tokens(70, 11)], max_tokens=130)  # decodes across 128 and 192
    assert sorted(p.length for p in engine.prefix_cache.prefixes.values()) == [64, 192]
    assert not engine.prefix_cache.decoding
    assert_all_returned(engine)


def test_a_shared_system_prompt_is_prefilled_once(model):
    system = tokens(300, 2)
    prompts = [system + tokens(n, 10 + n) for n in (5, 40, 77)]
    engine = runtime(model, num_pages=40)
    got = run(engine, prompts, max_tokens=5)
    assert engine.prefix_cache.hit_tokens == 2 * 256  # snapshots at 128 and 256 lie inside the system prompt
    for prompt, out in zip(prompts, got):
        assert out == reference_tokens(model, prompt, 5)
    assert_all_returned(engine)


def test_identical_prompts_sent_together_prefill_once(model):
    """n choices of one prompt: the first prefills it, the others wait for its snapshot and prefill only what
    follows its last full page."""
    prompt = tokens(150, 14)
    engine = runtime(model, num_pages=40)
    seqs = [engine.add_request(prompt, SamplingParams(max_tokens=4, temperature=1.0, seed=seed)) for seed in (1, 2, 3)]
    while engine.has_work:
        engine.step()
    assert engine.prefix_cache.hit_tokens == 2 * 128
    assert engine.stats.prefill_tokens == 150 + 2 * (150 - 128)
    alone = runtime(model, num_pages=40, prefix_caching=False)
    expected = [alone.add_request(prompt, SamplingParams(max_tokens=4, temperature=1.0, seed=seed))
                for seed in (1, 2, 3)]
    while alone.has_work:
        alone.step()
    assert [s.output_ids for s in seqs] == [s.output_ids for s in expected]
    assert_all_returned(engine)


def test_only_a_twin_that_will_snapshot_the_same_prefix_holds_a_request_back(model):
    engine = runtime(model, num_pages=40, token_budget=64, snapshot_every=1024)
    long = tokens(300, 15)  # snapshots at its last full page, 256, only
    twin = engine.add_request(long, SamplingParams(max_tokens=2))
    engine.step()
    cousin = engine.add_request(long[:150], SamplingParams(max_tokens=2))  # would reuse 128: no snapshot there
    same = engine.add_request(long, SamplingParams(max_tokens=2))
    engine.step()
    running = engine.scheduler.running
    assert twin in running and cousin in running and same not in running
    while engine.has_work:
        engine.step()
    assert engine.prefix_cache.hit_tokens == 256
    expected = [reference_tokens(model, p, 2) for p in (long, long[:150], long)]
    assert [s.output_ids for s in (twin, cousin, same)] == expected


def test_cancelling_requests_that_share_pages_keeps_the_others_whole(model):
    system = tokens(200, 16)
    engine = runtime(model, num_pages=40)
    run(engine, [system + [7]], max_tokens=2)
    seqs = [engine.add_request(system + tokens(n, n), SamplingParams(max_tokens=6)) for n in (3, 4, 5)]
    engine.step()
    shared = set(seqs[0].pages) & set(seqs[1].pages) & set(seqs[2].pages)
    assert len(shared) == 3  # the cached prefix's three full pages
    assert engine.cancel(seqs[1].request_id) is seqs[1] and seqs[1].pages == []
    assert all(engine.blocks.owner[page] == 2 for page in shared)
    while engine.has_work:
        engine.step()
    for seq in (seqs[0], seqs[2]):
        assert seq.output_ids == reference_tokens(model, seq.prompt_ids, 6)
    assert_all_returned(engine)


def test_requests_running_together_share_the_pages_of_a_cached_prefix(model):
    system = tokens(260, 3)
    engine = runtime(model, num_pages=40)
    run(engine, [system + [1, 2, 3]], max_tokens=2)
    prompts = [system + tokens(n, n) for n in (9, 20, 33)]
    got = run(engine, prompts, max_tokens=4, together=True)
    assert engine.prefix_cache.hit_tokens == 256 * 3
    for prompt, out in zip(prompts, got):
        assert out == reference_tokens(model, prompt, 4)
    assert_all_returned(engine)


def test_cached_prefixes_give_way_to_running_requests(model):
    # 9 pages (one the dummy): a 420-token request needs 7 of the 8 and evicts the prefixes the others left
    engine = runtime(model, num_pages=9, max_batch=2)
    prompts = [tokens(300, 4), tokens(290, 5), tokens(420, 6)]
    got = run(engine, prompts, max_tokens=3)
    for prompt, out in zip(prompts, got):
        assert out == reference_tokens(model, prompt, 3)
    assert engine.stats.preemptions == 0
    assert_all_returned(engine)


def test_without_prefix_caching_nothing_is_kept(model):
    engine = runtime(model, num_pages=40, prefix_caching=False)
    assert engine.capacity.snapshot_groups == 0
    prompt = tokens(200, 1)
    assert run(engine, [prompt, prompt], max_tokens=3)[1] == reference_tokens(model, prompt, 3)
    assert engine.prefix_cache is None and engine.stats.prefill_tokens == 400
    assert engine.blocks.num_free == engine.blocks.num_pages - 1


def test_a_budget_that_holds_no_pages_beside_the_snapshots_says_so(model):
    from dayzero.errors import DayzeroError

    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=256)
    budget = 6 * manifest.unit_bytes(SLOT)  # the batch's and the dummy's state, no room for 4 snapshot groups
    with pytest.raises(DayzeroError, match="4 sequences and 4 prefix snapshots .* but no cache pages"):
        LLMEngine(EagerEngine(model, manifest), RuntimeOptions(memory_bytes=budget, prefix_caching=True))


def test_page_keys_name_the_whole_prefix():
    a, b = list(range(200)), list(range(200))
    b[10] = 999
    ka, kb = page_keys(a, 64, 3), page_keys(b, 64, 3)
    assert len(ka) == 3 and all(x != y for x, y in zip(ka, kb))  # a change in page 0 changes every later key
    assert page_keys(a[:128], 64, 2) == ka[:2]


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_random_streams_with_shared_prefixes_match_the_reference(model, data):
    stems = [tokens(n, 20 + n) for n in (70, 150, 260)]
    requests = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80), st.integers(1, 6),
                                            st.booleans()), min_size=2, max_size=6))
    num_pages = data.draw(st.integers(8, 30))
    engine = runtime(model, num_pages=num_pages, max_batch=3, token_budget=data.draw(st.sampled_from([32, 96])),
                     snapshot_every=64 * data.draw(st.integers(1, 3)))
    seqs = []
    for stem, extra, max_tokens, wait in requests:
        prompt = stems[stem][: 40 + extra * 3] + tokens(extra, extra)
        seqs.append(engine.add_request(prompt, SamplingParams(max_tokens=max_tokens)))
        while wait and engine.has_work:
            engine.step()
    for _ in range(5000):
        if not engine.has_work:
            break
        engine.step()
    for seq in seqs:
        assert seq.output_ids == reference_tokens(model, seq.prompt_ids, seq.params.max_tokens), seq.request_id
    assert_all_returned(engine)
