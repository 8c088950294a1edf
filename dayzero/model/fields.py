"""Typed, named access to a HF config dict: every problem becomes a DayzeroError naming the field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.limits import MAX_FIELD

MISSING: Any = object()


class ConfigFields:
    """Reads fields of one JSON object (`where` names it in messages, e.g. "config.json text_config")."""

    def __init__(self, data: dict[str, Any], where: str):
        if not isinstance(data, dict):
            raise DayzeroError(f"{where} must be a JSON object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def _raw(self, name: str, aliases: Sequence[str], default: Any) -> tuple[str, Any]:
        for key in (name, *aliases):
            if key in self.data and self.data[key] is not None:
                return key, self.data[key]
        if default is MISSING:
            spelled = " or ".join(repr(k) for k in (name, *aliases))
            raise DayzeroError(f"{self.where}: required field {spelled} is missing; add it to config.json")
        return name, default

    def _fail(self, key: str, value: Any, wanted: str) -> DayzeroError:
        return DayzeroError(f"{self.where}: field {key!r} must be {wanted}, got {value!r}")

    def int(self, name: str, default: Any = MISSING, aliases: Sequence[str] = (), minimum: int = 1,
            maximum: int = MAX_FIELD) -> Any:
        """An integer in minimum..maximum (model/limits.py: a larger one is a broken or hostile config)."""
        key, value = self._raw(name, aliases, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise self._fail(key, value, f"an integer from {minimum} to {maximum}")
        return value

    def optional_int(self, name: str, aliases: Sequence[str] = (), maximum: int = MAX_FIELD) -> int | None:
        return self.int(name, None, aliases, maximum=maximum)

    def float(self, name: str, default: Any = MISSING, aliases: Sequence[str] = (), positive: bool = False) -> Any:
        key, value = self._raw(name, aliases, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and value <= 0):
            raise self._fail(key, value, "a positive number" if positive else "a number")
        return float(value)

    def bool(self, name: str, default: Any = MISSING, aliases: Sequence[str] = ()) -> bool:
        key, value = self._raw(name, aliases, default)
        if not isinstance(value, bool):
            raise self._fail(key, value, "true or false")
        return value

    def str(self, name: str, default: Any = MISSING, choices: Sequence[str] | None = None) -> Any:
        key, value = self._raw(name, (), default)
        if not isinstance(value, str) or (choices is not None and value not in choices):
            wanted = "one of " + ", ".join(repr(c) for c in choices) if choices else "a string"
            raise self._fail(key, value, wanted)
        return value

    def int_list(self, name: str, default: Any = MISSING) -> Any:
        key, value = self._raw(name, (), default)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._fail(key, value, "a list of integers")
        return value

    def sub(self, name: str) -> ConfigFields | None:
        if self.data.get(name) is None:
            return None
        return ConfigFields(self.data[name], f"{self.where} {name}")

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None
