"""The cache key: sha256 over the canonical JSON of everything that decides what an export builds."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from dayzero.errors import DayzeroError

KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, no NaN; only str dict keys (json would silently turn
    {1: x} into {"1": x} and collide the two)."""
    _reject_non_str_keys(value)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise DayzeroError(f"cache key ingredients must be plain JSON (str, int, float, bool, None, list, dict with "
                           f"str keys): {err}; convert such values (dtypes, paths, tuples) to strings first") from err


def cache_key(ingredients: dict) -> str:
    """sha256 hex digest of canonical_json(ingredients)."""
    if not isinstance(ingredients, dict):
        raise DayzeroError(f"cache key ingredients must be a dict, got {type(ingredients).__name__}")
    return hashlib.sha256(canonical_json(ingredients).encode()).hexdigest()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise ValueError(f"cache keys are 64 lowercase hex digits (from cache_key), got {key!r}")
    return key


def _reject_non_str_keys(value: Any) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str):
                raise DayzeroError(f"cache key ingredients: dict key {name!r} is a {type(name).__name__}, "
                                   f"use a str")
            _reject_non_str_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _reject_non_str_keys(item)
