"""Hosting the server: the engine on the main thread and the HTTP server in a process of its own (`dayzero serve`,
http_process.py), or on a thread of this process (`run_server`: tests, embedding); signals that drain and then
stop it."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from functools import partial

import torch

from dayzero.errors import DayzeroError
from dayzero.llm.api import LLM
from dayzero.runtime.engine_loop import EngineLoop
from dayzero.server.listener import announce, listen_socket, serve_in_thread
from dayzero.server.server import OpenAIServer, ServerOptions


def serve(llm: LLM, options: ServerOptions, sock: socket.socket | None = None) -> None:
    """Serve until Ctrl-C / SIGTERM: the engine on this (the main) thread, the HTTP server in a process of its own.
    sock: the listening socket, bound before the engine loaded (`dayzero serve`: a taken port is said at once)."""
    import multiprocessing

    from dayzero.llm.chat_template import load_chat_template
    from dayzero.server.http_process import EngineBridge, http_process_main
    from dayzero.server.server import ServedModel
    from dayzero.server.server_metrics import engine_counts

    leave_a_core_for_http(llm.engine.manifest.device)
    sock = sock or listen_socket(options.host, options.port)
    context = multiprocessing.get_context("spawn")
    engine_end, http_end = context.Pipe()
    http = context.Process(target=http_process_main, name="dayzero-http", daemon=True,
                           args=(http_end, ServedModel.of(llm), options, load_chat_template(llm.checkpoint), sock))
    http.start()
    http_end.close()
    sock.close()
    loop = EngineLoop(llm.engine)
    bridge = EngineBridge(loop, engine_end, partial(engine_counts, llm.engine))
    try:
        _run_engine(loop, options, after_each=bridge.flush, http_ready=bridge.wait_listening)
    finally:
        bridge.stop_http()
        http.join(10)
    if bridge.http_gone and loop.failure is None:
        raise DayzeroError(f"the HTTP process ended (exit code {http.exitcode}), so the server stopped; restart it")


def leave_a_core_for_http(device: str) -> None:
    """A CPU engine's torch ops use one core less than there are, so that the HTTP thread has one: on the 2-core test
    machine 16 streamed requests took 1.30-1.42 s with both cores for torch and 1.19-1.21 s with one (the engine alone:
    1.10-1.14 s either way; bench/README.md). A GPU engine's host threads are left as they are."""
    if torch.device(device).type == "cpu" and torch.get_num_threads() > 1:
        torch.set_num_threads(torch.get_num_threads() - 1)


def run_server(server: OpenAIServer) -> None:
    """Run a server built with engine_thread=False until its loop stops, the HTTP server on a thread of this
    process."""
    options = server.options
    base, stop_http = serve_in_thread(server.app, options.host, options.port, log_level="info",
                                      read_seconds=options.request_read_seconds)
    announce(server.model_name, base)
    try:
        _run_engine(server.loop, options)
    finally:
        stop_http()


def _run_engine(loop: EngineLoop, options: ServerOptions, after_each: Callable[[], None] = lambda: None,
                http_ready: Callable[[], None] = lambda: None) -> None:
    """Warm up and run the engine loop on this (the main) thread, once the HTTP side listens (`http_ready` waits for
    it), so that "warmed up" means the server takes requests. The first Ctrl-C / SIGTERM drains it: new requests get
    503 (and /health says "draining") while the accepted ones run to their end, for at most drain_seconds; a second
    one stops it at once. A failed engine step ends it too (open requests get the error first) and raises."""

    def stop(signum, frame) -> None:
        if loop.draining:
            loop.stop()
        else:
            print(f"draining: accepted requests may run {options.drain_seconds:g} s more; again to stop now",
                  flush=True)
            loop.drain(options.drain_seconds)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        started = time.perf_counter()
        if options.warm_up:
            loop.warm_up()
        http_ready()
        if options.warm_up:
            print(f"warmed up in {time.perf_counter() - started:.1f} s", flush=True)
        loop.run(stop_on_failure=True, after_each=after_each)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if loop.failure is not None:
        raise DayzeroError(f"the engine failed ({loop.failure}; traceback above), so the server stopped; "
                           "restart it")
