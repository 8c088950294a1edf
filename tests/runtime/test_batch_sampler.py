"""The batched sampler against the per-row reference: support sets equal to sampling.filtered_logits', draws that
follow token_probs, logit adjustments equal to penalties.penalized bit for bit, greedy rows the argmax of the raw
logits, log probabilities the log-softmax of the raw logits; a seeded request's tokens do not depend on its neighbours
or its row; grammar bitmasks round-trip and hold the draw."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.runtime import token_draw
from dayzero.runtime.batch_sampler import BatchSampler
from dayzero.runtime.grammar_bitmask import pack_bitmask, unpack_bitmask
from dayzero.runtime.penalties import penalized
from dayzero.runtime.row_plan import RowPlan
from dayzero.runtime.sampling import SamplingParams, filtered_logits, token_probs
from dayzero.runtime.seeded_uniform import seed_words, seeded_uniform
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.token_draw import scaled, support_floor

CPU = torch.device("cpu")
STOP_IDS = frozenset({2})


def seq_with(params: SamplingParams, output: list[int] = (), prompt: list[int] = (5, 6, 7), seed=None) -> Sequence:
    seq = Sequence(list(prompt), params, seed=seed)
    seq.output_ids = list(output)
    return seq


def draws(row: torch.Tensor, params: SamplingParams, count: int) -> list[int]:
    """count draws from one row: as many requests with seeds 0..count-1 in one batch."""
    seqs = [seq_with(params, seed=s) for s in range(count)]
    return [out.tokens[0] for out in BatchSampler(row.shape[0])(row.expand(count, -1), seqs)]


random_params = st.builds(
    SamplingParams, temperature=st.sampled_from([0.05, 0.3, 0.7, 1.0, 2.5]),
    top_k=st.sampled_from([0, 1, 2, 7, 50, 5000]), top_p=st.sampled_from([1.0, 0.95, 0.9, 0.5, 0.1, 1e-6]),
    min_p=st.sampled_from([0.0, 0.01, 0.2, 1.0]))


@settings(max_examples=40, deadline=None)
@given(st.lists(random_params, min_size=1, max_size=5), st.sampled_from([33, 300, 2000]), st.integers(0, 2**16))
def test_support_sets_equal_the_reference(params, vocab, seed):
    """2000 > the CPU's top-p candidates: those rows look among the candidates first."""
    logits = torch.randn(len(params), vocab, generator=torch.Generator().manual_seed(seed)) * 3
    plan = RowPlan([seq_with(p) for p in params], [[] for _ in params], vocab, CPU)
    x = scaled(logits, plan.random_rows.temperature)
    floor = support_floor(x, plan.random_rows)
    for row, p, kept_floor, scaled_row in zip(logits, params, floor, x):
        assert torch.equal(scaled_row >= kept_floor, torch.isfinite(filtered_logits(row, p))), p


def test_top_p_rows_whose_candidates_fall_short_are_sorted_whole(monkeypatch):
    """A flat row needs most of its tokens for top_p 0.9: 8 candidates fall short and the row is sorted; a peaked row
    in the same batch ends inside them."""
    monkeypatch.setitem(token_draw.TOP_P_CANDIDATES, "cpu", 8)
    flat, peaked = seeded(500) * 0.1, seeded(500, seed=1) * 8
    params = SamplingParams(temperature=1.0, top_p=0.9)
    plan = RowPlan([seq_with(params), seq_with(params)], [[], []], 500, CPU)
    x = scaled(torch.stack([flat, peaked]), plan.random_rows.temperature)
    floor = support_floor(x, plan.random_rows)
    for row, kept_floor, scaled_row in zip([flat, peaked], floor, x):
        assert torch.equal(scaled_row >= kept_floor, torch.isfinite(filtered_logits(row, params)))
    assert (x[0] >= floor[0]).sum() > 8 and (x[1] >= floor[1]).sum() < 8


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.8), SamplingParams(temperature=1.3, top_k=6),
                                    SamplingParams(temperature=1.0, top_p=0.8, min_p=0.05)],
                         ids=["temperature", "top-k", "top-p-min-p"])
def test_draws_follow_the_reference_distribution(params):
    row = torch.randn(12, generator=torch.Generator().manual_seed(3)) * 1.5
    counts = torch.bincount(torch.tensor(draws(row, params, 6000)), minlength=12).double() / 6000
    expected = token_probs(row, params).double()
    assert (counts[expected == 0] == 0).all()
    assert (counts - expected).abs().max() < 0.025


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_greedy_and_degenerate_filters_pick_the_argmax():
    logits = seeded(300)
    best = int(logits.argmax())
    for params in (SamplingParams(), SamplingParams(temperature=1.5, top_k=1), SamplingParams(temperature=1.0,
                   top_p=1e-6), SamplingParams(temperature=1.0, min_p=1.0)):
        assert set(draws(logits, params, 20)) == {best}


def test_a_tiny_temperature_samples_the_argmax_instead_of_failing():
    logits = seeded(300) * 30
    for temperature in (1e-300, 5e-324, 1e-6, 2e-5):
        assert set(draws(logits, SamplingParams(temperature=temperature, top_p=0.9, top_k=5), 5)) == {
            int(logits.argmax())}


def test_top_k_and_top_p_limit_the_choice():
    logits = seeded(50)
    allowed = set(torch.topk(logits, 5).indices.tolist())
    assert set(draws(logits, SamplingParams(temperature=1.0, top_k=5), 300)) == allowed
    probs = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert set(draws(probs, SamplingParams(temperature=1.0, top_p=0.75), 300)) == {0, 1}


def test_greedy_rows_take_the_argmax_of_the_raw_logits_in_any_dtype():
    logits = (seeded(6, 4000) * 4).to(torch.bfloat16)
    seqs = [seq_with(SamplingParams()) for _ in range(6)]
    assert [out.tokens[0] for out in BatchSampler(4000)(logits, seqs)] == logits.argmax(-1).tolist()


def mixed_batch(vocab: int) -> tuple[list[Sequence], list[list[int]]]:
    """Requests with every adjustment, next to plain ones, with drafts of several lengths (a verify step)."""
    params = [
        SamplingParams(presence_penalty=0.7, frequency_penalty=-0.4),
        SamplingParams(temperature=0.9, repetition_penalty=1.6, logit_bias=((3, 5.0), (vocab - 1, -2.5))),
        SamplingParams(min_tokens=4, stop_token_ids=(9, 11)),
        SamplingParams(temperature=1.2, top_k=20),
        SamplingParams(min_tokens=3, ignore_eos=True, stop_token_ids=(4,), repetition_penalty=0.6),
        SamplingParams(logit_bias=((0, 1.0),), presence_penalty=2.0, frequency_penalty=1.5, repetition_penalty=1.3),
    ]
    outputs = [[8, 8, 1, 3], [3, 3, 3], [1], [], [4, 4], [0, 7, 0, 0, 12]]
    drafts = [[8, 1], [], [5, 9, 9], [6], [4, 2], [7, 7, 0]]
    seqs = [seq_with(p, out, prompt=[13, 14, 3], seed=i) for i, (p, out) in enumerate(zip(params, outputs))]
    return seqs, drafts


def test_adjusted_logits_equal_the_per_row_reference_bit_for_bit():
    vocab, width = 40, 4
    seqs, drafts = mixed_batch(vocab)
    logits = seeded(len(seqs), width, vocab) * 3
    adjusted = BatchSampler(vocab, STOP_IDS).adjusted_logits(logits, seqs, drafts)
    start = 0
    for seq, draft, rows in zip(seqs, drafts, logits):
        size = 1 + len(draft)
        expected = penalized(rows[:size], seq.prompt_ids, seq.output_ids, draft, seq.params, STOP_IDS)
        assert torch.equal(adjusted[start:start + size], expected.float()), seq.params
        start += size
    assert start == adjusted.shape[0]


def test_counts_follow_the_answer_across_steps_and_finished_rows_are_reused():
    vocab = 30
    sampler = BatchSampler(vocab)
    params = SamplingParams(temperature=1.0, frequency_penalty=1.0, repetition_penalty=1.4)
    first, second = seq_with(params, [1, 1]), seq_with(params, [2])
    for step in range(6):
        logits = seeded(2, vocab, seed=step)
        adjusted = sampler.adjusted_logits(logits, [first, second])
        for index, seq in enumerate([first, second]):
            expected = penalized(logits[index:index + 1], seq.prompt_ids, seq.output_ids, [], params)
            assert torch.equal(adjusted[index:index + 1], expected)
        for seq, out in zip([first, second], sampler(logits, [first, second])):
            seq.output_ids += out.tokens
    assert sampler.counts.generated.shape[0] == 4
    second.status = first.status = Status.FINISHED
    third = seq_with(params, [5, 5, 5])
    adjusted = sampler.adjusted_logits(logits[:1], [third])
    assert torch.equal(adjusted, penalized(logits[:1], third.prompt_ids, third.output_ids, [], params))
    assert sampler.counts.generated.shape[0] == 4


def test_a_seeded_request_draws_the_same_alone_and_among_any_neighbours():
    """The same request (its rows' logits equal) decoded for 6 steps alone, third of 7 and last of 7 with other
    neighbours: the same tokens and log probabilities."""
    vocab = 500
    target = SamplingParams(temperature=0.9, top_p=0.9, top_k=100, presence_penalty=0.5, repetition_penalty=1.2,
                            logprobs=3, seed=1234)
    others = [SamplingParams(), SamplingParams(temperature=1.0), SamplingParams(temperature=0.5, logprobs=1),
              SamplingParams(temperature=1.1, top_p=0.5, seed=9), SamplingParams(frequency_penalty=1.0),
              SamplingParams(temperature=2.0, min_p=0.1, logit_bias=((7, 3.0),)),
              SamplingParams(temperature=0.7, min_tokens=5, stop_token_ids=(3,))]
    layouts = {"alone": (0, []), "third": (2, others[:6]), "last": (6, others[1:][::-1])}
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 7, vocab, generator=generator) * 3
    results = {}
    for name, (place, neighbours) in layouts.items():
        seqs = [seq_with(p) for p in neighbours]
        seqs.insert(place, seq_with(target, prompt=[1, 2, 3]))
        sampler = BatchSampler(vocab, STOP_IDS)
        tokens = []
        for step in range(6):
            rows = logits[step, :len(seqs)].clone()
            rows[place] = logits[step, 0]
            outs = sampler(rows, seqs)
            for seq, out in zip(seqs, outs):
                seq.output_ids += out.tokens
            tokens.append((outs[place].tokens, outs[place].logprobs))
        results[name] = tokens
    assert results["alone"] == results["third"] == results["last"]
    assert len({tokens[0] for tokens, _ in results["alone"]}) > 1


def test_an_unseeded_request_gets_its_own_seed():
    params = SamplingParams(temperature=1.0)
    assert len({seq_with(params).seed for _ in range(5)}) == 5
    assert seq_with(SamplingParams(temperature=1.0, seed=-3)).seed == -3


def test_seeded_uniforms_are_uniform_and_differ_by_seed_and_position():
    assert seed_words(2**64 + 1) == seed_words(1) and seed_words(-1) == (2**32 - 1, 2**32 - 1)
    grid = torch.tensor([[seeded_uniform(s, p) for p in range(4000)] for s in (0, 1, -1, 2**64 + 1, 2**40)],
                        dtype=torch.float64)
    assert torch.equal(grid[1], grid[3])
    assert ((grid > 0) & (grid < 1)).all()
    for row in grid[[0, 1, 2, 4]]:
        assert abs(row.mean() - 0.5) < 0.02 and abs(row.var() - 1 / 12) < 0.01
        assert torch.histc(row.float(), 10, 0, 1).min() > 320
    assert torch.corrcoef(grid[[0, 1, 2, 4]]).fill_diagonal_(0).abs().max() < 0.05


def test_log_probabilities_are_the_raw_rows_log_softmax():
    vocab = 64
    seqs, drafts = mixed_batch(vocab)
    seqs = [seq_with(SamplingParams(**{**vars(s.params), "logprobs": 4}), s.output_ids, seed=s.seed) for s in seqs]
    logits = seeded(len(seqs), 4, vocab) * 2
    outs = BatchSampler(vocab, STOP_IDS)(logits, seqs, drafts)
    for out, rows in zip(outs, logits):
        for entry, token, row in zip(out.logprobs, out.tokens, rows):
            expected = torch.log_softmax(row, -1)
            assert entry.token == token and entry.logprob == pytest.approx(float(expected[token]), abs=1e-6)
            top = expected.topk(4)
            assert [t for t, _ in entry.top] == top.indices.tolist()
            assert [v for _, v in entry.top] == pytest.approx(top.values.tolist(), abs=1e-6)


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 100, 257])
def test_bitmasks_round_trip(vocab):
    allowed = torch.rand(5, vocab) < 0.4
    packed = pack_bitmask(allowed)
    assert packed.dtype == torch.int32 and packed.shape == (5, math.ceil(vocab / 32))
    assert torch.equal(unpack_bitmask(packed, vocab), allowed)
    everything = pack_bitmask(torch.ones(1, 64, dtype=torch.bool))
    assert everything.tolist() == [[-1, -1]]


def test_bitmask_rows_hold_greedy_and_random_rows():
    vocab = 70
    allowed = seeded(4, vocab) > 1.3
    allowed[:, 5] = True
    seqs = [seq_with(SamplingParams(temperature=1.0), seed=s) for s in range(2)]
    seqs.append(seq_with(SamplingParams(repetition_penalty=1.5)))
    bitmasks = [pack_bitmask(allowed[:2]), None, pack_bitmask(allowed[2:])]
    logits = seeded(3, 2, vocab, seed=1) * 5
    sampler = BatchSampler(vocab)
    for _ in range(20):
        outs = sampler(logits, seqs, [[5], [], [5]], bitmasks)
        assert all(allowed[row, token] for row, token in zip([0, 1, 2, 3], outs[0].tokens + outs[2].tokens))
        expected = penalized(logits[2], seqs[2].prompt_ids, seqs[2].output_ids, [5], seqs[2].params)
        assert outs[2].tokens == expected.masked_fill(~allowed[2:], float("-inf")).argmax(-1).tolist()
        for seq in seqs:
            seq.seed += 1
            seq.output_ids.append(5)
        sampler = BatchSampler(vocab)


@pytest.mark.gpu
def test_the_cuda_sampler_chooses_what_the_cpu_one_does():
    """The same rows on both devices: the same tokens (greedy and seeded draws, a verify step with drafts, penalties,
    masks) and log probabilities to float rounding; the support sets of GPU-sized rows equal the reference's."""
    vocab = 163840
    seqs, drafts = mixed_batch(vocab)
    seqs += [seq_with(SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=1.1, logprobs=5), seed=s)
             for s in range(58)]
    drafts += [[] for _ in range(58)]
    logits = seeded(len(seqs), 4, vocab) * 4
    bitmasks = [None] * len(seqs)
    bitmasks[1] = pack_bitmask(seeded(1, vocab) > -0.5)
    cpu = BatchSampler(vocab, STOP_IDS, "cpu")(logits, seqs, drafts, bitmasks)
    cuda = BatchSampler(vocab, STOP_IDS, "cuda")(logits.cuda(), seqs, drafts, bitmasks)
    assert [out.tokens for out in cuda] == [out.tokens for out in cpu]
    for a, b in zip(cuda, cpu):
        for x, y in zip(a.logprobs or [], b.logprobs or []):
            assert x.token == y.token and x.logprob == pytest.approx(y.logprob, abs=1e-4)
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
    params = [seq_with(SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m))
              for t, k, p, m in [(0.7, 0, 0.9, 0.0), (1.0, 50, 0.95, 0.0), (1.3, 0, 0.5, 0.05), (0.5, 1000, 1.0, 0.1)]]
    plan = RowPlan(params, [[] for _ in params], vocab, torch.device("cuda"))
    rows = seeded(len(params), vocab) * 3
    x = scaled(rows.cuda(), plan.random_rows.temperature)
    floor = support_floor(x, plan.random_rows)
    for row, seq, kept_floor, scaled_row in zip(rows, params, floor, x):
        assert torch.equal((scaled_row >= kept_floor).cpu(), torch.isfinite(filtered_logits(row, seq.params)))
