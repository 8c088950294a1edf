"""Tool calls in Kimi's format (Kimi K2, K3 and Kimi-Linear chat models): what the model writes, and the OpenAI
`tool_calls` it becomes.

A turn that calls tools ends in one section of calls. Each call names its function by an id `functions.NAME:IDX`
(IDX counts the conversation's calls from 0) and carries its arguments as JSON text:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The markers are special tokens, which decoding drops: a request with tools decodes them as text (`decode_keeping`),
and `ToolCallText` splits what the model wrote into the answer's text and its calls as the tokens arrive. The call
id given back is the model's own (`functions.get_weather:0`): Kimi's chat template writes it back into the
conversation beside the call's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENTS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
MARKERS = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENTS_BEGIN, CALL_END)
FUNCTION_ID_PREFIX = "functions."


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it

    def body(self, index: int | None = None) -> dict:
        """The OpenAI form; a streamed call carries its position among the choice's calls."""
        body = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return body if index is None else {"index": index, **body}


def function_id(name: str, index: int) -> str:
    return f"{FUNCTION_ID_PREFIX}{name}:{index}"


def call_prefix(function: str | None, index: int) -> str:
    """The text that makes the model's turn a call: of `function` (named tool_choice), or of a function it picks
    (None: tool_choice "required"); `index` counts the conversation's earlier calls."""
    head = SECTION_BEGIN + CALL_BEGIN
    return head + FUNCTION_ID_PREFIX if function is None else head + function_id(function, index) + ARGUMENTS_BEGIN


def marker_ids(tokenizer, markers: tuple[str, ...] = MARKERS) -> dict[int, str] | None:
    """Token id -> text of the markers (by default the five of tool calls), when the tokenizer has every one of them
    as a token; else None (also for a tokenizer that cannot look tokens up by their text)."""
    token_id = getattr(tokenizer, "token_id", lambda text: None)
    ids = {token_id(marker): marker for marker in markers}
    return None if None in ids else ids


def decode_keeping(decode: Callable[[list[int]], str], markers: dict[int, str]) -> Callable[[list[int]], str]:
    """A decode that writes the markers' text where `decode` drops them."""

    def decode_with_markers(ids: list[int]) -> str:
        pieces, run = [], []
        for token in ids:
            if token in markers:
                pieces += [decode(run), markers[token]]
                run = []
            else:
                run.append(token)
        return "".join(pieces) + decode(run)

    return decode_with_markers


def _parse_call(text: str) -> ToolCall | None:
    """`<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS` -> its call; None when malformed."""
    _, begun, call = text.partition(CALL_BEGIN)
    head, has_arguments, arguments = call.partition(ARGUMENTS_BEGIN)
    call_id = head.strip()
    name = call_id.rpartition(":")[0] if ":" in call_id else call_id
    name = name.removeprefix(FUNCTION_ID_PREFIX)
    if not (begun and has_arguments and name):
        return None
    return ToolCall(call_id, name, arguments.strip())


def marker_start(text: str, marker: str) -> int:
    """Where the longest end of `text` that could begin `marker` starts (len(text): none does)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return len(text) - size
    return len(text)


class ToolCallText:
    """One choice's text, split as it grows into the answer's text (what comes before the calls section) and its
    calls. Text the section holds that is not a well-formed call (an unfinished one, cut by max_tokens) comes back as
    answer text at the end, so nothing the model wrote is lost."""

    def __init__(self, prefix: str = "", closing: str = ""):
        """prefix: the text the turn was forced to start with; closing: the text that ends it when it stopped by
        itself (a named call's end markers, which its JSON-held arguments cannot write)."""
        self._pending = prefix  # text not yet given out
        self._in_section = False
        self._leftover = ""  # section text that was no call
        self.closing = closing

    def add(self, text: str) -> tuple[str, list[ToolCall]]:
        """Append text -> (answer text now safe to show, calls completed by it)."""
        self._pending += text
        if self._in_section:
            return "", self._take_calls()
        before, begun, after = self._pending.partition(SECTION_BEGIN)
        if not begun:
            cut = marker_start(self._pending, SECTION_BEGIN)
            shown, self._pending = self._pending[:cut], self._pending[cut:]
            return shown, []
        self._pending, self._in_section = after, True
        return before, self._take_calls()

    def close(self) -> list[ToolCall]:
        """The turn stopped by itself: a call still open gets the closing text -> the calls that completes."""
        if not (self.closing and self._in_section and CALL_BEGIN in self._pending):
            return []
        return self.add(self.closing)[1]

    def open_call(self) -> ToolCall | None:
        """The call being written, once its id is whole: its arguments so far, without a tail that may begin the
        call's end marker and without surrounding blanks (so they begin the whole call's arguments)."""
        if not self._in_section:
            return None
        call = _parse_call(self._pending)
        if call is None:
            return None
        written = self._pending.partition(CALL_BEGIN)[2].partition(ARGUMENTS_BEGIN)[2]
        return ToolCall(call.id, call.name, written[:marker_start(written, CALL_END)].strip())

    def finish(self, drop_open_call: bool = False) -> str:
        """The choice ended -> the rest of its answer text: what the section held that was no call, as written
        (drop_open_call: less an unfinished call, which went out as a streamed call)."""
        rest, leftover = self._pending, self._leftover
        if drop_open_call:
            rest = rest.partition(CALL_BEGIN)[0]
        self._pending = self._leftover = ""
        if not self._in_section:
            return rest
        if not leftover and not rest.replace(SECTION_END, "").strip():
            return ""
        return SECTION_BEGIN + leftover + rest

    def _take_calls(self) -> list[ToolCall]:
        calls = []
        while True:
            piece, ended, rest = self._pending.partition(CALL_END)
            if not ended:
                return calls
            call = _parse_call(piece)
            if call is None:
                self._leftover += piece + CALL_END
            else:
                calls.append(call)
            self._pending = rest
