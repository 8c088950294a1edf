"""Which tokens may come next in an answer held to JSON: the vocabulary's bytes in a trie, searched from the
recognizer's state (json_grammar.py), so each step masks the logits to the tokens that keep the text on the
grammar's way (a JSON object, or one that follows a schema).

A search walks the trie byte by byte and drops a branch at the first byte JSON refuses, so it visits few nodes
except inside a string, where almost any token fits. There the tokens without a quote, backslash or control byte
(most of a vocabulary) are allowed at once, and only the others are searched. Masks are kept by grammar and state
(the same states recur: inside a string, after a comma, ...). Special tokens have no bytes and are never allowed:
an answer ends when its object closes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

from dayzero.errors import DayzeroError
from dayzero.structured.json_grammar import Grammar, State

# masks kept, by grammar and state (a mask is a bool a vocabulary entry: 160 KB for Kimi's)
CACHED_MASKS = 512
# single-byte tokens JSON needs to reach every state's way out (a close, a digit, a quote ...)
NEEDED_BYTES = b'{}[]:,"\\0123456789.-+eEtrufalsn '
CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


class _Node:
    __slots__ = ("children", "tokens")

    def __init__(self):
        self.children: dict[int, _Node] = {}
        self.tokens: list[int] = []

    def insert(self, data: bytes, token: int) -> None:
        node = self
        for byte in data:
            node = node.children.setdefault(byte, _Node())
        node.tokens.append(token)


def _utf8_from_boundary(data: bytes) -> bool:
    """Valid UTF-8 read from a character's start, its last character possibly cut."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.reason == "unexpected end of data"
    return True


def _characters_inside(data: bytes) -> int:
    """At most how many characters a token can add inside a string: those before its first quote (0 when a control
    byte comes first: no string takes it)."""
    inside = data.split(b'"', 1)[0]
    if any(byte < 0x20 for byte in inside):
        return 0
    return len(inside.translate(None, CONTINUATION_BYTES))


def _string_safe(data: bytes) -> bool:
    return all(byte >= 0x20 and byte not in b'"\\' for byte in data)


class TokenTable:
    """A tokenizer's vocabulary as bytes, for masks: built once per engine, on the first request held to JSON."""

    def __init__(self, token_bytes: Callable[[int], bytes | None], vocab_size: int):
        self.vocab_size = vocab_size
        self.bytes = [token_bytes(token) or b"" for token in range(vocab_size)]
        single = {data for data in self.bytes if len(data) == 1}
        missing = bytes(b for b in NEEDED_BYTES if bytes([b]) not in single)
        if missing:
            raise DayzeroError(f"this tokenizer has no single-byte tokens for {missing!r}, which JSON answers need; "
                               "leave out response_format")
        self.trie, self.unsafe_trie = _Node(), _Node()
        safe = torch.zeros(vocab_size, dtype=torch.bool)
        # the most characters a token with a quote, backslash or control byte adds inside a string
        self.longest_unsafe = 0
        for token, data in enumerate(self.bytes):
            if not data:
                continue
            self.trie.insert(data, token)
            if _string_safe(data):
                safe[token] = True
            else:
                self.unsafe_trie.insert(data, token)
                self.longest_unsafe = max(self.longest_unsafe, _characters_inside(data))
        self.string_safe = safe
        # for strings whose characters are counted (a length bound): the characters each token begins (UTF-8 lead
        # bytes), and whether its bytes are valid UTF-8 read from a character's start (its last one may be cut)
        self.characters = torch.tensor([len(data.translate(None, CONTINUATION_BYTES)) for data in self.bytes])
        self.utf8_from_boundary = torch.tensor([_utf8_from_boundary(data) for data in self.bytes])
        self._masks: OrderedDict[tuple[str, State], torch.Tensor] = OrderedDict()
        self._unsafe_walks: dict[tuple[str, State], list[int]] = {}

    def mask(self, grammar: Grammar, state: State) -> torch.Tensor:
        """bool [vocab]: the tokens allowed after `state`."""
        key = (grammar.key, state)
        if key in self._masks:
            self._masks.move_to_end(key)
            return self._masks[key]
        mask = self._search(grammar, state)
        self._masks[key] = mask
        if len(self._masks) > CACHED_MASKS:
            self._masks.popitem(last=False)
        return mask

    def advance(self, grammar: Grammar, state: State, token: int) -> State | None:
        for byte in self.bytes[token]:
            state = grammar.advance(state, byte)
            if state is None:
                return None
        return state if self.bytes[token] else None

    def _search(self, grammar: Grammar, state: State) -> torch.Tensor:
        allowed: list[int] = []
        if grammar.is_plain_string(state):
            mask = self.string_safe.clone()
            room = grammar.string_room(state)
            if room is not None:
                mask &= self.utf8_from_boundary & (self.characters <= room)
            allowed = self._unsafe_walk(grammar, state)
        else:
            mask = torch.zeros(self.vocab_size, dtype=torch.bool)
            _walk(grammar, self.trie, state, allowed)
        mask[allowed] = True
        return mask

    def _unsafe_walk(self, grammar: Grammar, state: State) -> list[int]:
        """The tokens with a quote, backslash or control byte allowed inside a string: kept by the state as far as
        they can tell it apart (a counted string's count matters only near its bounds, within the longest such
        token's characters)."""
        key = (grammar.key, grammar.walk_key(state, self.longest_unsafe))
        if key not in self._unsafe_walks:
            if len(self._unsafe_walks) >= CACHED_MASKS:
                self._unsafe_walks.pop(next(iter(self._unsafe_walks)))
            allowed: list[int] = []
            _walk(grammar, self.unsafe_trie, key[1], allowed)
            self._unsafe_walks[key] = allowed
        return self._unsafe_walks[key]


def _walk(grammar: Grammar, node: _Node, state: State, allowed: list[int]) -> None:
    """Every token under `node` whose bytes the grammar takes from `state` -> allowed."""
    for byte, child in node.children.items():
        following = grammar.advance(state, byte)
        if following is None:
            continue
        allowed.extend(child.tokens)
        if child.children:
            _walk(grammar, child, following, allowed)


class JsonAnswer:
    """One sequence's place in its JSON answer: masks its logits rows, and moves on with each token it emits.

    A thinking model's answer (`reasoning`: its begin and end marker tokens) reasons freely first: the JSON starts
    after the end marker. Where the template did not open the reasoning (`opened` False), the first token may open it
    or start the JSON at once."""

    def __init__(self, table: TokenTable, grammar: Grammar, reasoning: tuple[int, int] | None = None,
                 opened: bool = False):
        self.table, self.grammar, self.reasoning = table, grammar, reasoning
        self.state = grammar.start()
        self.phase = "json" if reasoning is None else "thinking" if opened else "first"

    @property
    def done(self) -> bool:
        return self.phase == "json" and self.grammar.is_done(self.state)

    def mask(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n, vocab] (the next token's logits) -> the same with every token the grammar refuses at -inf."""
        if self.phase == "thinking":
            return rows
        allowed = self.table.mask(self.grammar, self.state).to(rows.device)
        if self.phase == "first":
            allowed = allowed.clone()
            allowed[self.reasoning[0]] = True
        return rows.masked_fill(~allowed, float("-inf"))

    def advance(self, token: int) -> None:
        if self.phase == "thinking":
            self.phase = "json" if token == self.reasoning[1] else "thinking"
            return
        if self.phase == "first":
            self.phase = "thinking" if token == self.reasoning[0] else "json"
            if self.phase == "thinking":
                return
        following = self.table.advance(self.grammar, self.state, token)
        if following is None:
            raise DayzeroError(f"token {token} does not continue the JSON answer (a mask was bypassed)")
        self.state = following
