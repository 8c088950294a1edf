"""Tool calls held to the tools offered, under `tool_choice` "auto" and "required": once the model opens a call
section, each call's id names one of the offered functions (`functions.NAME:IDX`), its arguments follow that
function's parameters schema (any JSON object where dayzero cannot hold the schema), and the markers come in
Kimi's order (tool_calls.py):

    text | SECTION_BEGIN (CALL_BEGIN id ARGUMENTS_BEGIN arguments CALL_END)+ SECTION_END

Under "auto" the model writes freely until it opens a section (the other four markers are refused there); under
"required" the prompt already opened the section and the first call's id up to `functions.`. The turn ends with
the section; without `parallel_tool_calls` the section holds one call. A call of a named function is held by
JsonAnswer alone (chat_turn.py): its prompt opens the arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dayzero.errors import DayzeroError
from dayzero.structured.json_grammar import Grammar
from dayzero.structured.token_grammar import TokenTable
from dayzero.structured.tool_calls import FUNCTION_ID_PREFIX, MARKERS

# digits of a call's index (IDX counts the conversation's calls; written without leading zeros)
MAX_INDEX_DIGITS = 4
TEXT, SECTION, CALL_ID, ARGUMENTS, CALL_END, AFTER_CALL, DONE = ("text", "section", "id", "arguments", "call_end",
                                                                 "after_call", "done")


@dataclass(frozen=True)
class ToolCallRules:
    """How an answer's tool calls are held: plain values, sent with the request to the engine."""

    markers: tuple[int, ...]  # the token ids of MARKERS, in their order
    functions: tuple[tuple[str, str | None], ...]  # (name, its parameters schema as JSON text; None: any object)
    opened: bool  # the prompt opened the section and the first call's id ("required")
    parallel: bool  # more than one call in the section


class FunctionIdGrammar:
    """The bytes of a call's id, `functions.NAME:IDX` with NAME one of `names` (json_grammar's interface; a state
    is the id's bytes so far)."""

    def __init__(self, names: tuple[str, ...]):
        self.heads = tuple(f"{FUNCTION_ID_PREFIX}{name}:".encode() for name in names)
        self.key = "function-id:" + ",".join(names)

    def start(self) -> bytes:
        return b""

    def advance(self, state: bytes, byte: int) -> bytes | None:
        text = state + bytes([byte])
        if any(head.startswith(text) for head in self.heads):
            return text
        head, _, index = text.rpartition(b":")
        numbered = head + b":" in self.heads and index.isdigit() and len(index) <= MAX_INDEX_DIGITS
        return text if numbered and not (len(index) > 1 and index.startswith(b"0")) else None

    def is_done(self, state: bytes) -> bool:
        head, _, index = state.rpartition(b":")
        return head + b":" in self.heads and index.isdigit()

    def is_plain_string(self, state: bytes) -> bool:
        return False

    def string_room(self, state: bytes) -> int | None:
        return None


class ToolCallAnswer:
    """One sequence's place in a turn whose tool calls are held (the JsonAnswer interface: mask, advance, done)."""

    def __init__(self, table: TokenTable, rules: ToolCallRules, arguments_grammar: Callable[[str | None], Grammar]):
        self.table, self.rules, self.arguments_grammar = table, rules, arguments_grammar
        self.section_begin, self.section_end, self.call_begin, self.arguments_begin, self.call_end = rules.markers
        self.schemas = dict(rules.functions)
        self.ids = FunctionIdGrammar(tuple(self.schemas))
        self.phase = CALL_ID if rules.opened else TEXT
        self.state: object = FUNCTION_ID_PREFIX.encode() if rules.opened else None
        self.grammar: Grammar | FunctionIdGrammar = self.ids

    @property
    def done(self) -> bool:
        return self.phase == DONE

    def mask(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n, vocab] -> the same with every token the calls' rules refuse at -inf."""
        if self.phase == TEXT:
            return rows.index_fill(-1, torch.tensor(self.rules.markers[1:], device=rows.device), float("-inf"))
        allowed = self._allowed()
        return rows.masked_fill(~allowed.to(rows.device), float("-inf"))

    def _allowed(self) -> torch.Tensor:
        if self.phase in (CALL_ID, ARGUMENTS):
            allowed = self.table.mask(self.grammar, self.state)
            if self.phase == CALL_ID and self.ids.is_done(self.state):
                allowed = allowed.clone()
                allowed[self.arguments_begin] = True
            return allowed
        allowed = torch.zeros(self.table.vocab_size, dtype=torch.bool)
        allowed[self._markers_next()] = True
        return allowed

    def _markers_next(self) -> list[int]:
        if self.phase == SECTION:
            return [self.call_begin]
        if self.phase == CALL_END:
            return [self.call_end]
        return [self.call_begin, self.section_end] if self.rules.parallel else [self.section_end]

    def advance(self, token: int) -> None:
        if self.phase in (CALL_ID, ARGUMENTS) and token not in self.rules.markers:
            self._advance_text(token)
        elif self.phase == TEXT:
            self.phase = SECTION if token == self.section_begin else TEXT
        else:
            self._advance_marker(token)

    def _advance_text(self, token: int) -> None:
        following = self.table.advance(self.grammar, self.state, token)
        if following is None:
            raise DayzeroError(f"token {token} does not continue the tool call (a mask was bypassed)")
        self.state = following
        if self.phase == ARGUMENTS and self.grammar.is_done(following):
            self.phase = CALL_END

    def _advance_marker(self, token: int) -> None:
        if token == self.call_begin and self.phase in (SECTION, AFTER_CALL):
            self.phase, self.grammar, self.state = CALL_ID, self.ids, self.ids.start()
        elif token == self.arguments_begin and self.phase == CALL_ID and self.ids.is_done(self.state):
            name = self.state.rpartition(b":")[0].decode()[len(FUNCTION_ID_PREFIX):]
            self.grammar = self.arguments_grammar(self.schemas[name])
            self.phase, self.state = ARGUMENTS, self.grammar.start()
        elif token == self.call_end and self.phase == CALL_END:
            self.phase = AFTER_CALL
        elif token == self.section_end and self.phase == AFTER_CALL:
            self.phase = DONE
        else:
            raise DayzeroError(f"marker token {token} is out of place in the tool calls (a mask was bypassed)")


def marker_token_ids(markers: dict[int, str]) -> tuple[int, ...]:
    """{token id: marker text} (tool_calls.marker_ids) -> the ids in MARKERS' order."""
    ids = {text: token for token, text in markers.items()}
    return tuple(ids[marker] for marker in MARKERS)
