"""Slow clients: a connection that sends nothing, half a header, or headers and half a body is dropped once the
request read deadline (ServerOptions.request_read_seconds) passes, counted from the request's first byte and not
renewed by a trickle; a request that arrives whole in time, in pieces or on a kept-alive connection, is answered."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import pytest

from dayzero.server.listener import serve_in_thread
from tests.helpers import random_model, tiny_config_dict
from tests.server.test_server import assert_nothing_open, expected_text, greedy, make_server

READ_SECONDS = 0.5
# a loaded 2-core machine may run the timer late
LATE_S = 3.0


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


@pytest.fixture(scope="module")
def served(model, tmp_path_factory):
    server = make_server(model, tmp_path_factory.mktemp("checkpoint"), request_read_seconds=READ_SECONDS)
    base, stop = serve_in_thread(server.app, read_seconds=server.options.request_read_seconds)
    yield server, base
    stop()
    server.close()


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(READ_SECONDS + LATE_S + 5)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while piece := sock.recv(65536):
        received += piece
    return received


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One whole response (a Content-Length one) -> (its head, its body)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def request_bytes(body: dict) -> tuple[bytes, bytes]:
    content = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(content)}\r\n\r\n").encode()
    return head, content


def dropped_after(sock: socket.socket, started: float) -> tuple[bytes, float]:
    """What the server sent before closing the connection, and when it closed it."""
    received = read_until_closed(sock)
    return received, time.monotonic() - started


def test_a_connection_that_sends_nothing_gets_408_and_is_closed(served):
    with connect(served[1]) as sock:
        received, seconds = dropped_after(sock, time.monotonic())
    assert READ_SECONDS * 0.9 <= seconds < READ_SECONDS + LATE_S
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head
    assert "--request-read-seconds" in json.loads(body)["error"]["message"]


def test_half_a_header_trickled_is_dropped_at_the_deadline(served):
    head, _ = request_bytes(greedy(prompt="x", max_tokens=2))
    with connect(served[1]) as sock:
        started = time.monotonic()
        # a byte every tenth of a second, for as long as the server listens, does not renew the deadline
        for byte in head[:-4]:
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.1)[0]:
                break
        received, seconds = dropped_after(sock, started)
    assert READ_SECONDS * 0.9 <= seconds < READ_SECONDS + LATE_S
    assert received.startswith(b"HTTP/1.1 408")


def test_a_client_still_sending_after_the_deadline_reads_its_408(served):
    head, _ = request_bytes(greedy(prompt="x", max_tokens=2))
    with connect(served[1]) as sock:
        sock.sendall(head[:10])
        select.select([sock], [], [], READ_SECONDS + LATE_S)
        # bytes that reach a closed socket would reset the connection and could discard the answer unread
        for _ in range(3):
            sock.sendall(head[10:20])
            time.sleep(0.05)
        received = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 408")


def test_headers_then_half_a_body_are_dropped_at_the_deadline(served):
    server, base = served
    head, content = request_bytes(greedy(prompt="x", max_tokens=2))
    with connect(base) as sock:
        started = time.monotonic()
        sock.sendall(head + content[: len(content) // 2])
        received, seconds = dropped_after(sock, started)
    assert READ_SECONDS * 0.9 <= seconds < READ_SECONDS + LATE_S
    assert not received.startswith(b"HTTP/1.1 200")
    assert_nothing_open(server)


def test_a_kept_alive_connection_stalling_in_its_next_request_is_dropped(served, model):
    head, content = request_bytes(greedy(prompt="first", max_tokens=2))
    with connect(served[1]) as sock:
        sock.sendall(head + content)
        status, body = read_response(sock)
        assert status.startswith(b"HTTP/1.1 200")
        assert json.loads(body)["choices"][0]["text"] == expected_text(model, "first", 2)
        started = time.monotonic()
        sock.sendall(head[:20])
        _, seconds = dropped_after(sock, started)
    assert READ_SECONDS * 0.9 <= seconds < READ_SECONDS + LATE_S


def test_a_request_that_arrives_whole_in_time_is_answered(served, model):
    head, content = request_bytes(greedy(prompt="in pieces", max_tokens=3))
    with connect(served[1]) as sock:
        for piece in (head[:10], head[10:], content[:5], content[5:]):
            sock.sendall(piece)
            time.sleep(READ_SECONDS / 8)
        status, body = read_response(sock)
    assert status.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["choices"][0]["text"] == expected_text(model, "in pieces", 3)
    reply = httpx.post(f"{served[1]}/v1/completions", json=greedy(prompt="after", max_tokens=2))
    assert reply.json()["choices"][0]["text"] == expected_text(model, "after", 2)


def test_the_read_deadline_is_checked():
    from dayzero.errors import DayzeroError
    from dayzero.server.server import ServerOptions

    with pytest.raises(DayzeroError, match="--request-read-seconds must be > 0"):
        ServerOptions(request_read_seconds=0)
