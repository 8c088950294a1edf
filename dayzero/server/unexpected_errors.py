"""ASGI middleware: an exception no route expected (a bug) is answered with OpenAI's JSON error body and status 500,
its traceback logged, never sent. The exception ends here, so the HTTP server keeps the connection open for the
client's next request; it sits inside the request counting (server_metrics.py), which counts the 500.

A response already under way (a stream) cannot change its status: the exception goes on, and the HTTP server closes
the connection, the one honest end for a half-sent answer (streams send their own error event first, server.py).
"""

from __future__ import annotations

import json
import logging

from dayzero.server.request_error import RequestError

log = logging.getLogger("dayzero.server")


def internal_error(err: BaseException) -> RequestError:
    """What the client is told of an unexpected exception: its type, not its details."""
    return RequestError(f"the server failed on this request ({type(err).__name__}); its log has the traceback", 500)


class AnswerUnexpectedErrors:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as err:
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if started:
                raise
            body = json.dumps(internal_error(err).body()).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
