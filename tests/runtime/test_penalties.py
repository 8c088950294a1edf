"""Presence, frequency and repetition penalties: greedy tokens equal a reference that penalizes the eager model's
logits step by step, with and without speculative drafts (each verify row penalized for the drafts before it);
min_tokens keeps the stop ids out of an answer's first tokens; min_p drops the unlikely tokens."""

from __future__ import annotations

import math

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE
from dayzero.runtime.penalties import penalized
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import random_model, tiny_config_dict
from tests.runtime.test_logprobs import mostly_right_drafts, runtime

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


PROMPTS = [torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(s)).tolist() for s in (1, 2)]


@pytest.fixture(scope="module")
def plain(model):
    return [penalized_greedy(model, p, 0.0, 0.0) for p in PROMPTS]


@torch.inference_mode()
def penalized_greedy(model, prompt: list[int], presence: float, frequency: float, repetition: float = 1.0,
                     banned_before: tuple[int, int] | None = None) -> list[int]:
    """banned_before (token, n): the token may not be among the first n; the answer ends at it after them."""
    pages = math.ceil((len(prompt) + MAX_TOKENS) / PAGE_SIZE)
    caches = model.allocate_caches(pages, 1)
    logits = model.prefill(torch.tensor(prompt), contiguous_meta([0], [len(prompt)], pages), caches)[-1]
    tokens = []
    for step in range(MAX_TOKENS):
        counts = torch.bincount(torch.tensor(tokens, dtype=torch.long), minlength=logits.shape[-1]).float()
        adjusted = logits - frequency * counts - presence * (counts > 0).float()
        seen = torch.zeros_like(adjusted, dtype=torch.bool)
        seen[prompt + tokens] = True
        adjusted = torch.where(seen, torch.where(adjusted > 0, adjusted / repetition, adjusted * repetition), adjusted)
        if banned_before is not None and step < banned_before[1]:
            adjusted[banned_before[0]] = float("-inf")
        tokens.append(int(adjusted.argmax()))
        if banned_before is not None and tokens[-1] == banned_before[0]:
            return tokens
        meta = contiguous_meta([len(prompt) + step], [1], pages, decode=True)
        logits = model.decode(torch.tensor([[tokens[-1]]]), meta, caches)[0][-1]
    return tokens


@pytest.mark.parametrize("presence, frequency, repetition, num_draft",
                         [(0.0, 1.5, 1.0, 0), (2.0, 0.0, 1.0, 0), (0.2, -1.0, 1.0, 0), (0.0, 1.5, 1.0, 3),
                          (0.0, 0.0, 1.8, 0), (0.0, 0.0, 1.8, 3)],
                         ids=["frequency", "presence", "negative", "speculative", "repetition",
                              "repetition-speculative"])
def test_penalized_greedy_tokens_equal_the_reference(model, plain, presence, frequency, repetition, num_draft):
    prompts = PROMPTS
    expected = {tuple(p): penalized_greedy(model, p, presence, frequency, repetition) for p in prompts}
    # the penalties matter for these prompts: the tokens differ from plain greedy decoding
    assert [expected[tuple(p)] for p in prompts] != plain
    engine = runtime(model, num_draft)
    engine.propose = mostly_right_drafts(expected)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, presence_penalty=presence,
                            frequency_penalty=frequency, repetition_penalty=repetition)
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_work:
        engine.step()
    assert (engine.stats.accepted_tokens > 0) == (num_draft > 0)
    for seq in seqs:
        assert seq.output_ids == expected[tuple(seq.prompt_ids)]


@pytest.mark.parametrize("num_draft", [0, 3], ids=["plain", "speculative"])
def test_min_tokens_keeps_the_stop_ids_out_of_the_first_tokens(model, plain, num_draft):
    """The plain answer's first token as a stop id: alone it ends the answer at once; with min_tokens 6 the first
    six tokens are the best others, and the answer ends where the stop id comes after them."""
    prompt, stop = PROMPTS[0], plain[0][0]
    expected = penalized_greedy(model, prompt, 0.0, 0.0, banned_before=(stop, 6))
    engine = runtime(model, num_draft)
    engine.propose = mostly_right_drafts({tuple(prompt): expected})
    short = engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, stop_token_ids=(stop,)))
    held = engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, stop_token_ids=(stop,), min_tokens=6))
    while engine.has_work:
        engine.step()
    assert short.output_ids == [stop]
    assert held.output_ids == expected[:MAX_TOKENS] and len(held.output_ids) > 6 and stop not in held.output_ids[:6]


def test_min_p_drops_tokens_below_its_share_of_the_most_likely():
    from dayzero.runtime.sampling import token_probs

    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = token_probs(logits, SamplingParams(temperature=1.0, min_p=0.25))
    assert probs[3] == 0 and probs[2] > 0  # 0.05 < 0.25 x 0.5 <= 0.15
    assert torch.allclose(probs[:3], torch.tensor([0.5, 0.3, 0.15]) / 0.95)


def test_penalties_change_the_answer_and_count_drafts_for_later_rows():
    rows = torch.zeros(3, 5)
    out = penalized(rows, [], [1, 1, 2], [3, 3], SamplingParams(presence_penalty=1.0, frequency_penalty=0.5))
    # counts row 0: {1: 2, 2: 1}; row 1 adds the first draft (3); row 2 both
    assert out[0].tolist() == [0, -2.0, -1.5, 0, 0]
    assert out[1].tolist() == [0, -2.0, -1.5, -1.5, 0]
    assert out[2].tolist() == [0, -2.0, -1.5, -2.0, 0]
    assert penalized(rows, [5], [1], [], SamplingParams()) is rows
    biased = penalized(rows, [5], [], [0], SamplingParams(logit_bias=((4, 2.5), (0, -1))))
    assert biased.tolist() == [[-1, 0, 0, 0, 2.5]] * 3


def test_penalties_outside_openai_range_are_refused():
    with pytest.raises(DayzeroError, match="must be in \\[-2, 2\\]"):
        SamplingParams(frequency_penalty=2.5)
    with pytest.raises(DayzeroError, match="biases in \\[-100, 100\\]"):
        SamplingParams(logit_bias=((3, 150.0),))
