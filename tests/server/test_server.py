"""The OpenAI-compatible server: answers equal the eager reference's greedy tokens, whole or streamed, alone or
side by side; bad requests get OpenAI error bodies with the right status and leave nothing open; a client that
goes away has its requests cancelled; an engine that fails says so."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from dayzero.contract import PAGE, SLOT
from dayzero.errors import DayzeroError
from dayzero.llm.api import LLM
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.generate import greedy_generate
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.server.http_host import run_server
from dayzero.server.listener import serve_in_thread
from dayzero.server.server import OpenAIServer, ServerOptions
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import random_model, tiny_config_dict

MODEL = "tiny-test"
MAX_LEN = 512


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def make_llm(model, tmp_path, prefix_caching: bool = False) -> LLM:
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=MAX_LEN)
    budget = 5 * manifest.unit_bytes(SLOT) + 40 * manifest.unit_bytes(PAGE)
    runtime = RuntimeOptions(token_budget=32, memory_bytes=budget, prefix_caching=prefix_caching, snapshot_every=64)
    return LLM(tmp_path, runtime=runtime, engine=EagerEngine(model, manifest))


def make_server(model, tmp_path, engine_thread: bool = True, prefix_caching: bool = False,
                **options) -> OpenAIServer:
    llm = make_llm(model, tmp_path, prefix_caching)
    return OpenAIServer(llm, ServerOptions(model_name=MODEL, **options), engine_thread=engine_thread)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    server = make_server(model, tmp_path_factory.mktemp("checkpoint"), max_open=6, max_body_bytes=4096)
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(server):
    with TestClient(server.app) as client:
        yield client


def expected_text(model, prompt: str, max_tokens: int) -> str:
    tokens = list(greedy_generate(model, ByteTokenizer().encode(prompt), max_tokens))
    return ByteTokenizer().decode(tokens)


def events(response: httpx.Response) -> list:
    lines = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def assert_nothing_open(server: OpenAIServer, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (server.num_open or server.llm.engine.has_work) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.num_open == 0 and not server.llm.engine.has_work


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def greedy(**fields) -> dict:
    return {"model": MODEL, "temperature": 0, "ignore_eos": True, **fields}


def test_completion_is_the_reference_greedy_text(client, server, model):
    reply = client.post("/v1/completions", json=greedy(prompt="The hybrid model", max_tokens=7))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "text_completion" and body["model"] == MODEL and body["id"].startswith("cmpl-")
    assert body["choices"] == [{"index": 0, "text": expected_text(model, "The hybrid model", 7), "logprobs": None,
                                "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": 17, "completion_tokens": 7, "total_tokens": 24}
    assert_nothing_open(server)


def test_streamed_pieces_add_up_to_the_whole_answer(client, server, model):
    request = greedy(prompt="Stream me", max_tokens=9, stream=True, stream_options={"include_usage": True})
    reply = client.post("/v1/completions", json=request)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    chunks = events(reply)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 9
    pieces = [c["choices"][0] for c in chunks[:-1]]
    assert "".join(p["text"] for p in pieces) == expected_text(model, "Stream me", 9)
    assert [p["finish_reason"] for p in pieces] == [None] * (len(pieces) - 1) + ["length"]
    assert_nothing_open(server)


def test_chat_stream_names_the_role_first_and_matches_the_whole_answer(client, server):
    request = greedy(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                     max_tokens=6)
    whole = client.post("/v1/chat/completions", json=request).json()
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["role"] == "assistant"
    # the embedded model has no chat template: a plain transcript ending in "assistant:"
    assert whole["usage"]["prompt_tokens"] == len(ByteTokenizer().encode("system: Be brief.\nuser: Hi\nassistant:"))
    chunks = events(client.post("/v1/chat/completions", json={**request, "stream": True}))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert_nothing_open(server)


def test_concurrent_requests_each_get_their_own_answer(server, model):
    prompts = ["a", "a longer prompt of several words", "x" * 70, "mid-sized prompt"]

    async def ask_all():
        transport = httpx.ASGITransport(app=server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            requests = [http.post("/v1/completions", json=greedy(prompt=p, max_tokens=5 + i))
                        for i, p in enumerate(prompts)]
            return await asyncio.gather(*requests)

    replies = asyncio.run(ask_all())
    for i, (prompt, reply) in enumerate(zip(prompts, replies)):
        assert reply.json()["choices"][0]["text"] == expected_text(model, prompt, 5 + i), prompt
    assert_nothing_open(server)


def test_prompt_lists_and_n_choices_are_indexed_and_seeds_replay(client, server, model):
    request = {"model": MODEL, "prompt": ["one", [256, 120, 121]], "n": 2, "max_tokens": 4, "temperature": 1.0,
               "seed": 7, "ignore_eos": True}
    first = client.post("/v1/completions", json=request).json()
    again = client.post("/v1/completions", json=request).json()
    assert [c["index"] for c in first["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in first["choices"]] == [c["text"] for c in again["choices"]]
    assert first["usage"] == {"prompt_tokens": 4 + 3, "completion_tokens": 16, "total_tokens": 23}
    assert_nothing_open(server)


def test_echo_puts_each_prompt_before_its_answers_whole_and_streamed(client, server, model):
    request = greedy(prompt=["Echo me", [69, 99, 104]], n=2, max_tokens=5, echo=True)
    ids_answer = ByteTokenizer().decode(list(greedy_generate(model, [69, 99, 104], 5)))
    answers = [expected_text(model, "Echo me", 5), ids_answer]
    whole = client.post("/v1/completions", json=request).json()
    assert [c["text"] for c in whole["choices"]] == ["Echo me" + answers[0]] * 2 + ["Ech" + answers[1]] * 2
    assert whole["usage"]["completion_tokens"] == 20
    streamed = events(client.post("/v1/completions", json={**request, "stream": True}))
    texts = ["", "", "", ""]
    for piece in (c for chunk in streamed for c in chunk["choices"]):
        texts[piece["index"]] += piece["text"]
    assert texts == [c["text"] for c in whole["choices"]]
    assert client.post("/v1/completions", json={**request, "echo": None}).json()["choices"][0]["text"] == answers[0]
    assert_nothing_open(server)


def test_stop_token_ids_end_the_answer_at_the_first_of_them(client, server, model):
    tokens = list(greedy_generate(model, ByteTokenizer().encode("stop id"), 8))
    stop = tokens[3]
    body = client.post("/v1/completions", json=greedy(prompt="stop id", max_tokens=8, stop_token_ids=[stop])).json()
    ended = tokens[: tokens.index(stop) + 1]
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] == len(ended)
    assert body["choices"][0]["text"] == ByteTokenizer().decode(ended)
    assert_nothing_open(server)


def test_stop_string_ends_the_answer_and_is_cut_out(client, server, model):
    text = expected_text(model, "stop here", 12)
    # two whole characters from inside the answer (U+FFFD stands for bytes that are not yet a character)
    stop = next(text[i:i + 2] for i in range(2, len(text) - 2) if "\ufffd" not in text[i:i + 2])
    cut = text[: text.index(stop)]
    request = greedy(prompt="stop here", max_tokens=12, stop=[stop, "\x00never\x00"])
    whole = client.post("/v1/completions", json=request).json()["choices"][0]
    assert (whole["text"], whole["finish_reason"]) == (cut, "stop")
    pieces = [c["choices"][0] for c in events(client.post("/v1/completions", json={**request, "stream": True}))]
    assert "".join(p["text"] for p in pieces) == cut and pieces[-1]["finish_reason"] == "stop"
    assert_nothing_open(server)


def test_a_tiny_temperature_does_not_fail_the_engine(client, server, model):
    # 1e-300 rounds to 0 in fp32: it once made NaN probabilities and failed the step for every request
    reply = client.post("/v1/completions", json={**greedy(prompt="warm", max_tokens=4), "temperature": 1e-300})
    assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == expected_text(model, "warm", 4)
    assert client.get("/health").json() == {"status": "ok"}


def test_logit_bias_steers_every_token(client, server):
    request = greedy(prompt="anything", max_tokens=5, logit_bias={str(ord("A")): 100, "66": -100})
    assert client.post("/v1/completions", json=request).json()["choices"][0]["text"] == "AAAAA"
    assert_nothing_open(server)


def test_penalties_reach_the_engine(client, server, model):
    from tests.runtime.test_penalties import MAX_TOKENS, PROMPTS, penalized_greedy

    request = greedy(prompt=PROMPTS[0], max_tokens=MAX_TOKENS, frequency_penalty=1.5)
    text = client.post("/v1/completions", json=request).json()["choices"][0]["text"]
    assert text == ByteTokenizer().decode(penalized_greedy(model, PROMPTS[0], 0.0, 1.5))
    assert_nothing_open(server)


@pytest.mark.parametrize("body, status, says", [
    ("not json", 400, "not valid JSON"),
    ([1, 2], 400, "JSON object"),
    ({"max_tokens": 3}, 400, "'prompt' is required"),
    ({"prompt": []}, 400, "'prompt' must be"),
    ({"prompt": "x", "logprobs": 21}, 400, "'logprobs' must be in [0, 20]"),
    ({"prompt": "x", "echo": True, "logprobs": 1, "stream": True}, 400, "'echo' with 'logprobs' is answered whole"),
    ({"prompt": "x", "max_tokens": 0}, 400, "'max_tokens' must be >= 1 (0 only with \"echo\": true"),
    ({"prompt": "x", "echo": "yes"}, 400, "'echo' must be true or false"),
    ({"prompt": "x", "presence_penalty": 3}, 400, "'presence_penalty' must be in [-2.0, 2.0]"),
    ({"prompt": "x", "repetition_penalty": 0}, 400, "'repetition_penalty' must be in [0.01, 100.0]"),
    ({"prompt": "x", "min_p": 1.5}, 400, "'min_p' must be in [0.0, 1.0]"),
    ({"prompt": "x", "min_tokens": -1}, 400, "'min_tokens' must be in"),
    ({"prompt": "x", "use_beam_search": True}, 400, "'use_beam_search' is not supported"),
    ({"prompt": "x", "guided_json": {"type": "object"}}, 400, "'guided_json' is not supported"),
    ({"prompt": "x", "logit_bias": {"a": 10}}, 400, "'logit_bias' must map token ids to numbers"),
    ({"prompt": "x", "logit_bias": {"5": 101}}, 400, "biases in [-100, 100]"),
    ({"prompt": "x", "logit_bias": {"260": 1}}, 400, "outside the vocabulary of 260"),
    ({"prompt": "x", "n": 0}, 400, "'n' must be in"),
    ({"prompt": "x", "temperature": -1}, 400, "'temperature' must be in"),
    ({"prompt": "x", "max_tokens": 2.5}, 400, "'max_tokens' must be an integer"),
    ({"prompt": "x", "stop": [""]}, 400, "'stop' must be"),
    ({"prompt": "x", "stop_token_ids": [1, "a"]}, 400, "'stop_token_ids' must be a list of token ids"),
    ({"prompt": "x", "stop_token_ids": list(range(65))}, 400, "at most 64 stop token ids"),
    ({"prompt": "x", "stop_token_ids": [999]}, 400, "'stop_token_ids' names a token outside the vocabulary of 260"),
    ({"prompt": "x", "stream": "yes"}, 400, "'stream' must be true or false"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "needs \"stream\": true"),
    ({"prompt": "x" * 600, "max_tokens": 4}, 400, "exceeds the engine's max length 512"),
    ({"prompt": [1, 999]}, 400, "outside the vocabulary of 260"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "is not served here"),
    ({"prompt": "x" * 5000}, 413, "over 4096 bytes"),
    ({"prompt": "x", "n": 7}, 400, "takes at most 6 at once"),
])
def test_bad_requests_get_an_openai_error_and_leave_nothing_open(client, server, body, status, says):
    content = body if isinstance(body, str) else json.dumps(body)
    reply = client.post("/v1/completions", content=content, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert says in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert_nothing_open(server)


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("body, says", [
    ({"messages": []}, "'messages' must be a non-empty list"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "needs a role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "text parts"),
    ({"messages": HI, "top_logprobs": 2}, "'top_logprobs' needs \"logprobs\": true"),
    ({"messages": HI, "tools": [{"type": "function"}]}, "tools[0] must be"),
    ({"messages": HI, "functions": [{"name": "f"}]}, "'functions' is not supported"),
    ({"messages": HI, "echo": True}, "'echo' is not supported"),
])
def test_bad_chat_requests_are_refused(client, server, body, says):
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400 and says in reply.json()["error"]["message"]
    assert_nothing_open(server)


def test_a_checkpoint_chat_template_writes_its_own_markers_so_no_bos_is_added(model, tmp_path):
    """A Jinja template writes the BOS and turn markers itself (Kimi's, DeepSeek's): its prompt is encoded without the
    tokenizer's own, where the plain transcript gets the tokenizer's BOS (test_chat_stream_names_the_role_first...)."""
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>")
    server = make_server(model, tmp_path)
    try:
        with TestClient(server.app) as client:
            body = client.post("/v1/chat/completions", json=greedy(messages=HI, max_tokens=2)).json()
    finally:
        server.close()
    assert body["usage"]["prompt_tokens"] == len(b"<user>hi<assistant>")


def test_chat_template_kwargs_and_the_generation_prompt_reach_the_template(model, tmp_path):
    """vLLM's chat extensions: chat_template_kwargs are template variables, add_generation_prompt ends the prompt with
    the assistant's opening (or not); a wrong type is a 400 naming the field."""
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if thinking %}<think>{% endif %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
    server = make_server(model, tmp_path)
    try:
        with TestClient(server.app) as client:
            def prompt_tokens(**extra):
                return client.post("/v1/chat/completions", json=greedy(messages=HI, max_tokens=2, **extra)).json()[
                    "usage"]["prompt_tokens"]

            assert prompt_tokens() == len(b"<user>hi<assistant>")
            assert prompt_tokens(chat_template_kwargs={"thinking": True}) == len(b"<user>hi<think><assistant>")
            assert prompt_tokens(add_generation_prompt=False) == len(b"<user>hi")
            bad = client.post("/v1/chat/completions", json=greedy(messages=HI, chat_template_kwargs=["thinking"]))
    finally:
        server.close()
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template_kwargs"


def test_a_full_server_answers_503_until_requests_finish(server, model):
    async def ask():
        transport = httpx.ASGITransport(app=server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            busy = asyncio.ensure_future(http.post("/v1/completions", json=greedy(prompt="x", n=5, max_tokens=40)))
            while server.num_open == 0:
                await asyncio.sleep(0.01)
            refused = await http.post("/v1/completions", json=greedy(prompt="y", n=2, max_tokens=2))
            return refused, await busy

    refused, busy = asyncio.run(ask())
    assert refused.status_code == 503 and "retry later" in refused.json()["error"]["message"]
    assert busy.status_code == 200 and len(busy.json()["choices"]) == 5
    assert_nothing_open(server)


def test_unknown_routes_and_methods_answer_in_openai_form(client):
    assert client.get("/v1/nothing").status_code == 404
    reply = client.get("/v1/completions")
    assert reply.status_code == 405 and "error" in reply.json()
    assert client.get("/v1/models").json()["data"][0] == {"id": MODEL, "object": "model", "created": 0,
                                                          "owned_by": "dayzero", "max_model_len": MAX_LEN}


def test_a_client_that_hangs_up_has_its_requests_cancelled(model, tmp_path):
    server = make_server(model, tmp_path)
    stats = server.llm.engine.stats
    base, stop = serve_in_thread(server.app)
    try:
        # 500 tokens would take the engine seconds; a cancelled request stops after a step or two
        long = greedy(prompt="go on", max_tokens=500)
        with httpx.stream("POST", f"{base}/v1/completions", json={**long, "stream": True}) as reply:
            assert reply.status_code == 200
            next(reply.iter_lines())
        assert_nothing_open(server)
        assert stats.decode_tokens < 100
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{base}/v1/completions", json=long, timeout=0.5)
        assert_nothing_open(server)
        assert stats.decode_tokens < 200
        # the engine serves the next client as before
        reply = httpx.post(f"{base}/v1/completions", json=greedy(prompt="next", max_tokens=3)).json()
        assert reply["choices"][0]["text"] == expected_text(model, "next", 3)
    finally:
        stop()
        server.close()


def test_an_engine_failure_ends_open_requests_and_the_server_reports_it(model, tmp_path, monkeypatch):
    server = make_server(model, tmp_path)

    def broken_step():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(server.llm.engine, "step", broken_step)
    with TestClient(server.app) as client:
        reply = client.post("/v1/completions", json=greedy(prompt="x", max_tokens=3))
        assert reply.status_code == 503 and "illegal memory access" in reply.json()["error"]["message"]
        assert client.get("/health").status_code == 503
        assert client.post("/v1/completions", json=greedy(prompt="y")).status_code == 503


def test_serve_stops_when_the_engine_fails(model, tmp_path, monkeypatch):
    port = free_port()
    server = make_server(model, tmp_path, port=port, engine_thread=False)

    def broken_step():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(server.llm.engine, "step", broken_step)
    replies = []

    def client():
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(500):
                try:
                    httpx.get(f"{base}/health")
                    break
                except httpx.ConnectError:
                    time.sleep(0.02)
            replies.append(httpx.post(f"{base}/v1/completions", json=greedy(prompt="x", max_tokens=3)))
        finally:
            server.loop.stop()  # only a safety net: the failure should have stopped it already

    thread = threading.Thread(target=client)
    thread.start()
    with pytest.raises(DayzeroError, match="illegal memory access.*the server stopped"):
        run_server(server)
    thread.join(10)
    assert replies[0].status_code == 503 and "illegal memory access" in replies[0].json()["error"]["message"]


def test_a_port_in_use_is_refused_with_what_to_do(server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(DayzeroError, match="cannot listen on 127.0.0.1:.*pick another --port"):
            serve_in_thread(server.app, port=taken.getsockname()[1])


def test_chat_turns_reuse_the_cached_prefix_of_the_conversation(model, tmp_path):
    """A conversation's next turn starts with the previous prompt: with --prefix-caching its pages and KDA state
    are reused (counted in /metrics), and the answers stay the model's."""
    server = make_server(model, tmp_path, prefix_caching=True)
    history = "system: answer briefly.\n" * 8
    with TestClient(server.app) as client:
        for turn in ("user: hello\n", "user: and then?\n", "user: thanks\n"):
            history += turn
            body = client.post("/v1/completions", json=greedy(prompt=history, max_tokens=4)).json()
            assert body["choices"][0]["text"] == expected_text(model, history, 4)
            history += body["choices"][0]["text"] + "\n"
        text = client.get("/metrics").text
    server.close()
    metrics = dict(line.split() for line in text.splitlines() if line.startswith("dayzero_") and " " in line)
    assert float(metrics["dayzero_prefix_cache_hit_tokens_total"]) >= 2 * 192  # later turns reuse 3 pages or more
    assert float(metrics["dayzero_cached_prefixes"]) > 0 and float(metrics["dayzero_reclaimable_cache_pages"]) > 0


def test_metrics_count_requests_tokens_and_the_engine_state(model, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    server = make_server(model, tmp_path)
    with TestClient(server.app) as client:
        client.post("/v1/completions", json=greedy(prompt="abc", max_tokens=3))
        client.post("/v1/completions", json=greedy(prompt="de", max_tokens=2, n=2, stream=True))
        client.post("/v1/completions", json={"prompt": "x", "n": 0})
        text = client.get("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name: str, **labels) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("dayzero_requests_total", route="/v1/completions", status="200") == 2
    assert value("dayzero_requests_total", route="/v1/completions", status="400") == 1
    assert value("dayzero_prompt_tokens_total") == 4 + 3 and value("dayzero_generation_tokens_total") == 3 + 2 * 2
    assert value("dayzero_time_to_first_token_seconds_count") == 3 and value("dayzero_request_seconds_count") == 2
    assert value("dayzero_running_sequences") == 0 and value("dayzero_open_requests") == 0
    engine = server.llm.engine
    assert value("dayzero_free_cache_pages") == engine.blocks.num_pages - 1
    assert value("dayzero_engine_steps_total") == engine.stats.steps > 0


def test_an_api_key_guards_the_openai_routes_only(model, tmp_path):
    server = make_server(model, tmp_path, api_key="sesame")
    with TestClient(server.app) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sesame"}):
            reply = client.post("/v1/completions", json=greedy(prompt="x", max_tokens=2), headers=headers)
            assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/v1/models").status_code == 401
        good = {"Authorization": "Bearer sesame"}
        assert client.post("/v1/completions", json=greedy(prompt="x", max_tokens=2), headers=good).status_code == 200
        assert client.get("/health").status_code == 200 and client.get("/metrics").status_code == 200
    assert_nothing_open(server)


def stream_while_draining(server, max_tokens: int, drain_seconds: float) -> tuple[list, int, int]:
    """A streamed request; after its first piece the loop drains -> (its events, /health and a new request's
    status during the drain)."""
    base, stop = serve_in_thread(server.app)

    async def scenario():
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            request = greedy(prompt="drain", max_tokens=max_tokens, stream=True)
            async with http.stream("POST", "/v1/completions", json=request) as reply:
                lines = reply.aiter_lines()
                first = await anext(lines)
                server.loop.drain(drain_seconds)
                while not server.loop.draining:
                    await asyncio.sleep(0.01)
                health = (await http.get("/health")).status_code
                refused = (await http.post("/v1/completions", json=greedy(prompt="late"))).status_code
                rest = [line async for line in lines]
        return [first, *rest], health, refused

    try:
        lines, health, refused = asyncio.run(scenario())
    finally:
        stop()
    return [json.loads(x.removeprefix("data: ")) for x in lines if x.startswith("data: {")], health, refused


def test_draining_finishes_accepted_requests_and_turns_new_ones_away(model, tmp_path):
    server = make_server(model, tmp_path)
    chunks, health, refused = stream_while_draining(server, max_tokens=60, drain_seconds=60)
    assert (health, refused) == (503, 503)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected_text(model, "drain", 60)
    server.loop._thread.join(10)
    assert not server.loop._thread.is_alive() and not server.llm.engine.has_work


def test_a_drain_past_its_deadline_ends_what_is_left(model, tmp_path):
    server = make_server(model, tmp_path)
    chunks, _, _ = stream_while_draining(server, max_tokens=500, drain_seconds=0.2)
    assert "shutting down" in chunks[-1]["error"]["message"]
    server.loop._thread.join(10)
    assert not server.loop._thread.is_alive()


def test_health_says_warming_up_until_the_engine_loop_runs(model, tmp_path):
    server = make_server(model, tmp_path, engine_thread=False)
    with TestClient(server.app) as client:
        assert client.get("/health").json() == {"status": "warming up"}
        server.loop.warm_up()
        assert server.llm.engine.stats.decode_tokens == 3 and not server.llm.engine.has_work
        assert server.loop.failure is None and client.get("/health").status_code == 503


def test_a_cpu_engine_leaves_the_http_thread_a_core():
    from dayzero.server.http_host import leave_a_core_for_http

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        leave_a_core_for_http("cuda:0")
        assert torch.get_num_threads() == 2
        leave_a_core_for_http("cpu")
        assert torch.get_num_threads() == 1
        leave_a_core_for_http("cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_server_options_are_checked():
    with pytest.raises(DayzeroError, match="--port"):
        ServerOptions(port=70000)
    with pytest.raises(DayzeroError, match="--max-open"):
        ServerOptions(max_open=0)
    with pytest.raises(DayzeroError, match="--api-key must not be empty"):
        ServerOptions(api_key=" ")
    with pytest.raises(DayzeroError, match="--drain-seconds"):
        ServerOptions(drain_seconds=-1)
    with pytest.raises(DayzeroError, match="--stats-log-seconds"):
        ServerOptions(stats_log_seconds=-1)


def test_health(client):
    assert client.get("/health").json() == {"status": "ok"}


def test_default_lengths_follow_openai(client, server):
    from dayzero.server.openai_protocol import parse_chat, parse_completion

    reply = client.post("/v1/completions", json=greedy(prompt="how long")).json()
    assert reply["usage"]["completion_tokens"] == 16 and reply["choices"][0]["finish_reason"] == "length"
    chat = parse_chat({"messages": HI}, "user: hi\nassistant:").sampling
    assert chat.max_tokens is None and chat.params(20, MAX_LEN, 0).max_tokens == MAX_LEN - 20
    assert parse_chat({"messages": HI, "max_completion_tokens": 5}, "p").sampling.max_tokens == 5
    assert parse_completion({"prompt": "p", "max_tokens": 7}).sampling.max_tokens == 7
    extensions = parse_completion({"prompt": "p", "max_tokens": 4, "repetition_penalty": 1.2, "min_p": 0.1,
                                   "min_tokens": 9}).sampling.params(1, MAX_LEN, 0)
    assert (extensions.repetition_penalty, extensions.min_p, extensions.min_tokens) == (1.2, 0.1, 4)
    assert_nothing_open(server)


FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed",
          "stop", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
          "logit_bias", "ignore_eos", "echo", "model", "tools", "response_format", "stop_token_ids",
          "repetition_penalty", "min_p", "min_tokens"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(-3, 3, allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=3), chat=st.booleans())
def test_any_json_body_gets_an_answer_or_an_openai_error_never_a_crash(client, server, extra, chat):
    # a valid request with up to three fields set to arbitrary JSON: most still run, the rest are refused
    body = {"messages": HI} if chat else {"prompt": "hi"}
    body = {**body, "max_tokens": 2, **extra}
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = 2  # keep chat answers short (they otherwise run to the context's end)
    reply = client.post("/v1/chat/completions" if chat else "/v1/completions", json=body)
    assert reply.status_code in (200, 400, 404, 503), reply.text
    if reply.status_code != 200:
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
    assert_nothing_open(server)


def test_tokenize_detokenize_and_version_answer_in_vllms_shapes(client):
    import dayzero

    tokens = ByteTokenizer().encode("Hello")
    reply = client.post("/tokenize", json={"model": MODEL, "prompt": "Hello"})
    assert reply.json() == {"tokens": tokens, "count": len(tokens), "max_model_len": MAX_LEN}
    bare = client.post("/tokenize", json={"prompt": "Hello", "add_special_tokens": False}).json()
    assert bare["tokens"] == ByteTokenizer().encode("Hello", add_special_tokens=False)
    chat = client.post("/tokenize", json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}).json()
    # as /v1/chat/completions renders it (test_chat_stream_names_the_role_first_and_matches_the_whole_answer)
    assert chat["tokens"] == ByteTokenizer().encode("user: Hi\nassistant:")
    assert client.post("/detokenize", json={"model": MODEL, "tokens": bare["tokens"]}).json() == {"prompt": "Hello"}
    assert client.get("/version").json() == {"version": dayzero.__version__}


@pytest.mark.parametrize(("route", "body", "says"), [
    ("/tokenize", {"model": MODEL}, "one of 'prompt'"),
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "one of 'prompt'"),
    ("/tokenize", {"prompt": ["a"]}, "'prompt' must be a string"),
    ("/tokenize", {"prompt": "a", "max_tokens": 3}, "takes no field 'max_tokens'"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, "true or false"),
    ("/tokenize", {"messages": [{"role": "nobody"}]}, "needs a role"),
    ("/detokenize", {"tokens": "abc"}, "list of token ids"),
    ("/detokenize", {"tokens": [1, True]}, "list of token ids"),
    ("/detokenize", {"tokens": [10 ** 9]}, "outside the vocabulary"),
])
def test_bad_tokenize_and_detokenize_bodies_get_a_400(client, route, body, says):
    reply = client.post(route, json=body)
    assert reply.status_code == 400 and says in reply.json()["error"]["message"], reply.text


def test_metrics_carry_vllms_names_with_the_model_name(model, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    server = make_server(model, tmp_path)
    with TestClient(server.app) as client:
        client.post("/v1/completions", json=greedy(prompt="abc", max_tokens=3))
        client.post("/v1/completions", json=greedy(prompt="de", max_tokens=2, n=2, stream=True))
        first = next(iter(greedy_generate(model, ByteTokenizer().encode("x"), 1)))
        stopped = client.post("/v1/completions", json=greedy(prompt="x", max_tokens=50, stop_token_ids=[first]))
        assert stopped.json()["choices"][0]["finish_reason"] == "stop"
        text = client.get("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name: str, **labels) -> float:
        return samples[(name, tuple(sorted({"model_name": MODEL, **labels}.items())))]

    assert value("vllm:prompt_tokens_total") == 4 + 3 + 2
    assert value("vllm:generation_tokens_total") == 3 + 2 * 2 + 1
    assert value("vllm:time_to_first_token_seconds_count") == 4
    # the gaps after each choice's first token: 2 + 1 + 1 + 0
    assert value("vllm:inter_token_latency_seconds_count") == 4
    assert value("vllm:time_per_output_token_seconds_count") == 4
    assert value("vllm:e2e_request_latency_seconds_count") == 3
    assert value("vllm:request_success_total", finished_reason="length") == 3
    assert value("vllm:request_success_total", finished_reason="stop") == 1
    assert value("vllm:num_requests_running") == 0 and value("vllm:num_requests_waiting") == 0
    blocks = server.llm.engine.blocks
    assert value("vllm:gpu_cache_usage_perc") == pytest.approx(1 - blocks.num_free / (blocks.num_pages - 1))


def test_cache_usage_is_the_share_of_pages_taken():
    from dayzero.server.server_metrics import cache_usage

    assert cache_usage({"free_cache_pages": 30, "cache_pages": 40}) == pytest.approx(0.25)
    assert cache_usage({"free_cache_pages": 0, "cache_pages": 40}) == 1
    assert cache_usage({}) == 0  # an engine in another process that sent nothing yet


def test_a_periodic_line_logs_throughput_requests_and_cache_use_while_there_is_work(model, tmp_path, caplog):
    server = make_server(model, tmp_path, stats_log_seconds=0.05)
    caplog.set_level(logging.INFO, logger="dayzero.server")
    with TestClient(server.app) as client:
        # this server's lines only: the module's server, serving other tests, logs its own lines now and then
        loop_thread = client.portal.call(threading.get_ident)

        def lines():
            return [r for r in caplog.records if "throughput" in r.getMessage() and r.thread == loop_thread]

        time.sleep(0.2)
        assert not lines()  # idle: no lines
        assert client.post("/v1/completions", json=greedy(prompt="abc", max_tokens=20)).status_code == 200
        deadline = time.monotonic() + 5
        while not lines() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = lines()
    assert lines and all(r.levelno == logging.INFO and r.name == "dayzero.server" for r in lines)
    text = " ".join(r.getMessage() for r in lines)
    generated = [float(part.split()[0]) for part in text.split("generation throughput: ")[1:]]
    assert sum(generated) > 0 and "running:" in text and "waiting:" in text and "KV cache use:" in text


def test_the_throughput_line_is_tokens_per_second_over_the_interval():
    from dayzero.server.server_metrics import ThroughputLog

    gauges = {"running_sequences": 0, "waiting_sequences": 0, "free_cache_pages": 40, "cache_pages": 40}
    throughput = ThroughputLog(lambda: {"gauges": gauges, "counters": {}})
    assert throughput.line() is None  # nothing ran, waited or moved
    gauges.update(running_sequences=2, waiting_sequences=1, free_cache_pages=30)
    throughput.prompt_tokens, throughput.generation_tokens = 100, 10
    line = throughput.line()
    assert "running: 2 reqs, waiting: 1 reqs, KV cache use: 25.0%" in line
    assert float(line.split("prompt throughput: ")[1].split()[0]) > 0
