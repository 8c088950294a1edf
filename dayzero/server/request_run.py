"""One HTTP request's engine requests (one per choice: prompts x n) and what they produced so far, as the server
reads their updates back: text (stop strings cut), tool calls (a chat request with tools), finish reasons, log
probabilities, token counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

from dayzero.runtime.detokenizer import ChoiceText
from dayzero.runtime.engine_loop import Update, Updates
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.server.openai_protocol import GenerateRequest
from dayzero.server.openai_responses import usage
from dayzero.server.reasoning import ReasoningText
from dayzero.server.request_error import RequestError
from dayzero.server.tool_call_stream import StreamedCalls
from dayzero.structured.tool_calls import ToolCall, ToolCallText


class Piece(NamedTuple):
    """What an update adds to a choice: answer text, tool calls, reasoning (a thinking model's), and the tool-call
    deltas a stream sends (tool_call_stream.py)."""

    text: str
    calls: list[ToolCall]
    reasoning: str = ""
    call_deltas: tuple[dict, ...] = ()


@dataclass
class RequestRun:
    """One HTTP request's engine requests (one per choice) and what they produced."""

    request_id: str
    kind: str
    parsed: GenerateRequest
    prompt_ids: list[list[int]]
    updates: Updates
    texts: list[ChoiceText]
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.perf_counter)
    answered: set[int] = field(default_factory=set)  # choices whose first token came
    last_token_at: dict[int, float] = field(default_factory=dict)  # choice -> when its latest tokens came
    reasons: dict[int, str] = field(default_factory=dict)
    accepted: int = 0
    early: list[tuple[int, Update]] = field(default_factory=list)
    ended: bool = False
    logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict)  # choice -> its tokens' so far
    prompt_logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict)  # choice -> its prompt's tokens'
    # a chat request with tools: each choice's text split into answer and calls; parallel False keeps the first call
    tool_texts: list[ToolCallText] | None = None
    parallel_calls: bool = True
    calls: dict[int, list[ToolCall]] = field(default_factory=dict)
    streamed_calls: list[StreamedCalls] | None = None  # a streamed request's calls as deltas, per choice
    shown: dict[int, str] = field(default_factory=dict)  # choice -> its answer text so far
    # a chat request to a thinking model: each choice's text split into reasoning and the rest
    reasoning_texts: list[ReasoningText] | None = None
    reasoning: dict[int, str] = field(default_factory=dict)  # choice -> its reasoning so far

    @property
    def num_choices(self) -> int:
        return len(self.texts)

    @property
    def is_open(self) -> bool:
        return len(self.reasons) < self.num_choices

    def engine_id(self, index: int) -> str:
        return f"{self.request_id}-{index}"

    def apply(self, index: int, update: Update) -> Piece:
        """An update -> the answer text, tool calls and reasoning it adds to choice `index` (an engine failure
        raises)."""
        if update.error is not None:
            raise RequestError(update.error, 400 if update.refused else 503)
        if update.prompt_logprobs is not None:
            prompt = self.prompt_ids[index // self.parsed.n]
            # the first prompt token has no log probability: its entry names the token alone
            first = TokenLogprob(prompt[0], None, None)
            self.prompt_logprobs[index] = [first, *update.prompt_logprobs[1:]]
        if self.parsed.prompt_only:
            # max_tokens 0: the one token the engine ran to is not part of the answer
            if update.finish_reason is not None:
                self.reasons[index] = "length"
            return Piece("", [])
        if update.logprobs is not None:
            self.logprobs.setdefault(index, []).extend(update.logprobs)
        text = self.texts[index].add(update.token_ids)
        if update.finish_reason is not None:
            text += self.texts[index].finish()
        reasoning, text = self._think(index, text, update.finish_reason is not None)
        text, calls, deltas = self._split(index, text, update.finish_reason)
        if update.finish_reason is not None:
            # a turn that ended by itself after calling tools: OpenAI's reason is "tool_calls"
            called = update.finish_reason == "stop" and self.calls.get(index)
            self.reasons[index] = "tool_calls" if called else update.finish_reason
        self.shown[index] = self.shown.get(index, "") + text
        self.reasoning[index] = self.reasoning.get(index, "") + reasoning
        return Piece(text, calls, reasoning, deltas)

    def _think(self, index: int, text: str, last: bool) -> tuple[str, str]:
        """-> (reasoning, the rest of the text)."""
        if self.reasoning_texts is None:
            return "", text
        reasoning, text = self.reasoning_texts[index].add(text)
        if last:
            more_reasoning, more_text = self.reasoning_texts[index].finish()
            reasoning, text = reasoning + more_reasoning, text + more_text
        return reasoning, text

    def _split(self, index: int, text: str, reason: str | None) -> tuple[str, list[ToolCall], tuple[dict, ...]]:
        """reason: the choice's finish reason on its last update, else None -> (answer text, completed calls, the
        stream's call deltas)."""
        if self.tool_texts is None:
            return text, [], ()
        tool_text = self.tool_texts[index]
        text, calls = tool_text.add(text)
        if reason == "stop":
            calls = calls + tool_text.close()
        made = self.calls.setdefault(index, [])
        calls = calls[: max(0, 1 - len(made))] if not self.parallel_calls else calls
        made.extend(calls)
        stream = None if self.streamed_calls is None else self.streamed_calls[index]
        deltas = () if stream is None else stream.deltas(calls, tool_text.open_call())
        if reason is not None:
            text += tool_text.finish(drop_open_call=stream is not None and stream.open)
        return text, calls, deltas

    def usage(self) -> dict:
        generated = 0 if self.parsed.prompt_only else sum(t.num_tokens for t in self.texts)
        return usage(sum(len(ids) for ids in self.prompt_ids), generated)
