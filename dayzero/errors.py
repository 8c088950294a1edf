"""The one exception type for errors a user can cause and fix."""

from __future__ import annotations


class DayzeroError(Exception):
    """A user-facing error: the message says what went wrong and what to do about it.

    The CLI prints these without a traceback; everything else is a bug and keeps its traceback.
    """
