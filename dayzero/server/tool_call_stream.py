"""One choice's tool calls as OpenAI streams them: a call's id, type and name in one delta as soon as its head is
read (with empty arguments), then its arguments piece by piece, each delta numbered by the call's place among the
choice's calls. The arguments streamed add up to the whole call's (tool_calls.ToolCall)."""

from __future__ import annotations

from dayzero.structured.tool_calls import ToolCall


class StreamedCalls:
    def __init__(self, keep_one: bool = False):
        self.keep_one = keep_one  # parallel_tool_calls false: the first call only
        self.announced = 0  # calls whose head went out
        self.open = False  # the last announced call has not completed
        self.sent = 0  # characters of the open call's arguments sent

    def deltas(self, completed: list[ToolCall], open_call: ToolCall | None) -> tuple[dict, ...]:
        """The calls an update completed and the call still open after it (its arguments so far) -> the deltas."""
        out = [delta for call in completed for delta in self._complete(call)]
        if open_call is not None:
            out += self._extend(open_call)
        return tuple(out)

    def _complete(self, call: ToolCall) -> list[dict]:
        if self.open:
            self.open = False
            rest = call.arguments[self.sent:]
            return [self._arguments(rest)] if rest else []
        if self.keep_one and self.announced:
            return []
        self.announced += 1
        return [call.body(self.announced - 1)]

    def _extend(self, call: ToolCall) -> list[dict]:
        out = []
        if not self.open:
            if self.keep_one and self.announced:
                return []
            self.announced, self.open, self.sent = self.announced + 1, True, 0
            out.append(ToolCall(call.id, call.name, "").body(self.announced - 1))
        if len(call.arguments) > self.sent:
            out.append(self._arguments(call.arguments[self.sent:]))
            self.sent = len(call.arguments)
        return out

    def _arguments(self, piece: str) -> dict:
        return {"index": self.announced - 1, "function": {"arguments": piece}}
