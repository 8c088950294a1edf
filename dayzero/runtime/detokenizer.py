"""A request's text as its tokens arrive: incremental decoding and stop strings, for streamed responses.

Decoding the whole output after every token costs O(n^2) over a long answer. Each call here decodes only the
tokens since the last emitted boundary (with the tokens before that boundary as context, for tokenizers whose
pieces depend on their neighbours), and holds text back while it ends in an incomplete character (a byte-level
tokenizer splits one character over several tokens; U+FFFD marks the gap). Stop strings are cut out of the text:
while a request runs, the last `len(longest stop) - 1` characters stay back, since they may begin a stop string.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self.ids: list[int] = []
        self._prefix = 0  # first token of the context window
        self._read = 0  # tokens up to here are in self.text
        self.text = ""

    def add(self, token_ids: list[int]) -> None:
        """Append tokens; the text grows by what they complete."""
        self.ids.extend(token_ids)
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            self.text += after[len(before):]
            self._prefix, self._read = self._read, len(self.ids)

    def flush(self) -> None:
        """Take in the held-back tail as it decodes (an incomplete character becomes U+FFFD)."""
        before = self._decode(self.ids[self._prefix:self._read])
        self.text += self._decode(self.ids[self._prefix:])[len(before):]
        self._prefix = self._read = len(self.ids)


class ChoiceText:
    """The text one choice may show so far: decoded, cut at the first stop string, never taken back."""

    def __init__(self, decode: Callable[[list[int]], str], stop: tuple[str, ...] = ()):
        self._detokenizer = IncrementalDetokenizer(decode)
        self._stop = tuple(s for s in stop if s)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._shown = 0

    @property
    def num_tokens(self) -> int:
        return len(self._detokenizer.ids)

    def add(self, token_ids: list[int]) -> str:
        """Append tokens -> the new text that is safe to show."""
        self._detokenizer.add(token_ids)
        return self._take(final=False)

    def finish(self) -> str:
        """The request ended -> the rest of its text (stop string removed)."""
        self._detokenizer.flush()
        return self._take(final=True)

    @property
    def text(self) -> str:
        """All text shown so far."""
        return self._cut(self._detokenizer.text)[: self._shown]

    def _take(self, final: bool) -> str:
        text = self._cut(self._detokenizer.text)
        end = len(text) if final or len(text) < len(self._detokenizer.text) else max(0, len(text) - self._hold)
        new = text[self._shown:end]
        self._shown = max(self._shown, end)
        return new

    def _cut(self, text: str) -> str:
        """text up to its first stop string."""
        hits = [i for i in (text.find(s) for s in self._stop) if i >= 0]
        return text[: min(hits)] if hits else text


class StopStringWatch:
    """Whether a growing token list's text now holds one of the stop strings, for the engine's finish check: each
    token decodes a short window and searches only the text it added (with the characters before it that a stop
    string could start in), where decoding the whole output every token cost O(n^2) over a long answer."""

    def __init__(self, decode: Callable[[list[int]], str], stop: tuple[str, ...]):
        self._detokenizer = IncrementalDetokenizer(decode)
        self._stop = tuple(s for s in stop if s)
        self._overlap = max((len(s) for s in self._stop), default=1) - 1
        self._searched = 0

    def add(self, token: int) -> bool:
        self._detokenizer.add([token])
        text = self._detokenizer.text
        fresh = text[max(0, self._searched - self._overlap):]
        self._searched = len(text)
        return any(s in fresh for s in self._stop)
