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
from dayzero.structured.json_grammar import Grammar
from dayzero.structured.json_schema import compile_schema
from dayzero.structured.token_grammar import TokenTable
from dayzero.structured.tool_call_grammar import FunctionIdGrammar, ToolCallAnswer, ToolCallRules, marker_token_ids
from dayzero.structured.tool_calls import SECTION_BEGIN, ToolCallText, decode_keeping, marker_ids
from tests.helpers import KIMI_VOCAB
from tests.server.test_tool_calls import SCHEMAS, kimi_tokenizer


def _feed(grammar: FunctionIdGrammar, text: bytes):
    state = grammar.start()
    for byte in text:
        state = grammar.advance(state, byte)
        if state is None:
            return None
    return state


@pytest.mark.parametrize("text, done", [(b"functions.get_weather:0", True), (b"functions.get_time:1234", True),
                                        (b"functions.get_weather:", False), (b"functions.get_", False)])
def test_a_call_id_names_an_offered_function_and_an_index(text, done):
    ids = FunctionIdGrammar(("get_weather", "get_time"))
    state = _feed(ids, text)
    assert state is not None and ids.is_done(state) == done


@pytest.mark.parametrize("text", [b"functions.get_date:0", b"functions.get_weather:12345", b"functions.get_time:x",
                                  b"functions.get_time:01",
                                  b"function.get_time:0", b"functions.get_weather0"])
def test_other_ids_are_refused(text):
    assert _feed(FunctionIdGrammar(("get_weather", "get_time")), text) is None


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    tokenizer = kimi_tokenizer(tmp_path_factory.mktemp("vocab"))
    markers = marker_ids(tokenizer)
    return tokenizer, TokenTable(tokenizer.token_bytes, KIMI_VOCAB), markers


def _grammars(schema: str | None) -> Grammar:
    return compile_schema(json.loads(schema)) if schema else Grammar()


def _rules(markers, opened: bool, parallel: bool) -> ToolCallRules:
    functions = tuple((name, compile_schema(schema).key) for name, schema in SCHEMAS.items())
    return ToolCallRules(marker_token_ids(markers), functions, opened, parallel)


def _walk(answer: ToolCallAnswer, table: TokenTable, rng: random.Random, section_begin: int) -> list[int]:
    """Draw allowed tokens until the answer is done, favouring short ones and ways out so that it ends."""
    tokens = []
    closers = [t for t, data in enumerate(table.bytes) if data and data in (b'"', b"}", b"0", b",")]
    for step in range(400):
        rows = torch.randn(1, table.vocab_size, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
        allowed = torch.isfinite(answer.mask(rows))[0]
        if answer.phase == "text" and step >= 3:
            token = section_begin
        else:
            choices = [t for t in closers if allowed[t]] if rng.random() < 0.6 + step / 100 else []
            token = rng.choice(choices or allowed.nonzero().flatten().tolist())
        assert allowed[token] or answer.phase == "text" and token == section_begin
        answer.advance(token)
        tokens.append(token)
        if answer.done:
            return tokens
    raise AssertionError("the walk did not end")


@pytest.mark.parametrize("opened, parallel", [(False, True), (True, True), (True, False), (False, False)],
                         ids=["auto", "required", "required-one-call", "auto-one-call"])
def test_every_walk_the_masks_allow_is_a_section_of_valid_calls(vocabulary, opened, parallel):
    tokenizer, table, markers = vocabulary
    section_begin = marker_token_ids(markers)[0]
    for seed in range(12):
        answer = ToolCallAnswer(table, _rules(markers, opened, parallel), _grammars)
        tokens = _walk(answer, table, random.Random(seed), section_begin)
        forced = (SECTION_BEGIN + "<|tool_call_begin|>functions.") if opened else ""
        reader = ToolCallText(forced)
        shown, calls = reader.add(decode_keeping(tokenizer.decode, markers)(tokens))
        assert reader.finish() == "" and calls, (seed, shown)
        assert parallel or len(calls) == 1
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
            assert call.id.startswith(f"functions.{call.name}:")


def test_in_text_only_the_section_may_open_and_a_bypassed_mask_is_an_error(vocabulary):
    _, table, markers = vocabulary
    ids = marker_token_ids(markers)
    answer = ToolCallAnswer(table, _rules(markers, False, True), _grammars)
    masked = answer.mask(torch.zeros(2, table.vocab_size))
    assert torch.isfinite(masked[:, ids[0]]).all() and torch.isinf(masked[:, list(ids[1:])]).all()
    assert torch.isfinite(masked).sum() == 2 * (table.vocab_size - 4)
    answer.advance(ids[0])
    with pytest.raises(DayzeroError, match="out of place"):
        answer.advance(ids[4])


def test_a_draft_is_cut_where_the_calls_rules_refuse_it(vocabulary):
    tokenizer, table, markers = vocabulary
    section_begin, section_end, call_begin, arguments_begin, call_end = marker_token_ids(markers)
    answer = ToolCallAnswer(table, _rules(markers, False, False), _grammars)
    call = [section_begin, call_begin, *tokenizer.encode("functions.get_time:0"), arguments_begin,
            *tokenizer.encode("{}"), call_end]
    assert held_draft(answer, [*tokenizer.encode("ok"), *call, call_begin]) == [*tokenizer.encode("ok"), *call]
    assert held_draft(answer, [*call, section_end, *tokenizer.encode("more")]) == [*call, section_end]
    assert held_draft(answer, [section_begin, call_begin, *tokenizer.encode("functions.get_date")]) == [
        section_begin, call_begin, *tokenizer.encode("functions.get_")]
    assert answer.phase == "text"


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
