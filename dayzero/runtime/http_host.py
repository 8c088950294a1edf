"""Hosting the server: the engine on the main thread and the HTTP server in a process of its own (`dayzero serve`,
http_process.py), or on a thread of this process (`run_server`: tests, embedding); signals that drain and then
stop it."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from functools import partial

import torch
from starlette.applications import Starlette

from dayzero.errors import DayzeroError
from dayzero.runtime.engine_loop import EngineLoop
from dayzero.runtime.llm import LLM
from dayzero.runtime.server import OpenAIServer, ServerOptions


def serve(llm: LLM, options: ServerOptions) -> None:
    """Serve until Ctrl-C / SIGTERM: the engine on this (the main) thread, the HTTP server in a process of its own."""
    import multiprocessing

    from dayzero.runtime.chat_template import load_chat_template
    from dayzero.runtime.http_process import EngineBridge, http_process_main
    from dayzero.runtime.server import ServedModel
    from dayzero.runtime.server_metrics import engine_counts

    leave_a_core_for_http(llm.engine.manifest.device)
    sock = listen_socket(options.host, options.port)
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
    base, stop_http = serve_in_thread(server.app, options.host, options.port, log_level="info")
    announce(server, base)
    try:
        _run_engine(server.loop, options)
    finally:
        stop_http()


def announce(server: OpenAIServer, base: str) -> None:
    print(f"serving {server.model_name!r} at {base}/v1 (completions, chat/completions, models) and /health",
          flush=True)


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


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one); raises with what to do when the address cannot be had."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise DayzeroError(f"cannot listen on {host}:{port} ({err.strerror}); pick another --port or --host") from err
    return sock


def serve_in_thread(app: Starlette, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                    sock: socket.socket | None = None) -> tuple[str, Callable[[], None]]:
    """Serve `app` with uvicorn from a background thread, on `sock` or on a socket bound to host:port (port 0: a
    free one) -> (base URL, a function that stops it). Raises when the address cannot be had."""
    import uvicorn

    sock = sock or listen_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="dayzero-http", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        sock.close()

    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}", stop


def wait_healthy(base: str, seconds: float) -> bool:
    """Poll `base`/health until it answers 200 (a server that has warmed up) -> whether it did within `seconds`:
    for scripts and tests that start `dayzero serve` and wait for it."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False
