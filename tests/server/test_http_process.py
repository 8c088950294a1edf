"""`dayzero serve`'s two processes: the HTTP server in a process of its own answers with the engine's tokens (whole,
streamed, chat), shows the engine's counts at /metrics (the idle engine's within a second of the last cancellation)
and drains on SIGTERM; an engine failure reaches the open request and stops both; the HTTP process ending stops the
engine and says so."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time

import httpx
import pytest

from dayzero.errors import DayzeroError
from dayzero.llm.api import LLM
from dayzero.server.http_host import serve
from dayzero.server.listener import wait_healthy
from dayzero.server.server import ServerOptions
from tests.helpers import random_model, tiny_config_dict
from tests.server.test_server import HI, MODEL, events, expected_text, free_port, greedy, make_llm

HTTP_START_S = 60


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def serve_with_client(llm: LLM, client, seen: dict | None = None) -> dict:
    """serve() on this (the main) thread while `client(base, seen)` runs on another; -> what the client saw."""
    port, seen = free_port(), {} if seen is None else seen
    base = f"http://127.0.0.1:{port}"

    def run_client():
        try:
            assert wait_healthy(base, HTTP_START_S), "the HTTP process never became healthy"
            client(base, seen)
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            seen["error"] = err
        finally:
            if not seen.get("keep_running"):
                os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=run_client)
    thread.start()
    try:
        serve(llm, ServerOptions(port=port, model_name=MODEL, drain_seconds=10))
    finally:
        thread.join(HTTP_START_S)
    if "error" in seen:
        raise seen["error"]
    return seen


def test_answers_metrics_and_drain_through_the_http_process(model, tmp_path):
    llm = make_llm(model, tmp_path)

    def client(base, seen):
        whole = httpx.post(f"{base}/v1/completions", json=greedy(prompt="hello", max_tokens=6)).json()
        seen["whole"] = whole["choices"][0]["text"]
        with httpx.stream("POST", f"{base}/v1/completions",
                          json=greedy(prompt="hello", max_tokens=6, stream=True)) as reply:
            reply.read()
            seen["streamed"] = "".join(e["choices"][0]["text"] for e in events(reply) if e["choices"])
        chat = httpx.post(f"{base}/v1/chat/completions", json=greedy(messages=HI, max_tokens=4)).json()
        seen["chat"] = chat["choices"][0]["message"]["content"]
        metrics = httpx.get(f"{base}/metrics").text
        seen["metrics"] = dict(line.split() for line in metrics.splitlines() if line.startswith("dayzero_"))

    seen = serve_with_client(llm, client)
    assert seen["whole"] == seen["streamed"] == expected_text(model, "hello", 6)
    assert seen["chat"] == expected_text(model, "user: hi\nassistant:", 4)
    assert float(seen["metrics"]["dayzero_engine_steps_total"]) > 0
    assert float(seen["metrics"]["dayzero_running_sequences"]) == 0
    assert not llm.engine.has_work and not [p for p in multiprocessing.active_children() if p.name == "dayzero-http"]


def gauges(base: str) -> dict[str, float]:
    metrics = httpx.get(f"{base}/metrics").text
    names = ("dayzero_running_sequences", "dayzero_waiting_sequences", "dayzero_free_cache_pages",
             "dayzero_free_state_slot_groups")
    return {name: float(value) for name, value in (line.split() for line in metrics.splitlines()
                                                   if line.split(" ")[0] in names)}


def poll(base: str, until, seconds: float) -> tuple[dict, float]:
    """Scrape /metrics until `until(gauges)` holds or `seconds` pass -> (the last gauges, seconds waited)."""
    started = time.monotonic()
    while not until(seen := gauges(base)) and time.monotonic() - started < seconds:
        time.sleep(0.02)
    return seen, time.monotonic() - started


def test_the_gauges_show_an_idle_engine_within_a_second_of_the_last_cancellation(model, tmp_path):
    llm = make_llm(model, tmp_path)

    def client(base, seen):
        seen["idle"] = idle = gauges(base)
        with contextlib.ExitStack() as streams, httpx.Client(base_url=base, timeout=60) as http:
            # each stream's line reader stays referenced: dropping one closes its connection
            readers = []
            for prompt in ("one", "two", "three"):
                reply = streams.enter_context(http.stream("POST", "/v1/completions", json=greedy(
                    prompt=prompt, max_tokens=500, stream=True)))
                readers.append(reply.iter_lines())
                next(readers[-1])
            seen["busy"], _ = poll(base, lambda g: g["dayzero_running_sequences"] == 3, 30)
        # the streams' connections are closed: the server cancels their requests
        seen["after"], seen["seconds"] = poll(base, lambda g: g == idle, 5)

    seen = serve_with_client(llm, client)
    assert seen["idle"]["dayzero_running_sequences"] == 0 and seen["busy"]["dayzero_running_sequences"] == 3
    assert seen["busy"]["dayzero_free_state_slot_groups"] < seen["idle"]["dayzero_free_state_slot_groups"]
    assert seen["after"] == seen["idle"] and seen["seconds"] < 1.0


def test_an_engine_failure_reaches_the_request_and_stops_both_processes(model, tmp_path, monkeypatch):
    llm = make_llm(model, tmp_path)

    def broken_step():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def client(base, seen):
        seen["keep_running"] = True  # the failure stops serve() by itself
        monkeypatch.setattr(llm.engine, "step", broken_step)
        seen["reply"] = httpx.post(f"{base}/v1/completions", json=greedy(prompt="x", max_tokens=3))

    seen = {}
    with pytest.raises(DayzeroError, match="illegal memory access.*the server stopped"):
        serve_with_client(llm, client, seen)
    assert seen["reply"].status_code == 503 and "illegal memory access" in seen["reply"].json()["error"]["message"]


def test_the_http_process_ending_stops_the_engine_and_says_so(model, tmp_path):
    llm = make_llm(model, tmp_path)

    def client(base, seen):
        seen["keep_running"] = True
        for process in multiprocessing.active_children():
            if process.name == "dayzero-http":
                process.kill()

    with pytest.raises(DayzeroError, match="the HTTP process ended"):
        serve_with_client(llm, client)
