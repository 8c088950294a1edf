"""Bad input never reaches a 500 or a traceback: each malformed request gets OpenAI's JSON 4xx naming the problem, is
counted in /metrics, and leaves its keep-alive connection serving the next request; fields dayzero does not know are
refused by name, the ones it documents are taken; an exception no route expected answers a JSON 500 the same way;
and generated malformed bodies at every route get no 5xx."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from dayzero.server.listener import serve_in_thread
from dayzero.server.request_run import RequestRun
from tests.helpers import random_model, tiny_config_dict
from tests.server.test_server import HI, events, expected_text, greedy, make_server

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
NEXT_PROMPT = "next request"


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


@pytest.fixture(scope="module")
def served(model, tmp_path_factory):
    server = make_server(model, tmp_path_factory.mktemp("checkpoint"))
    base, stop = serve_in_thread(server.app)
    yield server, base
    stop()
    server.close()


@pytest.fixture
def http(served):
    with httpx.Client(base_url=served[1], timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def next_text(model) -> str:
    return expected_text(model, NEXT_PROMPT, 3)


def local_port(reply: httpx.Response) -> int:
    """The client's port of the connection a reply came over."""
    return reply.extensions["network_stream"].get_extra_info("client_addr")[1]


def assert_next_request_served(http: httpx.Client, before: httpx.Response, next_text: str) -> None:
    """The same connection answers a normal request with the model's greedy text."""
    reply = http.post(COMPLETIONS, json=greedy(prompt=NEXT_PROMPT, max_tokens=3))
    assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == next_text
    assert local_port(reply) == local_port(before), "the server closed the connection after the bad request"


def counted(http: httpx.Client, route: str, status: int) -> float:
    text = http.get("/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "dayzero_requests_total" and s.labels == {"route": route, "status": str(status)})


def nested_schema(levels: int, key: str) -> dict:
    """An object schema with `levels` object ("properties") or array ("items") schemas inside one another."""
    inner = {"type": "integer"}
    for _ in range(levels):
        inner = {"type": "object", "properties": {"a": inner}} if key == "properties" else {"type": "array",
                                                                                           "items": inner}
    return {"type": "object", "properties": {"a": inner}}


def json_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}


DEEP = "[" * 100_000 + "]" * 100_000
BAD_REQUESTS = {
    "surrogate-prompt": (COMPLETIONS, json.dumps(greedy(prompt="a\ud800b", max_tokens=2)), 400,
                         "'prompt' holds a lone UTF-16 surrogate (\\ud800)"),
    "surrogate-message": (CHAT, json.dumps(greedy(messages=[{"role": "user", "content": "a\ud800b"}], max_tokens=2)),
                          400, "'messages[0].content' holds a lone UTF-16 surrogate"),
    "surrogate-key": (COMPLETIONS, json.dumps(greedy(prompt="x", logit_bias={"\udc00": 1})), 400,
                      "'logit_bias.\\udc00' holds a lone UTF-16 surrogate"),
    "invalid-utf8": (COMPLETIONS, b'{"prompt": "a\xffb"}', 400, "not valid JSON"),
    "nested-100000": (COMPLETIONS, '{"prompt": "x", "stop": ' + DEEP + "}", 400,
                      "nests deeper than 128 levels of objects and arrays"),
    "schema-450-deep": (COMPLETIONS, json.dumps(greedy(prompt="x", response_format=json_format(
        nested_schema(450, "properties")))), 400, "'response_format' nests deeper than 128 levels"),
    "schema-65-deep": (COMPLETIONS, json.dumps(greedy(prompt="x", response_format=json_format(
        nested_schema(65, "items")))), 400,
        "response_format.json_schema: the JSON schema nests deeper than 64 schemas"),
    "over-the-body-limit": (COMPLETIONS, json.dumps(greedy(prompt="x" * (4 << 20))), 413, "over 4194304 bytes"),
    "integer-past-a-double": (COMPLETIONS, json.dumps(greedy(prompt="x", temperature=10**400)), 400,
                              "'temperature' must be in [0.0, 2.0]"),
    "bias-past-a-double": (COMPLETIONS, json.dumps(greedy(prompt="x", logit_bias={"1": 10**400})), 400,
                           "'logit_bias' must map token ids to numbers"),
    "schema-required-not-names": (COMPLETIONS, json.dumps(greedy(prompt="x", response_format=json_format(
        {"type": "object", "properties": {"a": {}}, "required": [["a"]]}))), 400, "required a list of names"),
    "tool-without-name": (CHAT, json.dumps(greedy(messages=HI, tools=[{"type": "function", "function": {}}])), 400,
                          "the function needs a name"),
    "tool-name-not-text": (CHAT, json.dumps(greedy(messages=HI, tools=[{"type": "function",
                                                                         "function": {"name": 7}}])),
                           400, "the function needs a name"),
    "misspelt-field": (COMPLETIONS, json.dumps(greedy(prompt="x", max_new_tokens=40)), 400,
                       "takes no field 'max_new_tokens' (did you mean 'max_tokens'?)"),
    "chat-field-on-completions": (COMPLETIONS, json.dumps(greedy(prompt="x", messages=HI)), 400,
                                  "/v1/completions takes no field 'messages'"),
    "unknown-fields": (CHAT, json.dumps(greedy(messages=HI, skip_special_tokens=True, best_effort=1)), 400,
                       "takes no field 'best_effort', 'skip_special_tokens'"),
    "unsupported-field": (CHAT, json.dumps(greedy(messages=HI, reasoning_effort="high")), 400,
                          "'reasoning_effort' is not supported by dayzero"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_a_bad_request_gets_a_counted_json_4xx_and_the_connection_serves_the_next(http, next_text, case):
    route, content, status, says = BAD_REQUESTS[case]
    before = counted(http, route, status)
    reply = http.post(route, content=content, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert says in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert counted(http, route, status) == before + 1
    assert_next_request_served(http, reply, next_text)


def test_documented_fields_and_extensions_are_taken(http, model):
    extensions = {"top_k": 5, "min_p": 0.0, "repetition_penalty": 1.0, "min_tokens": 1, "stop_token_ids": [],
                  "user": "someone", "metadata": {"team": "a"}, "store": False, "service_tier": "auto",
                  "modalities": ["text"], "suffix": "", "best_of": 1, "stream_options": None}
    reply = http.post(COMPLETIONS, json=greedy(prompt="fields", max_tokens=4, **extensions))
    assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == expected_text(model, "fields", 4)
    chat = greedy(messages=HI, max_completion_tokens=3, parallel_tool_calls=True, tool_choice="none", tools=[],
                  top_logprobs=None, logprobs=False, prompt_cache_key="k", safety_identifier="s")
    reply = http.post(CHAT, json=chat)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == expected_text(model, "user: hi\nassistant:", 3)


def test_an_unexpected_error_answers_a_counted_json_500_and_the_connection_serves_the_next(
        http, served, next_text, monkeypatch):
    server, _ = served

    def broken(prompt, add_special_tokens):
        raise RuntimeError("a bug with a secret detail")

    monkeypatch.setattr(server, "_encode", broken)
    before = counted(http, COMPLETIONS, 500)
    reply = http.post(COMPLETIONS, json=greedy(prompt="x", max_tokens=2))
    assert reply.status_code == 500 and reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]
    assert "secret detail" not in reply.text and "Traceback" not in reply.text
    assert counted(http, COMPLETIONS, 500) == before + 1
    monkeypatch.undo()
    assert_next_request_served(http, reply, next_text)


def test_an_unexpected_error_in_a_stream_ends_it_with_an_error_event(http, next_text, monkeypatch):
    def broken(self, index, update):
        raise KeyError("a bug")

    monkeypatch.setattr(RequestRun, "apply", broken)
    reply = http.post(COMPLETIONS, json=greedy(prompt="x", max_tokens=5, stream=True))
    monkeypatch.undo()
    assert reply.status_code == 200
    lines = [line.removeprefix("data: ") for line in reply.text.split("\n\n") if line]
    last = json.loads(lines[-1])
    assert last["error"]["type"] == "server_error" and "KeyError" in last["error"]["message"]
    assert "Traceback" not in reply.text
    assert_next_request_served(http, reply, next_text)
    assert events(http.post(COMPLETIONS, json=greedy(prompt="x", max_tokens=2, stream=True)))


FIELDS = ["prompt", "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n",
          "seed", "stop", "stream", "stream_options", "logprobs", "top_logprobs", "echo", "logit_bias",
          "response_format", "tools", "tool_choice", "stop_token_ids", "min_tokens", "ignore_eos", "max_new_tokens"]
SURROGATES = st.sampled_from(["\ud800", "\udfff", "a\udbffz"])
texts = st.text(max_size=6) | SURROGATES
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 40) | st.floats(allow_nan=True, allow_infinity=True) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6)


@st.composite
def malformed_bodies(draw) -> bytes:
    """A body as a careless or hostile client sends it: any JSON value, a valid request with fields of any type,
    deep nesting, bad unicode (lone surrogates, invalid UTF-8), or JSON cut short."""
    chat = draw(st.booleans())
    base = greedy(messages=HI, max_tokens=2) if chat else greedy(prompt="hi", max_tokens=2)
    kind = draw(st.sampled_from(["value", "fields", "nested", "bytes", "cut"]))
    if kind == "value":
        return json.dumps(draw(json_values)).encode()
    if kind == "fields":
        body = {**base, **draw(st.dictionaries(st.sampled_from(FIELDS), json_values, min_size=1, max_size=3))}
        if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            body["max_tokens"] = 2  # keep chat answers short (they otherwise run to the context's end)
        return json.dumps(body).encode()
    if kind == "nested":
        depth = draw(st.integers(100, 50_000))
        field = draw(st.sampled_from(FIELDS))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        return f'{{"prompt": "x", "{field}": {opening * depth}1{closing * depth}}}'.encode()
    if kind == "bytes":
        noise = draw(st.binary(min_size=1, max_size=8))
        return b'{"prompt": "' + noise + b'", "max_tokens": 2}'
    whole = json.dumps(base).encode()
    return whole[: draw(st.integers(0, len(whole) - 1))]


ROUTES = [("POST", COMPLETIONS), ("POST", CHAT), ("GET", "/v1/models"), ("POST", "/v1/models"), ("GET", "/health"),
          ("POST", "/metrics"), ("POST", "/v1/nothing")]


@settings(max_examples=40, deadline=timedelta(seconds=20), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                                   HealthCheck.too_slow])
@given(body=malformed_bodies(), route=st.sampled_from(ROUTES))
def test_malformed_bodies_at_every_route_get_no_5xx_and_the_server_answers_after(http, next_text, body, route):
    method, path = route
    reply = http.request(method, path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code < 500, reply.text
    assert "Traceback" not in reply.text
    if reply.status_code >= 400 and path.startswith("/v1/"):
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
    assert_next_request_served(http, reply, next_text)
