"""A thinking model's reasoning, split from its answer (Kimi K2-Thinking's `<think>` ... `</think>`): OpenAI-style
clients get it as the message's `reasoning_content` beside `content`, whole or streamed.

A model thinks when its tokenizer has the markers as tokens (a request then decodes them as text, tool_calls.py's
decode_keeping) or its chat template writes them as text; `ReasoningText` splits the answer's text as it grows. A
turn is reasoning from its start when the chat template already opened it (the prompt ends in `<think>`) or when
the model's first text opens it; it is the answer from the closing marker on. A turn that never opens one is all
answer.
"""

from __future__ import annotations

from dayzero.runtime.tool_calls import marker_start

THINK_BEGIN, THINK_END = "<think>", "</think>"
THINK_MARKERS = (THINK_BEGIN, THINK_END)


def opens_thinking(prompt: str) -> bool:
    """Whether the chat template left the turn inside its reasoning."""
    return prompt.rstrip().endswith(THINK_BEGIN)


class ReasoningText:
    """One choice's text, split as it grows into reasoning and answer."""

    def __init__(self, thinking: bool):
        self._pending = ""  # text not yet given out
        self._mode = "reasoning" if thinking else "start"  # start: the first text may still open the reasoning

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
            before, ended, after = self._pending.partition(THINK_END)
            if not ended:
                cut = marker_start(self._pending, THINK_END)
                reasoning, self._pending = self._pending[:cut], self._pending[cut:]
                return reasoning, ""
            reasoning, self._pending, self._mode = before, after, "answer"
        answer, self._pending = self._pending, ""
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        """The choice ended -> the rest of its (reasoning, answer)."""
        rest, self._pending = self._pending, ""
        return (rest, "") if self._mode == "reasoning" else ("", rest)
