"""Presence and frequency penalties: greedy tokens equal a reference that penalizes the eager model's logits step by
step, with and without speculative drafts (each verify row penalized for the drafts before it)."""

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
def penalized_greedy(model, prompt: list[int], presence: float, frequency: float) -> list[int]:
    pages = math.ceil((len(prompt) + MAX_TOKENS) / PAGE_SIZE)
    caches = model.allocate_caches(pages, 1)
    logits = model.prefill(torch.tensor(prompt), contiguous_meta([0], [len(prompt)], pages), caches)[-1]
    tokens = []
    for step in range(MAX_TOKENS):
        counts = torch.bincount(torch.tensor(tokens, dtype=torch.long), minlength=logits.shape[-1]).float()
        tokens.append(int((logits - frequency * counts - presence * (counts > 0).float()).argmax()))
        meta = contiguous_meta([len(prompt) + step], [1], pages, decode=True)
        logits = model.decode(torch.tensor([[tokens[-1]]]), meta, caches)[0][-1]
    return tokens


@pytest.mark.parametrize("presence, frequency, num_draft",
                         [(0.0, 1.5, 0), (2.0, 0.0, 0), (0.2, -1.0, 0), (0.0, 1.5, 3)],
                         ids=["frequency", "presence", "negative", "speculative"])
def test_penalized_greedy_tokens_equal_the_reference(model, plain, presence, frequency, num_draft):
    prompts = PROMPTS
    expected = {tuple(p): penalized_greedy(model, p, presence, frequency) for p in prompts}
    # the penalties matter for these prompts: the tokens differ from plain greedy decoding
    assert [expected[tuple(p)] for p in prompts] != plain
    engine = runtime(model, num_draft)
    engine.propose = mostly_right_drafts(expected)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, presence_penalty=presence,
                            frequency_penalty=frequency)
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_work:
        engine.step()
    assert (engine.stats.accepted_tokens > 0) == (num_draft > 0)
    for seq in seqs:
        assert seq.output_ids == expected[tuple(seq.prompt_ids)]


def test_penalties_change_the_answer_and_count_drafts_for_later_rows():
    rows = torch.zeros(3, 5)
    out = penalized(rows, [1, 1, 2], [3, 3], SamplingParams(presence_penalty=1.0, frequency_penalty=0.5))
    # counts row 0: {1: 2, 2: 1}; row 1 adds the first draft (3); row 2 both
    assert out[0].tolist() == [0, -2.0, -1.5, 0, 0]
    assert out[1].tolist() == [0, -2.0, -1.5, -1.5, 0]
    assert out[2].tolist() == [0, -2.0, -1.5, -2.0, 0]
    assert penalized(rows, [1], [], SamplingParams()) is rows
    biased = penalized(rows, [], [0], SamplingParams(logit_bias=((4, 2.5), (0, -1))))
    assert biased.tolist() == [[-1, 0, 0, 0, 2.5]] * 3


def test_penalties_outside_openai_range_are_refused():
    with pytest.raises(DayzeroError, match="must be in \\[-2, 2\\]"):
        SamplingParams(frequency_penalty=2.5)
    with pytest.raises(DayzeroError, match="biases in \\[-100, 100\\]"):
        SamplingParams(logit_bias=((3, 150.0),))
