"""A deadline for each request to arrive whole (headers and body), so that a client that stalls halfway (or opens a
connection and sends nothing) does not hold it open forever.

uvicorn's own timer covers only the wait between a response and the next request (`timeout_keep_alive`); once any
byte of a request has come, or on a fresh connection, it waits without end. `ReadDeadline` is its HTTP/1.1 protocol
(h11) with one more timer: armed when a connection opens and when the first bytes of a next request come, disarmed
when the request's last byte has. On expiry a request whose headers are still incomplete gets 408 and the connection
closes; one whose body stalls is dropped (the route reading it sees the client gone).

After a 408 the server closes its sending half and reads (and drops) what the client still sends for a moment
before closing: closing a socket with unread input resets the connection, and a reset can discard the 408 before
the client reads it (nginx's lingering close).
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# seconds a client has to send a whole request (ServerOptions.request_read_seconds)
READ_SECONDS = 30.0
# h11 states of a client still sending its request (IDLE: waiting for its first byte, or some of its headers came)
RECEIVING = (h11.IDLE, h11.SEND_BODY)
# seconds a connection answered 408 keeps reading before it closes
LINGER_SECONDS = 2.0


def read_deadline_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a `seconds` deadline for each request to arrive whole (uvicorn.Config(http=...))."""
    return type("ReadDeadline", (ReadDeadline,), {"read_seconds": seconds})


class ReadDeadline(H11Protocol):
    read_seconds = READ_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        """Arm the deadline while part of a request is here and the rest is not; disarm it once it all came."""
        if self.transport.is_closing():
            return self._disarm()
        started = self.conn.their_state is h11.SEND_BODY or bool(self.conn.trailing_data[0])
        if self.conn.their_state in RECEIVING and started:
            if self._deadline is None:
                self._arm()
        elif self.conn.their_state is not h11.IDLE or self.cycle is not None:
            # between requests uvicorn's keep-alive timer watches the connection
            self._disarm()

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.read_seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(_timeout_response(self.read_seconds))
            if self.transport.can_write_eof():
                return self._linger()
        self.transport.close()

    def _linger(self) -> None:
        self.transport.write_eof()
        self._lingering = True
        self.loop.call_later(LINGER_SECONDS, self.transport.close)


def _timeout_response(seconds: float) -> bytes:
    body = json.dumps({"error": {"message": f"the request did not arrive whole within {seconds:g} s "
                                            "(--request-read-seconds)", "type": "invalid_request_error",
                                 "param": None, "code": "request_timeout"}}).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body
