"""Serving an ASGI app: the listening socket, uvicorn on a thread, and waiting for a started server to answer."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from starlette.applications import Starlette

from dayzero.errors import DayzeroError
from dayzero.server.slow_clients import READ_SECONDS, read_deadline_protocol


def announce(model_name: str, base: str) -> None:
    print(f"serving {model_name!r} at {base}/v1 (completions, chat/completions, models) and /health",
          flush=True)


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
                    sock: socket.socket | None = None,
                    read_seconds: float = READ_SECONDS) -> tuple[str, Callable[[], None]]:
    """Serve `app` with uvicorn from a background thread, on `sock` or on a socket bound to host:port (port 0: a
    free one) -> (base URL, a function that stops it). A client gets `read_seconds` to send each request whole
    (slow_clients.py). Raises when the address cannot be had."""
    import uvicorn

    sock = sock or listen_socket(host, port)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5,
                            http=read_deadline_protocol(read_seconds))
    server = uvicorn.Server(config)
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
