"""A thinking model's reasoning, split from its answer (Kimi K2-Thinking's `<think>` ... `</think>`): OpenAI-style
clients get it as the message's `reasoning_content` beside `content`, whole or streamed.

A model thinks when its tokenizer has the markers as tokens (a request then decodes them as text, tool_calls.py's
decode_keeping) or its chat template writes them as text; `ReasoningText` splits the answer's text as it grows. A
turn is reasoning from its start when the chat template already opened it (the prompt ends in `<think>`) or when
the model's first text opens it; it is the answer from the closing marker on. A turn that never opens one is all
answer. A request with tools also ends the reasoning where a tool-call section begins (Kimi K2.5's interleaved
thinking calls tools without closing its reasoning first): the section stays in the answer, where its calls are read.
"""

from __future__ import annotations

from dayzero.structured.tool_calls import marker_start

THINK_BEGIN, THINK_END = "<think>", "</think>"
THINK_MARKERS = (THINK_BEGIN, THINK_END)


def opens_thinking(prompt: str) -> bool:
    """Whether the chat template left the turn inside its reasoning."""
    return prompt.rstrip().endswith(THINK_BEGIN)


class ReasoningText:
    """One choice's text, split as it grows into reasoning and answer."""

    def __init__(self, thinking: bool, kept_ends: tuple[str, ...] = ()):
        """kept_ends: markers that also end the reasoning and begin the answer (a tool-call section's)."""
        self._pending = ""  # text not yet given out
        self._mode = "reasoning" if thinking else "start"  # start: the first text may still open the reasoning
        self.kept_ends = kept_ends

    def add(self, text: str) -> tuple[str, str]:
        """Append text -> (reasoning, answer text) now safe to show."""
        self._pending += text
        if self._mode == "start":
            opening = self._pending.lstrip()
            if THINK_BEGIN.startswith(opening):
                return "", ""
            self._mode = "answer"
            if opening.startswith(THINK_BEGIN):
                self._pending, self._mode = opening[len(THINK_BEGIN):], "reasoning"
        reasoning = ""
        if self._mode == "reasoning":
            end, marker = self._first_end()
            if marker is None:
                cut = min(marker_start(self._pending, m) for m in (THINK_END, *self.kept_ends))
                reasoning, self._pending = self._pending[:cut], self._pending[cut:]
                return reasoning, ""
            answer_from = end + len(marker) if marker == THINK_END else end
            reasoning, self._pending, self._mode = self._pending[:end], self._pending[answer_from:], "answer"
        answer, self._pending = self._pending, ""
        return reasoning, answer

    def _first_end(self) -> tuple[int, str | None]:
        """Where the reasoning's first end marker in the pending text starts, and which (None: none yet)."""
        found = [(self._pending.find(m), m) for m in (THINK_END, *self.kept_ends) if m in self._pending]
        return min(found) if found else (-1, None)

    def finish(self) -> tuple[str, str]:
        """The choice ended -> the rest of its (reasoning, answer)."""
        rest, self._pending = self._pending, ""
        return (rest, "") if self._mode == "reasoning" else ("", rest)
