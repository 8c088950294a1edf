"""Tool calls held to the offered functions under tool_choice "auto" and "required": a call's id names an offered
function, its arguments follow that function's schema, the markers come in order, and the turn ends with the
section; walked token by token over a Kimi-style vocabulary (test_tool_calls.py: through the real engine)."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.runtime.held_drafts import held_draft
from dayzero.structured.held_answer import HeldAnswer
from dayzero.structured.json_schema import checked_schema
from dayzero.structured.tool_call_grammar import ToolCallRules, marker_token_ids, tool_call_grammar
from dayzero.structured.tool_calls import SECTION_BEGIN, ToolCallText, decode_keeping, marker_ids
from dayzero.structured.vocabulary import Vocabulary
from tests.helpers import KIMI_VOCAB
from tests.server.test_tool_calls import SCHEMAS, kimi_tokenizer


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    tokenizer = kimi_tokenizer(tmp_path_factory.mktemp("vocab"))
    markers = marker_ids(tokenizer)
    return tokenizer, Vocabulary(tokenizer.token_bytes, KIMI_VOCAB, {tokenizer.eos_token_id}), markers


def _rules(markers, opened: bool, parallel: bool, names: tuple[str, ...] = tuple(SCHEMAS)) -> ToolCallRules:
    functions = tuple((name, checked_schema(SCHEMAS[name])) for name in names)
    return ToolCallRules(marker_token_ids(markers), functions, opened, parallel)


def _answer(vocabulary: Vocabulary, rules: ToolCallRules) -> HeldAnswer:
    return HeldAnswer(vocabulary.compile(tool_call_grammar(rules)), rules.section_end)


def _takes(answer: HeldAnswer, tokens: list[int]) -> bool:
    return all(answer.take(token) for token in tokens)


@pytest.mark.parametrize("call_id, whole", [("get_weather:0", True), ("get_time:1234", True),
                                            ("get_weather:", False), ("get_", False)])
def test_a_call_id_names_an_offered_function_and_an_index(vocabulary, call_id, whole):
    """Under "required" the prompt wrote `functions.`: the id goes on with a function's name and its index; the
    arguments may begin once it is whole."""
    tokenizer, grammars, markers = vocabulary
    answer = _answer(grammars, _rules(markers, True, True))
    assert _takes(answer, tokenizer.encode(call_id))
    assert answer.take(marker_token_ids(markers)[3]) == whole


@pytest.mark.parametrize("call_id", ["get_date:0", "get_weather:12345", "get_time:x", "get_time:01",
                                     "get_weather0"])
def test_other_ids_are_refused(vocabulary, call_id):
    tokenizer, grammars, markers = vocabulary
    answer = _answer(grammars, _rules(markers, True, True))
    arguments_begin = marker_token_ids(markers)[3]
    assert not (_takes(answer, tokenizer.encode(call_id)) and answer.take(arguments_begin))


def _walk(answer: HeldAnswer, tokenizer, rng: random.Random, section_begin: int, in_text: bool) -> list[int]:
    """Draw allowed tokens until the answer is done, favouring short ones and ways out so that it ends (in_text: the
    answer starts in text, before a section)."""
    tokens = []
    closers = [t for t in range(answer.vocab_size) if tokenizer.token_bytes(t) in (b'"', b"}", b"0", b",")]
    for step in range(400):
        rows = torch.randn(1, answer.vocab_size, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
        allowed = torch.isfinite(answer.mask(rows))[0]
        if in_text and step >= 3:
            token = section_begin
        else:
            choices = [t for t in closers if allowed[t]] if rng.random() < 0.6 + step / 100 else []
            token = rng.choice(choices or allowed.nonzero().flatten().tolist())
        assert allowed[token]
        answer.advance(token)
        in_text = in_text and token != section_begin
        tokens.append(token)
        if answer.done:
            return tokens
    raise AssertionError("the walk did not end")


@pytest.mark.parametrize("opened, parallel", [(False, True), (True, True), (True, False), (False, False)],
                         ids=["auto", "required", "required-one-call", "auto-one-call"])
def test_every_walk_the_masks_allow_is_a_section_of_valid_calls(vocabulary, opened, parallel):
    tokenizer, grammars, markers = vocabulary
    section_begin = marker_token_ids(markers)[0]
    for seed in range(12):
        answer = _answer(grammars, _rules(markers, opened, parallel))
        tokens = _walk(answer, tokenizer, random.Random(seed), section_begin, not opened)
        forced = (SECTION_BEGIN + "<|tool_call_begin|>functions.") if opened else ""
        reader = ToolCallText(forced)
        shown, calls = reader.add(decode_keeping(tokenizer.decode, markers)(tokens))
        assert reader.finish() == "" and calls, (seed, shown)
        assert parallel or len(calls) == 1
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
            assert call.id.startswith(f"functions.{call.name}:")


def test_in_text_only_the_section_may_open_and_a_bypassed_mask_is_an_error(vocabulary):
    _, grammars, markers = vocabulary
    ids = marker_token_ids(markers)
    answer = _answer(grammars, _rules(markers, False, True))
    masked = answer.mask(torch.zeros(2, KIMI_VOCAB))
    assert torch.isfinite(masked[:, ids[0]]).all() and torch.isinf(masked[:, list(ids[1:])]).all()
    assert torch.isfinite(masked).sum() == 2 * (KIMI_VOCAB - 4)
    answer.advance(ids[0])
    with pytest.raises(DayzeroError, match="a mask was bypassed"):
        answer.advance(ids[4])


def test_a_draft_is_cut_where_the_calls_rules_refuse_it(vocabulary):
    tokenizer, grammars, markers = vocabulary
    section_begin, section_end, call_begin, arguments_begin, call_end = marker_token_ids(markers)
    answer = _answer(grammars, _rules(markers, False, False))
    call = [section_begin, call_begin, *tokenizer.encode("functions.get_time:0"), arguments_begin,
            *tokenizer.encode("{}"), call_end]
    assert held_draft(answer, [*tokenizer.encode("ok"), *call, call_begin]) == [*tokenizer.encode("ok"), *call]
    assert held_draft(answer, [*call, section_end, *tokenizer.encode("more")]) == [*call, section_end]
    assert held_draft(answer, [section_begin, call_begin, *tokenizer.encode("functions.get_date")]) == [
        section_begin, call_begin, *tokenizer.encode("functions.get_")]
    assert answer.tokens == []


def test_a_vocabulary_that_cannot_hold_calls_reads_them_as_written(vocabulary):
    """Holding the calls is a help, not a condition: an engine without token bytes still answers a tool request."""
    from dayzero.model.caches import CacheFormat
    from dayzero.model.eager_engine import EagerEngine, eager_manifest
    from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
    from dayzero.runtime.sampling import SamplingParams
    from tests.helpers import random_model, tiny_config_dict

    _, _, markers = vocabulary
    model = random_model(tiny_config_dict(vocab_size=KIMI_VOCAB))
    engine = LLMEngine(EagerEngine(model, eager_manifest(model, CacheFormat(), max_batch=2, max_len=128)),
                       RuntimeOptions(memory_bytes=64 << 20))
    seq = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, tool_calls=_rules(markers, False, True)))
    while engine.has_work:
        engine.step()
    assert seq.json_answer is None and len(seq.output_ids) == 3
