"""ASGI middleware for `dayzero serve --api-key`: the OpenAI routes (/v1/...) answer only requests that carry
`Authorization: Bearer <key>`; /health and /metrics stay open for probes and scrapers."""

from __future__ import annotations

import hmac
import json

PROTECTED_PREFIX = "/v1/"


class RequireApiKey:
    def __init__(self, app, api_key: str):
        self.app, self._expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIX) or self._allowed(scope):
            return await self.app(scope, receive, send)
        body = json.dumps({"error": {"message": "a valid API key is required: send 'Authorization: Bearer <key>'",
                                     "type": "invalid_request_error", "param": None,
                                     "code": "invalid_api_key"}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope) -> bool:
        given = dict(scope["headers"]).get(b"authorization", b"")
        # constant time: a timing difference would tell how much of a guessed key was right
        return hmac.compare_digest(given, self._expected)
