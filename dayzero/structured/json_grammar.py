"""JSON as a byte-at-a-time recognizer, for answers held to JSON: any JSON object (`response_format: {"type":
"json_object"}`), or one that follows a JSON schema (`{"type": "json_schema", ...}`, json_schema.py compiles it).

A grammar is a table of value nodes; a state is an immutable tuple (stack of open containers, mode, detail), so a
search over the vocabulary can branch from it (token_grammar.py). `advance` returns the state after one more byte,
or None when nothing the grammar allows can continue that way; the answer is complete when its root object closes
(`is_done`). Whitespace between tokens is allowed in runs of at most MAX_WHITESPACE bytes and nesting to MAX_DEPTH,
so a model cannot stall in blank space or brackets forever. Bytes >= 0x80 are taken inside strings as they come
(the UTF-8 of non-ASCII text). A schema object's keys come in the schema's order, each at most once (an optional one
may be left out), and in its canonical JSON spelling; enum and const values are spelled as json.dumps writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dayzero.structured import json_checked_string as checked
from dayzero.structured.json_checked_string import StringRules
from dayzero.structured.json_number_bounds import reachable, within
from dayzero.structured.json_pattern import Pattern
from dayzero.structured.kept_steps import KeptSteps

MAX_WHITESPACE = 32
MAX_DEPTH = 32
WHITESPACE = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrtu')
# an escape's character (\\u escapes aside)
ESCAPED_CHARS = {ord('"'): 0x22, ord("\\"): 0x5C, ord("/"): 0x2F, ord("b"): 0x08, ord("f"): 0x0C, ord("n"): 0x0A,
                 ord("r"): 0x0D, ord("t"): 0x09}
LITERALS = (b"true", b"false", b"null")

VALUE, FIRST_KEY, KEY, KEY_NAME, COLON, AFTER, FIRST_ITEM, DONE = "value", "first_key", "key", "key_name", "colon", \
    "after", "first_item", "done"
STRING, ESCAPE, UNICODE, CHOICE, NUMBER = "string", "escape", "unicode", "choice", "number"
# modes whose detail is a whitespace run (with a node for VALUE and COLON)
SPACED = frozenset({VALUE, FIRST_KEY, KEY, COLON, AFTER, FIRST_ITEM, DONE})
NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp"})

State = tuple


@dataclass(frozen=True)
class Node:
    """A value the grammar allows.

    kind: "any" (any JSON value), "object", "array", "string", "number", "integer", "choice" (one of `literals`,
    JSON texts: enum / const / boolean / null) or "union" (one of `members`, which start with different bytes)."""

    kind: str
    props: tuple[tuple[bytes, int, bool], ...] = ()  # object: (key as JSON text, value node, required), in order
    open: bool = False  # object: any string keys, any values (no props)
    item: int = 0  # array: the items' node
    min_items: int = 0
    max_items: int | None = None
    literals: tuple[bytes, ...] = ()
    members: tuple[int, ...] = ()
    min_length: int = 0  # string: characters (code points; an escape is one)
    max_length: int | None = None
    pattern: str | None = None  # string: an ECMA-262 regular expression it must match (json_pattern.py)
    # number / integer: (bound, exclusive) or None
    minimum: tuple[float, bool] | None = None
    maximum: tuple[float, bool] | None = None

    @property
    def checked_string(self) -> bool:
        return self.kind == "string" and (self.min_length > 0 or self.max_length is not None or bool(self.pattern))

    @property
    def bounded_number(self) -> bool:
        return self.minimum is not None or self.maximum is not None


ANY, ANY_OBJECT, ANY_ARRAY = 0, 1, 2
# the nodes every grammar starts with: any value, any object, any array
BASE_NODES = (Node("any"), Node("object", open=True), Node("array", item=ANY))


def first_bytes(nodes: tuple[Node, ...], index: int) -> frozenset[int]:
    """The bytes a value of node `index` may start with."""
    node = nodes[index]
    if node.kind == "any":
        return frozenset(b'{["-tfn') | DIGITS
    if node.kind == "union":
        return frozenset().union(*(first_bytes(nodes, m) for m in node.members))
    if node.kind == "choice":
        return frozenset(literal[0] for literal in node.literals)
    starts = {"object": b"{", "array": b"[", "string": b'"', "number": b"-", "integer": b"-"}
    return frozenset(starts[node.kind]) | (DIGITS if node.kind in ("number", "integer") else frozenset())


class Grammar:
    """A recognizer over `nodes`, whose answer is a value of node `root` (an object)."""

    def __init__(self, nodes: tuple[Node, ...] = BASE_NODES, root: int = ANY_OBJECT, key: str = "json_object"):
        self.nodes, self.root, self.key = nodes, root, key
        # searches over the vocabulary repeat the same steps: checked-string steps and bounded numbers' prefixes kept
        self._checked_steps = KeptSteps(self._checked_step)
        self._reachable_texts = KeptSteps(self._text_reachable)
        self._string_rules = {index: StringRules(node.min_length, node.max_length,
                                                 Pattern(node.pattern) if node.pattern else None)
                              for index, node in enumerate(nodes) if node.checked_string}
        self._steps = {VALUE: self._value_or_space, FIRST_KEY: self._first_key, KEY: self._key,
                       KEY_NAME: self._key_name, COLON: self._colon, AFTER: self._after,
                       FIRST_ITEM: self._first_item, DONE: self._done, STRING: self._string, ESCAPE: self._escape,
                       UNICODE: self._unicode, CHOICE: self._choice, NUMBER: self._number}

    def start(self) -> State:
        return ((), VALUE, (self.root, 0))

    @staticmethod
    def is_done(state: State) -> bool:
        return state[1] == DONE

    @staticmethod
    def is_plain_string(state: State) -> bool:
        """Inside a string's text, where every byte but a quote, a backslash or a control byte keeps the state (or,
        in a string with a length bound and no pattern, at a character's start: valid UTF-8 counts one more
        character a lead byte)."""
        return state[1] == STRING and (isinstance(state[2], str) or state[2].plain)

    def walk_key(self, state: State, span: int) -> State:
        """A plain string state whose tokens of at most `span` characters the grammar takes exactly as it takes them
        from `state`: a counted string's count moved as far as its bounds cannot tell (masks kept by it recur)."""
        role = state[2]
        if isinstance(role, str):
            return state
        return (state[0], state[1], role._replace(count=checked.equivalent_count(role, self._string_rules[role.node],
                                                                                  span)))

    def string_room(self, state: State) -> int | None:
        """Inside a string whose characters are counted: how many more it may take (None: not counted)."""
        role = state[2]
        return None if isinstance(role, str) else checked.room(role, self._string_rules[role.node])

    def advance(self, state: State, byte: int) -> State | None:
        if byte in WHITESPACE and state[1] in SPACED:
            return _spaced(state)
        return self._steps[state[1]](state, byte)

    # values

    def _value_or_space(self, state: State, byte: int) -> State | None:
        return self._value(state[0], state[2][0], byte)

    def _value(self, stack: tuple, index: int, byte: int) -> State | None:
        """The first byte of a value of node `index`."""
        node = self.nodes[index]
        kind = node.kind
        if kind == "union":
            member = next((m for m in node.members if byte in first_bytes(self.nodes, m)), None)
            return None if member is None else self._value(stack, member, byte)
        if kind == "any":
            kind = {ord("{"): "object", ord("["): "array", ord('"'): "string"}.get(byte, "number")
            index = {"object": ANY_OBJECT, "array": ANY_ARRAY}.get(kind, index)
            if byte in b"tfn":
                return self._choose(stack, LITERALS, byte)
        if kind == "choice":
            return self._choose(stack, node.literals, byte)
        if kind in ("object", "array") and len(stack) >= MAX_DEPTH:
            return None
        if kind == "object":
            return (stack + (("o", index, 0),), FIRST_KEY, 0) if byte == ord("{") else None
        if kind == "array":
            return (stack + (("a", index, 0),), FIRST_ITEM, 0) if byte == ord("[") else None
        if kind == "string":
            # a checked string carries its place (characters counted, pattern states) in place of the role
            role = checked.begin(index, self._string_rules[index]) if node.checked_string else "value"
            return (stack, STRING, role) if byte == ord('"') else None
        integer = kind == "integer"
        if byte == ord("-"):
            part = "sign"
        elif byte in DIGITS:
            part = "zero" if byte == ord("0") else "int"
        else:
            return None
        if not node.bounded_number:
            return (stack, NUMBER, (part, integer))
        # a bounded number carries its node and text so far: each byte must leave it a way into the bounds
        text = bytes([byte])
        return (stack, NUMBER, (part, integer, index, text)) if self._reachable_texts[index, text] else None

    def _text_reachable(self, index: int, text: bytes) -> bool:
        """Whether a bounded number's text so far still has a way into its node's bounds."""
        node = self.nodes[index]
        return reachable(text, node.kind == "integer", node.minimum, node.maximum)

    def _after_value(self, stack: tuple) -> State:
        """A value ended: counted in its array, then what may follow it."""
        if not stack:
            return ((), DONE, 0)
        kind, index, count = stack[-1]
        if kind == "a":
            stack = stack[:-1] + ((kind, index, count + 1),)
        return (stack, AFTER, 0)

    def _choose(self, stack: tuple, literals: tuple[bytes, ...], byte: int) -> State | None:
        rests = tuple(literal[1:] for literal in literals if literal[0] == byte)
        return (stack, CHOICE, rests) if rests else None

    def _choice(self, state: State, byte: int) -> State | None:
        stack, _, rests = state
        following = tuple(rest[1:] for rest in rests if rest and rest[0] == byte)
        if following:
            return (stack, CHOICE, following)
        # a literal ended (a number's may be the start of a longer one): the byte belongs to what follows
        return self.advance(self._after_value(stack), byte) if b"" in rests else None

    # objects

    def _keys(self, frame: tuple) -> tuple[tuple[bytes, int], ...]:
        """The keys an object may take next: the props from its next one up to and including the first required
        one, as (key as JSON text after its opening quote, prop index)."""
        _, index, start = frame
        keys = []
        for i, (key, _, required) in enumerate(self.nodes[index].props[start:], start):
            keys.append((key[1:], i))
            if required:
                break
        return tuple(keys)

    def _may_close(self, frame: tuple) -> bool:
        if frame[0] == "a":
            return frame[2] >= self.nodes[frame[1]].min_items
        return not any(required for _, _, required in self.nodes[frame[1]].props[frame[2]:])

    def _may_go_on(self, frame: tuple) -> bool:
        node = self.nodes[frame[1]]
        if frame[0] == "a":
            return node.max_items is None or frame[2] < node.max_items
        return node.open or frame[2] < len(node.props)

    def _open_key(self, stack: tuple) -> State | None:
        """After the opening quote of a key."""
        if self.nodes[stack[-1][1]].open:
            return (stack, STRING, "key")
        keys = self._keys(stack[-1])
        return (stack, KEY_NAME, keys) if keys else None

    def _first_key(self, state: State, byte: int) -> State | None:
        stack = state[0]
        if byte == ord("}") and self._may_close(stack[-1]):
            return self._after_value(stack[:-1])
        return self._open_key(stack) if byte == ord('"') else None

    def _key(self, state: State, byte: int) -> State | None:
        return self._open_key(state[0]) if byte == ord('"') else None

    def _key_name(self, state: State, byte: int) -> State | None:
        stack, _, keys = state
        following = tuple((rest[1:], i) for rest, i in keys if rest[0] == byte)
        if not following:
            return None
        ended = next((i for rest, i in following if not rest), None)
        if ended is None:
            return (stack, KEY_NAME, following)
        kind, index, _ = stack[-1]
        return (stack[:-1] + ((kind, index, ended + 1),), COLON, (self.nodes[index].props[ended][1], 0))

    def _colon(self, state: State, byte: int) -> State | None:
        return (state[0], VALUE, (state[2][0], 0)) if byte == ord(":") else None

    # containers

    def _after(self, state: State, byte: int) -> State | None:
        """After a value inside a container: a comma (when more may come), or the container's close."""
        stack = state[0]
        frame = stack[-1]
        if byte == ord(",") and self._may_go_on(frame):
            return (stack, KEY, 0) if frame[0] == "o" else (stack, VALUE, (self.nodes[frame[1]].item, 0))
        if byte == ord("}" if frame[0] == "o" else "]") and self._may_close(frame):
            return self._after_value(stack[:-1])
        return None

    def _first_item(self, state: State, byte: int) -> State | None:
        stack = state[0]
        frame = stack[-1]
        if byte == ord("]") and self._may_close(frame):
            return self._after_value(stack[:-1])
        if not self._may_go_on(frame):
            return None
        return self._value(stack, self.nodes[frame[1]].item, byte)

    def _done(self, state: State, byte: int) -> State | None:
        return None

    # strings and numbers

    def _string(self, state: State, byte: int) -> State | None:
        stack, _, role = state
        if not isinstance(role, str):
            return self._checked_string(stack, role, byte)
        if byte == ord('"'):
            return (stack, COLON, (ANY, 0)) if role == "key" else self._after_value(stack)
        if byte == ord("\\"):
            return (stack, ESCAPE, role)
        return state if byte >= 0x20 else None

    def _checked_string(self, stack: tuple, role: checked.CheckedString, byte: int) -> State | None:
        mode, following = self._checked_steps[role, byte]
        if mode is None:
            return None
        return self._after_value(stack) if mode == DONE else (stack, mode, following)

    def _checked_step(self, role: checked.CheckedString, byte: int) -> tuple[str | None, object]:
        """-> (the mode after the byte: STRING, ESCAPE, DONE for the closing quote, None: refused; the role)."""
        rules = self._string_rules[role.node]
        if byte == ord('"') and not role.continuations:
            return (DONE, None) if checked.may_close(role, rules) else (None, None)
        if byte == ord("\\") and not role.continuations:
            return (ESCAPE, role) if checked.may_escape(role, rules) else (None, None)
        following = checked.take_byte(role, rules, byte) if byte >= 0x20 else None
        return (None, None) if following is None else (STRING, following)

    def _escape(self, state: State, byte: int) -> State | None:
        if byte not in ESCAPES:
            return None
        role = state[2]
        if byte == ord("u"):
            if not isinstance(role, str) and not checked.may_take_digits(role, self._string_rules[role.node], b""):
                return None
            return (state[0], UNICODE, (role, b""))
        if isinstance(role, str):
            return (state[0], STRING, role)
        return self._checked_char(state[0], role, ESCAPED_CHARS[byte])

    def _unicode(self, state: State, byte: int) -> State | None:
        role, digits = state[2]
        if byte not in HEX:
            return None
        # a string that is not checked keeps only how many digits came (fewer states to mask)
        digits += b"0" if isinstance(role, str) else bytes([byte])
        if isinstance(role, str):
            return (state[0], UNICODE, (role, digits)) if len(digits) < 4 else (state[0], STRING, role)
        if len(digits) < 4:
            feasible = checked.may_take_digits(role, self._string_rules[role.node], digits)
            return (state[0], UNICODE, (role, digits)) if feasible else None
        return self._checked_char(state[0], role, int(digits, 16))

    def _checked_char(self, stack: tuple, role: checked.CheckedString, code: int) -> State | None:
        following = checked.take_escaped(role, self._string_rules[role.node], code)
        return None if following is None else (stack, STRING, following)

    def _number(self, state: State, byte: int) -> State | None:
        stack, _, detail = state
        part, integer, bounded = detail[0], detail[1], len(detail) > 2
        moves = _INTEGER_MOVES if integer else _BOUNDED_NUMBER_MOVES if bounded else _NUMBER_MOVES
        following = moves[part].get(_number_class(byte))
        if following is not None and not bounded:
            return (stack, NUMBER, (following, integer))
        if following is not None:
            text = detail[3] + bytes([byte])
            reached = self._reachable_texts[detail[2], text]
            return (stack, NUMBER, (following, integer, detail[2], text)) if reached else None
        if part not in NUMBER_ENDS:
            return None
        if bounded:
            node = self.nodes[detail[2]]
            if not within(detail[3], node.minimum, node.maximum):
                return None
        # the number ended: the byte belongs to what follows it
        return self.advance(self._after_value(stack), byte)


def _spaced(state: State) -> State | None:
    """Whitespace in a structural place: the same place, one byte further into the run (None past its cap)."""
    stack, mode, detail = state
    if mode in (VALUE, COLON):
        node, run = detail
        return (stack, mode, (node, run + 1)) if run < MAX_WHITESPACE else None
    return (stack, mode, detail + 1) if detail < MAX_WHITESPACE else None


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
_INTEGER_MOVES = {"sign": {"zero": "zero", "digit": "int"}, "zero": {}, "int": {"zero": "int", "digit": "int"}}
# a number with bounds is written without an exponent, so that its digits so far say where it can still end
_BOUNDED_NUMBER_MOVES = {part: {c: p for c, p in moves.items() if c != "e"} for part, moves in _NUMBER_MOVES.items()}


def _number_class(byte: int) -> str | None:
    if byte == ord("0"):
        return "zero"
    if byte in DIGITS:
        return "digit"
    return {ord("."): "dot", ord("e"): "e", ord("E"): "e", ord("+"): "sign", ord("-"): "sign"}.get(byte)


def json_text(value) -> bytes:
    """A value's canonical JSON text, as enum / const values and keys are matched."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


JSON_OBJECT = Grammar()
