"""The error a request is refused with: an HTTP status and OpenAI's error body."""

from __future__ import annotations

from dayzero.errors import DayzeroError


class RequestError(DayzeroError):
    """A request the server refuses: an HTTP status and OpenAI's error body."""

    TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error",
             503: "server_error", 500: "server_error"}

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}
