"""Answers held to JSON (`response_format` json_object or json_schema), through xgrammar: whole texts are accepted
as Python's json module reads them and, held to a schema, every instance is accepted and only texts that follow it
(checked by the jsonschema library); the vocabulary masks equal a token-by-token check of every token; the engine's
answers (sampled from a random model) are JSON objects that end where they close and follow their schema; schemas it
cannot hold are refused by what is wrong."""

from __future__ import annotations

import functools
import json
import re

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from dayzero.contract import PAGE, SLOT
from dayzero.errors import DayzeroError
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.grammar_bitmask import unpack_bitmask
from dayzero.runtime.held_drafts import bitmask_along, held_draft
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.structured.held_answer import HeldAnswer
from dayzero.structured.json_answer import json_answer
from dayzero.structured.json_schema import MAX_WHITESPACE, SchemaError, checked_schema
from dayzero.structured.vocabulary import Vocabulary
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import random_model, tiny_config_dict
from tests.server.test_server import HI, assert_nothing_open, make_server

BYTES = Vocabulary(ByteTokenizer().token_bytes, 259, {257})


def answer_to(schema: dict | None = None, vocabulary: Vocabulary = BYTES) -> HeldAnswer:
    return HeldAnswer(vocabulary.compile(json_answer(None if schema is None else checked_text(json.dumps(schema)))))


@functools.cache
def checked_text(schema: str) -> str:
    return checked_schema(json.loads(schema))


def recognize(data: bytes, schema: dict | None = None) -> list[bool | None]:
    """After each byte: whether the answer is done (None from the first refused byte on)."""
    answer, states = answer_to(schema), []
    for byte in data:
        states.append(answer.done if states[-1:] != [None] and answer.take(byte) else None)
    return states


def accepts(data: bytes, schema: dict | None = None) -> bool:
    states = recognize(data, schema)
    return bool(states) and states[-1] is True


def python_accepts(data: bytes) -> bool:
    """A JSON object by Python's json module (no NaN / Infinity, which are not JSON), which starts and ends the text
    (an answer begins at its object and ends where it closes)."""
    def refuse(name):
        raise ValueError(name)
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=refuse)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(value, dict) and data.strip() == data


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
    assert None not in states and states[-1] is True
    assert not any(states[:-1])


@settings(max_examples=400, deadline=None)
@given(json_objects, st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(list(b'{}[]:,"\\ -+.0e1tx\n\x01'))),
                              min_size=1, max_size=3), st.booleans())
def test_on_any_mutated_text_it_agrees_with_python(value, edits, insert):
    """Bytes inserted into or replacing bytes of a JSON object: accepted exactly when Python's json reads an
    object that starts and ends the text."""
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


def test_whitespace_runs_are_capped():
    assert accepts(b"{" + b" " * MAX_WHITESPACE + b"}")
    assert not accepts(b"{" + b" " * (MAX_WHITESPACE + 1) + b"}")


def naive_mask(answer: HeldAnswer) -> torch.Tensor:
    """Each token checked by taking it (and taking it back)."""
    allowed = []
    for token in range(answer.vocab_size):
        taken = answer.take(token)
        answer.rollback(int(taken))
        allowed.append(taken)
    return torch.tensor(allowed)


def mask_of(answer: HeldAnswer) -> torch.Tensor:
    return torch.isfinite(answer.mask(torch.zeros(1, answer.vocab_size)))[0]


def pieces_vocabulary(pieces: list[bytes], extra: int = 0) -> Vocabulary:
    return Vocabulary(lambda t: pieces[t] if t < len(pieces) else None, len(pieces) + extra, {len(pieces)})


# a vocabulary of multi-byte pieces: JSON's own characters, words, quotes and escapes inside, digits
PIECES = [bytes([b]) for b in range(256)] + [
    b'{"', b'":', b'",', b'"}', b"true", b"tr", b"ue,", b"null}", b"12", b"3.5", b"e-7", b'\\"', b"\\u00", b"e9",
    b" {", b"],", b"}}", b"hello", b' "a', b'a"', b"\n  ", b"-0", b"0.", b'""', b"\x7fz", b"\xc3\xa9", b"\\q",
    b"\\\\", b"a\x01", b"\\n", b"\t\t"]


@pytest.mark.parametrize("vocab", ["bytes", "pieces"])
def test_masks_equal_checking_every_token(vocab):
    pieces = PIECES if vocab == "pieces" else PIECES[:256]
    answer = answer_to(None, pieces_vocabulary(pieces, 3))
    assert not mask_of(answer)[len(pieces):].any()
    text = json.dumps({"a": [1, -2.5e3, True, None, "x\\y\u00e9\"z"], "b": {"c": False, "": []}}, ensure_ascii=False)
    for byte in text.encode():
        assert torch.equal(mask_of(answer), naive_mask(answer)), answer.tokens
        assert answer.take(byte)


def test_a_vocabulary_without_json_characters_is_refused():
    with pytest.raises(DayzeroError, match="no single-byte tokens for"):
        Vocabulary(lambda t: b"ab"[t:t + 1] or None, 3, set())


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


def test_the_api_holds_answers_to_json_and_to_schemas(model, tmp_path):
    server = make_server(model, tmp_path)
    try:
        with TestClient(server.app) as client:
            fields = {"max_tokens": 300, "temperature": 0.7, "seed": 3, "logit_bias": {str(t): b for t, b in CLOSING}}
            json_object = {"response_format": {"type": "json_object"}, **fields}
            chat = client.post("/v1/chat/completions", json={"messages": HI, **json_object}).json()["choices"][0]
            assert chat["finish_reason"] == "stop" and isinstance(json.loads(chat["message"]["content"]), dict)
            text = client.post("/v1/completions", json={"prompt": "JSON:", **json_object}).json()["choices"][0]
            assert text["finish_reason"] == "stop" and isinstance(json.loads(text["text"]), dict)
            schema = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
            reply = client.post("/v1/chat/completions", json={"messages": HI, "response_format": schema, **fields})
            answer = reply.json()["choices"][0]
            assert answer["finish_reason"] == "stop"
            jsonschema.validate(json.loads(answer["message"]["content"]), PERSON)
            bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"id": {"type": "integer", "multipleOf": 3}}}}}
            reply = client.post("/v1/chat/completions", json={"messages": HI, "response_format": bad})
            assert reply.status_code == 400 and "multipleOf cannot be enforced" in reply.json()["error"]["message"]
            assert_nothing_open(server)
    finally:
        server.close()


# schemas as clients send them (pydantic-style: $defs, optional fields as anyOf with null, enums, nested arrays)
PERSON = {
    "type": "object", "title": "Person",
    "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"},
        "email": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}], "default": None},
        "role": {"enum": ["admin", "user", 7]}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "home": {"$ref": "#/$defs/Address"}},
    "required": ["name", "age", "role"],
    "$defs": {"Address": {"type": "object", "properties": {"zip": {"type": "string"}, "lat": {"type": "number"}},
                          "required": ["lat"]}}}
TREE = {"type": "object", "properties": {"value": {"type": "integer"},
                                         "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
        "required": ["value", "children"], "$defs": {"Tree": {"$ref": "#"}}}
MIXED = {"type": "object", "properties": {
    "x": {"type": ["number", "string", "null", "boolean"]}, "c": {"const": "fixed"},
    "list": {"type": "array", "minItems": 1, "maxItems": 3,
             "items": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
    "free": {"type": "object"}, "anything": {}},
    "required": ["x", "list"], "additionalProperties": False}


UNESCAPED = st.characters(exclude_categories=("Cs", "Cc"), exclude_characters='"\\')


def unescaped(text: str) -> bool:
    return all(c >= " " and c not in '"\\' for c in text)


def instances(schema: dict, root: dict, depth: int = 0):
    """A hypothesis strategy of values that follow `schema`, with keys in its order (optional ones sometimes left
    out), as the grammar spells them: a string held to a length or a pattern (matched whole) takes no character
    that JSON escapes."""
    if "$ref" in schema:
        target = root if schema["$ref"] == "#" else root["$defs"][schema["$ref"].split("/")[-1]]
        return instances(target, root, depth + 1)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([instances(m, root, depth) for m in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([instances({**schema, "type": k}, root, depth) for k in kind])
    if kind == "object" and "properties" in schema:
        def build(draw):
            value = {}
            for name, sub in schema["properties"].items():
                if name in schema.get("required", []) or draw(st.booleans()):
                    value[name] = draw(instances(sub, root, depth + 1))
            return value
        return st.composite(lambda draw: build(draw))()
    if kind == "array":
        items = instances(schema.get("items", {}), root, depth + 1)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 3), 3)
                        if depth < 3 else schema.get("minItems", 0))
    if kind == "string" and "pattern" in schema:
        fits = st.from_regex(re.compile(schema["pattern"], re.ASCII), fullmatch=True)
        return fits.filter(lambda text: len(text) <= schema.get("maxLength", len(text)) and unescaped(text))
    if kind == "string" and {"minLength", "maxLength"} & set(schema):
        return st.text(UNESCAPED, min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 6))
    if kind == "string":
        return st.text(max_size=6)
    if kind in ("integer", "number") and {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(schema):
        return bounded_numbers(schema, kind)
    simple = {"integer": st.integers(-10**9, 10**9), "boolean": st.booleans(),
              "number": st.floats(allow_nan=False, allow_infinity=False), "null": st.none()}
    return simple[kind] if kind in simple else json_objects


# length-bounded strings (pydantic's constr / Field(max_length=...)): keys, values, an optional bounded one
BOUNDED = {"type": "object", "properties": {
    "code": {"type": "string", "minLength": 2, "maxLength": 3}, "note": {"type": "string", "maxLength": 4},
    "name": {"type": ["string", "null"], "minLength": 1}, "exact": {"type": "string", "minLength": 1, "maxLength": 1}},
    "required": ["code", "exact"]}
# bounded numbers (pydantic's Field(ge=..., lt=...)): inclusive and exclusive, negative, integers and numbers
NUMBERS = {"type": "object", "properties": {
    "age": {"type": "integer", "minimum": 0, "maximum": 150}, "score": {"type": "number", "exclusiveMinimum": 0,
                                                                          "maximum": 1},
    "delta": {"type": "number", "minimum": -2.5, "exclusiveMaximum": -0.5}, "big": {"type": "integer",
                                                                                  "exclusiveMinimum": 99},
    "neg": {"type": ["integer", "null"], "maximum": -3}}, "required": ["age", "score"]}
BOUNDED_DECIMALS = 6


def bounded_numbers(schema: dict, kind: str):
    """Numbers inside a schema's bounds; floats as json.dumps writes them without an exponent, to at most
    BOUNDED_DECIMALS decimals (the form a bounded number takes)."""
    low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum",
                                                                                  schema.get("exclusiveMaximum"))
    if kind == "integer":
        low = None if low is None else low + ("exclusiveMinimum" in schema)
        high = None if high is None else high - ("exclusiveMaximum" in schema)
        return st.integers(min_value=low, max_value=high)
    floats = st.floats(min_value=low, max_value=high, exclude_min="exclusiveMinimum" in schema,
                       exclude_max="exclusiveMaximum" in schema, allow_nan=False, allow_infinity=False)
    return floats.map(lambda x: round(x, BOUNDED_DECIMALS)).filter(
        lambda x: "e" not in repr(x) and jsonschema.Draft202012Validator(schema).is_valid(x))


# patterns (pydantic's constr(pattern=...)): anchored and not, one bounding its length
PATTERNED = {"type": "object", "properties": {
    "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]?$"},
    "tag": {"type": "string", "pattern": "x[a-c]{1,4}"},
    "slug": {"type": ["string", "null"], "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"}}, "required": ["date", "code"]}
SCHEMAS = {"person": PERSON, "tree": TREE, "mixed": MIXED, "bounded": BOUNDED, "numbers": NUMBERS,
           "patterned": PATTERNED}


@pytest.mark.parametrize("name", SCHEMAS)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_instance_of_a_schema_is_accepted(name, data):
    schema = SCHEMAS[name]
    value = data.draw(instances(schema, schema))
    jsonschema.validate(value, schema)
    # a length-bounded string's characters come unescaped (\\u00e9 would be refused)
    ascii_only = data.draw(st.booleans()) and name != "bounded"
    text = json.dumps(value, ensure_ascii=ascii_only, indent=data.draw(st.sampled_from([None, 1])))
    assert accepts(text.encode(), schema), text


@pytest.mark.parametrize("name", SCHEMAS)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), edits=st.lists(st.tuples(st.integers(0, 10**6),
                                                st.sampled_from(list(b'{}[]:,"0-1.tnx \x01\t\\'))),
                                      min_size=1, max_size=3))
def test_a_mutated_instance_is_accepted_only_if_it_follows_the_schema(name, data, edits):
    schema = SCHEMAS[name]
    text = bytearray(json.dumps(data.draw(instances(schema, schema))).encode())
    for position, byte in edits:
        text.insert(position % (len(text) + 1), byte)
    if accepts(bytes(text), schema):
        jsonschema.validate(json.loads(bytes(text)), schema)


@pytest.mark.parametrize("schema, value, ascii_only", [
    (PERSON, {"name": "Al \"x\"", "age": -12, "email": None, "role": 7, "tags": ["a"],
              "home": {"zip": "0", "lat": 1.5e-3}}, True),
    (BOUNDED, {"code": "éa", "note": "ab\u00e9", "name": "\U0001f600 x", "exact": "\u20ac"}, False),
    (NUMBERS, {"age": 150, "score": 0.25, "delta": -2.5, "big": 1000, "neg": -30}, True),
    (PATTERNED, {"date": "2026-12-05", "code": "AB1", "tag": "xab", "slug": "day-zero"}, True),
    ({"type": "object", "properties": {"s": {"type": "string", "minLength": 12, "maxLength": 30}}, "required": ["s"]},
     {"s": "a quoted word, \u00e9 and more"}, False),
], ids=["person", "bounded", "numbers", "patterned", "long-bounded"])
def test_schema_masks_equal_checking_every_token(schema, value, ascii_only):
    """The masks of every place along an instance, over a vocabulary of multi-byte pieces, equal checking each
    token."""
    answer = answer_to(schema, pieces_vocabulary(PIECES))
    for byte in json.dumps(value, ensure_ascii=ascii_only).encode():
        assert torch.equal(mask_of(answer), naive_mask(answer)), answer.tokens
        assert answer.take(byte)
    assert answer.done


def nested(innermost: dict, levels: int, wrap) -> dict:
    """An object schema holding `levels` schemas made by `wrap` inside one another, around `innermost`."""
    for _ in range(levels):
        innermost = wrap(innermost)
    return {"type": "object", "properties": {"a": innermost}}


@pytest.mark.parametrize("schema, says", [
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}}, "lookaround"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}}, "multipleOf cannot be enforced"),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}}, "minLength / maxLength must be"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}},
     "minLength <= maxLength"),
    ({"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": True}}}, "must be finite numbers"),
    ({"type": "array"}, "root must be an object"),
    ({"type": "object", "properties": {"a": {"oneOf": [{"type": "object"}, {"type": "object"}]}}},
     "must be of different types"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "\\bx"}}}, "Word boundary"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$", "maxLength": 3}}},
     "pattern with minLength / maxLength"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}}, "names no definition"),
    ({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}, "only local references"),
    ({"type": "object", "properties": {}, "required": ["a"]}, "which properties does not define"),
    ({"type": "object", "properties": {"a": {"type": "date"}}}, "unknown type"),
    ({"type": "object", "properties": {"a": {"const": {"k": 1}}}}, "must be strings, numbers, booleans or null"),
    (nested({"type": "integer"}, 63, lambda inner: {"type": "array", "items": inner}), "nests deeper than 64 schemas"),
    (nested({}, 450, lambda inner: {"type": "object", "properties": {"a": inner}}), "nests deeper than 64 schemas"),
    ({"type": "object", "properties": {"a": {}}, "required": [["a"]]}, "required a list of names"),
    ({"type": "object", "properties": {"a": {"type": [["string"]]}}}, "unknown type"),
    ({"type": "object", "properties": {"a": {"type": {}}}}, "unknown type"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}, "$defs": []}, "names no definition"),
    ({"type": "object", "properties": {"a": {"$ref": {"#": 1}}}}, "only local references"),
    ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 10**400}}}, "must be finite numbers"),
])
def test_schemas_it_cannot_hold_are_refused_by_what_is_wrong(schema, says):
    with pytest.raises(SchemaError, match=says):
        checked_schema(schema)


def test_the_engines_answers_follow_a_schema(model):
    engine = engine_with(model)
    params = [SamplingParams(max_tokens=300, temperature=1.0, seed=seed, logit_bias=CLOSING,
                             response_format="json_schema", json_schema=json.dumps(schema))
              for seed, schema in enumerate([PERSON, MIXED, BOUNDED, NUMBERS, PATTERNED])]
    seqs = [engine.add_request([256, *b"Answer:"], p) for p in params]
    while engine.has_work:
        engine.step()
    for seq, schema in zip(seqs, [PERSON, MIXED, BOUNDED, NUMBERS, PATTERNED]):
        text = ByteTokenizer().decode(seq.output_ids)
        assert seq.finish_reason == "stop", text
        jsonschema.validate(json.loads(text), schema)


def test_warm_up_builds_the_vocabulary_table_so_no_request_waits_for_it(model):
    from dayzero.runtime.engine_loop import EngineLoop

    engine = engine_with(model)
    assert engine._vocabulary is None
    EngineLoop(engine).warm_up()
    assert engine._vocabulary is not None and engine._grammars() is engine._vocabulary


def _greedy_answers(model, num_draft: int, **format_fields):
    engine = engine_with(model, num_draft)
    prompts = [[256, *b"Give me JSON:"], [256, *b"{"], [256, *b"x" * 40], [256, *b'{"a": [1, 1, 1, 1']]
    seqs = [engine.add_request(p, SamplingParams(max_tokens=200, logit_bias=CLOSING, **format_fields))
            for p in prompts]
    while engine.has_work:
        engine.step()
    return [seq.output_ids for seq in seqs], engine.stats


def test_drafts_under_a_schema_are_verified_against_its_masks(model):
    """Speculation on answers held to a schema: drafts cut where the grammar refuses them, each verify row masked by
    the state after the drafts before it, so greedy answers equal those decoded token by token."""
    schema = checked_schema(PERSON)
    plain, _ = _greedy_answers(model, 0, response_format="json_schema", json_schema=schema)
    speculative, stats = _greedy_answers(model, 3, response_format="json_schema", json_schema=schema)
    assert speculative == plain
    assert stats.accepted_tokens > 0 and stats.drafted_tokens > stats.accepted_tokens
    for ids in speculative:
        jsonschema.validate(json.loads(ByteTokenizer().decode(ids)), PERSON)


def test_a_held_draft_stops_at_the_first_refused_token_and_at_the_answers_end():
    answer = answer_to()
    assert held_draft(answer, [*b'{"a":1', ord("]"), *b"}"]) == [*b'{"a":1']
    assert held_draft(answer, [*b"{}", *b"  "]) == [*b"{}"]
    assert answer.tokens == [] and answer.take(ord("{"))  # the sequence's own place did not move
    answer.rollback(1)
    allowed = unpack_bitmask(bitmask_along(answer, [*b"{}"]), 259)
    assert not allowed[0, ord("}")] and allowed[1, ord("}")] and allowed[2].all()
    assert answer.tokens == []


@pytest.mark.parametrize("text, bounds, expected", [
    (b"1", {"type": "integer", "minimum": 10, "maximum": 100}, True),
    (b"123", {"type": "integer", "minimum": 10, "maximum": 100}, False),
    (b"-1", {"type": "integer", "minimum": 0}, False),
    (b"0.", {"type": "number", "exclusiveMinimum": 0.5, "maximum": 0.6}, True),
    (b"0.5", {"type": "number", "exclusiveMinimum": 0.5}, True),
    (b"0.4", {"type": "number", "exclusiveMinimum": 0.5}, False),
    (b"-2", {"type": "number", "minimum": -1.5}, False),
    (b"9", {"type": "integer", "exclusiveMinimum": 99}, True), (b"0", {"type": "integer", "minimum": 1}, False),
])
def test_a_bounded_numbers_digits_keep_a_way_into_its_bounds(text, bounds, expected):
    """A number's digits are taken only while some number within its bounds begins with them."""
    states = recognize(b'{"n": ' + text, {"type": "object", "properties": {"n": bounds}, "required": ["n"]})
    assert (states[-1] is not None) == expected


def test_a_number_that_ends_outside_its_bounds_is_refused():
    assert accepts(b'{"age": 150, "score": 1}', NUMBERS) and not accepts(b'{"age": 151, "score": 1}', NUMBERS)
    assert not accepts(b'{"age": 1, "score": 0}', NUMBERS) and not accepts(b'{"age": 1, "score": 0.5, "big": 99}',
                                                                            NUMBERS)
