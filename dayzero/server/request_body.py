"""A request body as JSON the rest of the server can trust: an object, nested at most MAX_NESTING deep, whose every
string (keys too) is valid Unicode.

JSON's \\uXXXX escapes can spell a lone UTF-16 surrogate ("a\\ud800b"), which Python keeps in its str but no encoder
writes out (the tokenizer's UTF-8 fails on it); and a body nested thousands deep overflows every recursive reader of
it (the parser first). Both are refused here, naming where in the body they are, before any field is read.
"""

from __future__ import annotations

import json

from dayzero.server.request_error import RequestError

# objects and arrays inside one another; a JSON schema the grammar can hold nests far less (json_schema.py)
MAX_NESTING = 128


def parse_body(raw: bytes) -> dict:
    """The JSON object in `raw` (RequestError: not JSON, not an object, nested too deep, a lone surrogate)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError(f"the request body nests deeper than {MAX_NESTING} levels of objects and arrays") from None
    except ValueError as err:
        raise RequestError(f"the request body is not valid JSON: {err}") from err
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    _check_values(body)
    return body


def _check_values(body: dict) -> None:
    """Walk the body (without recursion: its depth is what is checked) for nesting and strings."""
    pending: list[tuple[object, str, int]] = [(body, "", 0)]
    while pending:
        value, where, depth = pending.pop()
        if isinstance(value, str):
            _check_text(value, where)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_NESTING:
            raise RequestError(f"'{_field(where)}' nests deeper than {MAX_NESTING} levels of objects and arrays",
                               param=_field(where))
        if isinstance(value, dict):
            for key, item in value.items():
                inner = f"{where}.{_printable(key)}" if where else _printable(key)
                _check_text(key, inner)
                pending.append((item, inner, depth + 1))
        else:
            pending.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))


def _check_text(text: str, where: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        surrogate = f"\\u{ord(text[err.start]):04x}"
        raise RequestError(f"'{where}' holds a lone UTF-16 surrogate ({surrogate}), which is not a character; send "
                           "valid Unicode text (a pair of surrogates, or the character itself)",
                           param=_field(where)) from None


def _printable(key: str) -> str:
    """A key as an error message may show it (a lone surrogate as its escape)."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def _field(where: str) -> str:
    """The top-level field a path is in: messages[0].content -> messages."""
    return where.split(".")[0].split("[")[0]
