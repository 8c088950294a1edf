"""JSON as a byte-at-a-time recognizer, for answers held to JSON (`response_format: {"type": "json_object"}`).

A state is an immutable tuple, so a search over the vocabulary can branch from it (token_grammar.py): `advance`
returns the state after one more byte, or None when no JSON object can continue that way. The answer is one object
(`start()`); it is complete when its closing brace comes (`is_done`). Whitespace between tokens is allowed in runs of
at most MAX_WHITESPACE bytes and nesting to MAX_DEPTH, so a model cannot stall in blank space or brackets forever.
Bytes >= 0x80 are taken inside strings as they come (the UTF-8 of non-ASCII text).
"""

from __future__ import annotations

MAX_WHITESPACE = 32
MAX_DEPTH = 32
WHITESPACE = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrtu')
LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}

# modes: where in the text the recognizer is
TOP, VALUE, FIRST_KEY, KEY, COLON, AFTER, FIRST_ITEM, DONE = "top", "value", "first_key", "key", "colon", "after", \
    "first_item", "done"
STRING, ESCAPE, UNICODE, LITERAL, NUMBER = "string", "escape", "unicode", "literal", "number"
# number parts: after these a number may end
NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp"})

# (stack of open containers as b"{" / b"[", mode, detail: whitespace run / string role / literal rest / number part)
State = tuple


def start() -> State:
    """Before the answer: one JSON object."""
    return ((), TOP, 0)


def is_done(state: State) -> bool:
    return state[1] == DONE


def is_plain_string(state: State) -> bool:
    """Inside a string's text, where every byte but a quote, a backslash or a control byte keeps the state."""
    return state[1] == STRING


def advance(state: State, byte: int) -> State | None:
    return _STEPS[state[1]](state, byte)


def _spaced(state: State, byte: int) -> State | None:
    """Whitespace in a structural place: the same place, one byte further into the run (None past its cap)."""
    stack, mode, run = state
    return (stack, mode, run + 1) if run < MAX_WHITESPACE else None


def _value(stack: tuple, byte: int) -> State | None:
    """The first byte of a value."""
    if byte == ord("{"):
        return (stack + (b"{",), FIRST_KEY, 0) if len(stack) < MAX_DEPTH else None
    if byte == ord("["):
        return (stack + (b"[",), FIRST_ITEM, 0) if len(stack) < MAX_DEPTH else None
    if byte == ord('"'):
        return (stack, STRING, "value")
    if byte in LITERALS:
        return (stack, LITERAL, LITERALS[byte])
    if byte == ord("-"):
        return (stack, NUMBER, "sign")
    if byte == ord("0"):
        return (stack, NUMBER, "zero")
    if byte in DIGITS:
        return (stack, NUMBER, "int")
    return None


def _after_value(stack: tuple) -> State:
    return (stack, AFTER, 0) if stack else ((), DONE, 0)


def _top(state: State, byte: int) -> State | None:
    if byte in WHITESPACE:
        return _spaced(state, byte)
    return ((b"{",), FIRST_KEY, 0) if byte == ord("{") else None


def _in_value(state: State, byte: int) -> State | None:
    return _spaced(state, byte) if byte in WHITESPACE else _value(state[0], byte)


def _first_key(state: State, byte: int) -> State | None:
    if byte in WHITESPACE:
        return _spaced(state, byte)
    if byte == ord("}"):
        return _after_value(state[0][:-1])
    return (state[0], STRING, "key") if byte == ord('"') else None


def _key(state: State, byte: int) -> State | None:
    if byte in WHITESPACE:
        return _spaced(state, byte)
    return (state[0], STRING, "key") if byte == ord('"') else None


def _colon(state: State, byte: int) -> State | None:
    if byte in WHITESPACE:
        return _spaced(state, byte)
    return (state[0], VALUE, 0) if byte == ord(":") else None


def _after(state: State, byte: int) -> State | None:
    """After a value inside a container: a comma, or the container's close."""
    stack = state[0]
    if byte in WHITESPACE:
        return _spaced(state, byte)
    if byte == ord(","):
        return (stack, KEY, 0) if stack[-1] == b"{" else (stack, VALUE, 0)
    if byte == ord("}" if stack[-1] == b"{" else "]"):
        return _after_value(stack[:-1])
    return None


def _first_item(state: State, byte: int) -> State | None:
    if byte in WHITESPACE:
        return _spaced(state, byte)
    if byte == ord("]"):
        return _after_value(state[0][:-1])
    return _value(state[0], byte)


def _done(state: State, byte: int) -> State | None:
    return _spaced(state, byte) if byte in WHITESPACE else None


def _string(state: State, byte: int) -> State | None:
    stack, _, role = state
    if byte == ord('"'):
        return (stack, COLON, 0) if role == "key" else _after_value(stack)
    if byte == ord("\\"):
        return (stack, ESCAPE, role)
    return state if byte >= 0x20 else None


def _escape(state: State, byte: int) -> State | None:
    if byte not in ESCAPES:
        return None
    return (state[0], UNICODE, (state[2], 4)) if byte == ord("u") else (state[0], STRING, state[2])


def _unicode(state: State, byte: int) -> State | None:
    role, left = state[2]
    if byte not in HEX:
        return None
    return (state[0], STRING, role) if left == 1 else (state[0], UNICODE, (role, left - 1))


def _literal(state: State, byte: int) -> State | None:
    rest = state[2]
    if byte != rest[0]:
        return None
    return _after_value(state[0]) if len(rest) == 1 else (state[0], LITERAL, rest[1:])


# number part -> {byte class: next part}
_NUMBER_MOVES = {
    "sign": {"zero": "zero", "digit": "int"},
    "zero": {"dot": "dot", "e": "e"},
    "int": {"zero": "int", "digit": "int", "dot": "dot", "e": "e"},
    "dot": {"zero": "frac", "digit": "frac"},
    "frac": {"zero": "frac", "digit": "frac", "e": "e"},
    "e": {"zero": "exp", "digit": "exp", "sign": "exp_sign"},
    "exp_sign": {"zero": "exp", "digit": "exp"},
    "exp": {"zero": "exp", "digit": "exp"},
}


def _number_class(byte: int) -> str | None:
    if byte == ord("0"):
        return "zero"
    if byte in DIGITS:
        return "digit"
    return {ord("."): "dot", ord("e"): "e", ord("E"): "e", ord("+"): "sign", ord("-"): "sign"}.get(byte)


def _number(state: State, byte: int) -> State | None:
    stack, _, part = state
    following = _NUMBER_MOVES[part].get(_number_class(byte))
    if following is not None:
        return (stack, NUMBER, following)
    # the number ended: the byte belongs to what follows it
    return advance(_after_value(stack), byte) if part in NUMBER_ENDS else None


_STEPS = {TOP: _top, VALUE: _in_value, FIRST_KEY: _first_key, KEY: _key, COLON: _colon, AFTER: _after,
          FIRST_ITEM: _first_item, DONE: _done, STRING: _string, ESCAPE: _escape, UNICODE: _unicode,
          LITERAL: _literal, NUMBER: _number}
