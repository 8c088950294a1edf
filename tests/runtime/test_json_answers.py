"""Answers held to JSON (`response_format: {"type": "json_object"}`): the byte recognizer agrees with Python's json
module on whole texts, the vocabulary masks equal a token-by-token check of every token, and the engine's answers
(sampled from a random model, any vocabulary) are JSON objects that end where they close."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from dayzero.errors import DayzeroError
from dayzero.export.engine import PAGE, SLOT, EagerEngine, eager_manifest
from dayzero.model.caches import CacheFormat
from dayzero.runtime import json_grammar
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.token_grammar import TokenTable
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import random_model, tiny_config_dict
from tests.runtime.test_server import HI, assert_nothing_open, make_server


def recognize(data: bytes) -> list:
    """The recognizer's state after each byte (None from the first refused one on)."""
    state, states = json_grammar.start(), []
    for byte in data:
        state = None if state is None else json_grammar.advance(state, byte)
        states.append(state)
    return states


def accepts(data: bytes) -> bool:
    states = recognize(data)
    return bool(states) and states[-1] is not None and json_grammar.is_done(states[-1])


def python_accepts(data: bytes) -> bool:
    """A JSON object by Python's json module (no NaN / Infinity, which are not JSON), within our depth cap."""
    def refuse(name):
        raise ValueError(name)
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=refuse)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(value, dict)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(json_objects, st.sampled_from([None, 1, 2]), st.booleans())
def test_every_serialized_object_is_accepted_and_done_only_at_its_last_byte(value, indent, ascii_only):
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    states = recognize(data)
    assert None not in states and json_grammar.is_done(states[-1])
    assert not any(json_grammar.is_done(s) for s in states[:-1])


@settings(max_examples=400, deadline=None)
@given(json_objects, st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(list(b'{}[]:,"\\ -+.0e1tx\n\x01'))),
                              min_size=1, max_size=3), st.booleans())
def test_on_any_mutated_text_it_agrees_with_python(value, edits, insert):
    """Bytes inserted into or replacing bytes of a JSON object: accepted exactly when Python's json reads an
    object (bar whitespace runs over the cap)."""
    data = bytearray(json.dumps(value).encode())
    for position, byte in edits:
        position %= len(data) + 1
        if insert or position == len(data):
            data.insert(position, byte)
        else:
            data[position] = byte
    assert accepts(bytes(data)) == python_accepts(bytes(data)), bytes(data)


@pytest.mark.parametrize("text", [
    b'{"a":01}', b'{"a":-}', b'{"a":1.}', b'{"a":.5}', b'{"a":1e}', b'{"a":1e+}', b'{"a":-0.0e+5}', b'{"a":tru}',
    b'{"a":nul}', b'{"a":"\\x"}', b'{"a":"\\u12"}', b'{"a":"\\u00e9\\n"}', b'{"a":[1,]}', b'{,}', b'{"a" 1}',
    b'{"a":1,}', b'{"a":"\x01"}', b'{}x', b'[]', b'{"a":1}}', b'{"a":[{}, [], "", 0, -1.5E-3, false]}', b' { } ',
    b'{"a":NaN}', b'{"\xc3\xa9":"\xe2\x82\xac"}', b'{"a":+1}', b'{"a":1 2}', b'{"a"}', b'{1:2}'])
def test_tricky_texts_are_judged_as_python_judges_them(text):
    assert accepts(text) == python_accepts(text)


def test_whitespace_runs_and_depth_are_capped():
    assert accepts(b"{" + b" " * json_grammar.MAX_WHITESPACE + b"}")
    assert not accepts(b"{" + b" " * (json_grammar.MAX_WHITESPACE + 1) + b"}")
    deep = json_grammar.MAX_DEPTH - 1
    assert accepts(b'{"a":' + b"[" * deep + b"]" * deep + b"}")
    assert not accepts(b'{"a":' + b"[" * (deep + 1) + b"]" * (deep + 1) + b"}")


def naive_mask(table: TokenTable, state) -> torch.Tensor:
    return torch.tensor([table.advance(state, t) is not None for t in range(table.vocab_size)])


# a vocabulary of multi-byte pieces: JSON's own characters, words, quotes and escapes inside, digits
PIECES = [bytes([b]) for b in range(256)] + [
    b'{"', b'":', b'",', b'"}', b"true", b"tr", b"ue,", b"null}", b"12", b"3.5", b"e-7", b'\\"', b"\\u00", b"e9",
    b" {", b"],", b"}}", b"hello", b' "a', b'a"', b"\n  ", b"-0", b"0.", b'""', b"\x7fz", b"\xc3\xa9", b"\\q",
    b"\\\\", b"a\x01", b"\\n", b"\t\t"]


@pytest.mark.parametrize("vocab", ["bytes", "pieces"])
def test_masks_equal_checking_every_token(vocab):
    pieces = PIECES if vocab == "pieces" else PIECES[:256]
    table = TokenTable(lambda t: pieces[t] if t < len(pieces) else None, len(pieces) + 3)
    text = json.dumps({"a": [1, -2.5e3, True, None, "x\\y\u00e9\"z"], "b": {"c": False, "": []}}, ensure_ascii=False)
    states = [json_grammar.start()] + recognize(text.encode())
    for state in states[:-1]:
        assert torch.equal(table.mask(state), naive_mask(table, state)), state
    assert not table.mask(states[0])[len(pieces):].any()


def test_a_vocabulary_without_json_characters_is_refused():
    with pytest.raises(DayzeroError, match="no single-byte tokens for"):
        TokenTable(lambda t: b"ab"[t:t + 1] or None, 3)


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def engine_with(model, num_draft: int = 0) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=512, num_draft=num_draft)
    budget = 5 * (1 + num_draft) * manifest.unit_bytes(SLOT) + 40 * manifest.unit_bytes(PAGE)
    return LLMEngine(EagerEngine(model, manifest), RuntimeOptions(token_budget=32, memory_bytes=budget),
                     ByteTokenizer().decode, frozenset({257}), ByteTokenizer().token_bytes)


# nudges a random model towards closing what it opens, so that answers end within max_tokens
CLOSING = tuple((ord(c), 4.0) for c in '"}') + ((ord("]"), 2.0),)


@pytest.mark.parametrize("num_draft", [0, 2], ids=["plain", "speculative"])
def test_the_engines_answers_are_json_objects_that_end_where_they_close(model, num_draft):
    engine = engine_with(model, num_draft)
    prompts = [[256, *b"Give me JSON:"], [256, *b"{"], [256, *b"x" * 40]]
    seqs = [engine.add_request(p, SamplingParams(max_tokens=200, temperature=1.0, seed=seed, logit_bias=CLOSING,
                                                 response_format="json_object"))
            for seed, p in enumerate(prompts)]
    greedy = engine.add_request(prompts[0], SamplingParams(max_tokens=200, logit_bias=CLOSING,
                                                           response_format="json_object"))
    plain = engine.add_request(prompts[0], SamplingParams(max_tokens=5))
    while engine.has_work:
        engine.step()
    for seq in [*seqs, greedy]:
        text = ByteTokenizer().decode(seq.output_ids)
        assert seq.finish_reason == "stop" and isinstance(json.loads(text), dict), text
    assert plain.json_answer is None and len(plain.output_ids) == 5


def test_a_tokenizer_that_cannot_give_token_bytes_is_refused(model):
    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=128)
    engine = LLMEngine(EagerEngine(model, manifest), RuntimeOptions(memory_bytes=64 << 20))
    with pytest.raises(DayzeroError, match="JSON answers need the tokenizer's token bytes"):
        engine.add_request([1, 2], SamplingParams(response_format="json_object"))


def test_the_api_takes_json_object_and_refuses_schemas(model, tmp_path):
    server = make_server(model, tmp_path)
    try:
        with TestClient(server.app) as client:
            fields = {"max_tokens": 200, "temperature": 0.7, "seed": 3, "response_format": {"type": "json_object"},
                      "logit_bias": {str(t): b for t, b in CLOSING}}
            chat = client.post("/v1/chat/completions", json={"messages": HI, **fields}).json()["choices"][0]
            assert chat["finish_reason"] == "stop" and isinstance(json.loads(chat["message"]["content"]), dict)
            text = client.post("/v1/completions", json={"prompt": "JSON:", **fields}).json()["choices"][0]
            assert text["finish_reason"] == "stop" and isinstance(json.loads(text["text"]), dict)
            schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
            reply = client.post("/v1/chat/completions", json={"messages": HI, "response_format": schema})
            assert reply.status_code == 400 and "ask for json_object" in reply.json()["error"]["message"]
            assert_nothing_open(server)
    finally:
        server.close()
