"""Hosting the server: uvicorn on a thread of its own, the engine on the main thread (`dayzero serve`), signals
that drain and then stop it."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable

import torch
from starlette.applications import Starlette

from dayzero.errors import DayzeroError
from dayzero.runtime.llm import LLM
from dayzero.runtime.server import OpenAIServer, ServerOptions


def serve(llm: LLM, options: ServerOptions) -> None:
    """Serve until Ctrl-C / SIGTERM: the engine on this (the main) thread, the HTTP server on another."""
    leave_a_core_for_http(llm.engine.manifest.device)
    run_server(OpenAIServer(llm, options, engine_thread=False))


def leave_a_core_for_http(device: str) -> None:
    """A CPU engine's torch ops use one core less than there are, so that the HTTP thread has one: on the 2-core test
    machine 16 streamed requests took 1.30-1.42 s with both cores for torch and 1.19-1.21 s with one (the engine alone:
    1.10-1.14 s either way; bench/README.md). A GPU engine's host threads are left as they are."""
    if torch.device(device).type == "cpu" and torch.get_num_threads() > 1:
        torch.set_num_threads(torch.get_num_threads() - 1)


def run_server(server: OpenAIServer) -> None:
    """Run a server built with engine_thread=False until its loop stops. The first Ctrl-C / SIGTERM drains it: new
    requests get 503 (and /health says "draining") while the accepted ones run to their end, for at most
    drain_seconds; a second one stops it at once. A failed engine step ends it too (open requests get the error
    first) and raises."""
    options = server.options
    base, stop_http = serve_in_thread(server.app, options.host, options.port, log_level="info")
    print(f"serving {server.model_name!r} at {base}/v1 (completions, chat/completions, models) and /health",
          flush=True)

    def stop(signum, frame) -> None:
        if server.loop.draining:
            server.loop.stop()
        else:
            print(f"draining: accepted requests may run {options.drain_seconds:g} s more; again to stop now",
                  flush=True)
            server.loop.drain(options.drain_seconds)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if options.warm_up:
            started = time.perf_counter()
            server.loop.warm_up()
            print(f"warmed up in {time.perf_counter() - started:.1f} s", flush=True)
        server.loop.run(stop_on_failure=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_http()
    if server.loop.failure is not None:
        raise DayzeroError(f"the engine failed ({server.loop.failure}; traceback above), so the server stopped; "
                           "restart it")


def serve_in_thread(app: Starlette, host: str = "127.0.0.1", port: int = 0,
                    log_level: str = "warning") -> tuple[str, Callable[[], None]]:
    """Serve `app` with uvicorn from a background thread (port 0: a free one) -> (base URL, a function that stops
    it). Raises when the address cannot be had."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise DayzeroError(f"cannot listen on {host}:{port} ({err.strerror}); pick another --port or --host") from err
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="dayzero-http", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        sock.close()

    return f"http://{host}:{sock.getsockname()[1]}", stop
