"""The OpenAI API's response bodies: whole completions and streamed chunks, for text and chat completions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dayzero.runtime.logprobs import TokenLogprob


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    finish_reason: str | None
    logprobs: dict | None = None  # already in the endpoint's form
    tool_calls: tuple[dict, ...] = ()  # chat: in OpenAI's form (streamed ones with their index)
    reasoning: str = ""  # chat: a thinking model's reasoning (reasoning_content)


def _entry(choice: Choice, **content) -> dict:
    """A choice as both endpoints write it, around its endpoint-specific content."""
    return {"index": choice.index, **content, "logprobs": choice.logprobs, "finish_reason": choice.finish_reason}


def usage(num_prompt_tokens: int, num_completion_tokens: int) -> dict:
    return {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion_tokens,
            "total_tokens": num_prompt_tokens + num_completion_tokens}


class TextFormat:
    """/v1/completions"""

    id_prefix = "cmpl"
    object = "text_completion"
    chunk_object = "text_completion"

    @staticmethod
    def choice(choice: Choice) -> dict:
        return _entry(choice, text=choice.text)

    @staticmethod
    def delta(choice: Choice, first: bool) -> dict | None:
        """A streamed piece of a choice; None when there is nothing to send."""
        if not choice.text and choice.finish_reason is None and choice.logprobs is None:
            return None
        return TextFormat.choice(choice)

    @staticmethod
    def logprobs(entries: list[TokenLogprob], token_text: Callable[[int], str], offset: int) -> dict:
        """The legacy completions form; text_offset counts from `offset` (the choice's text before these tokens)."""
        tokens = [token_text(e.token) for e in entries]
        offsets = [offset + sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [None if e.top is None else {token_text(t): lp for t, lp in e.top} for e in entries],
                "text_offset": offsets}


class ChatFormat:
    """/v1/chat/completions"""

    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    @staticmethod
    def choice(choice: Choice) -> dict:
        """An answer that only calls tools has no content (null), as in OpenAI's."""
        message = {"role": "assistant", "content": choice.text or (None if choice.tool_calls else "")}
        if choice.reasoning:
            message["reasoning_content"] = choice.reasoning
        if choice.tool_calls:
            message["tool_calls"] = list(choice.tool_calls)
        return _entry(choice, message=message)

    @staticmethod
    def delta(choice: Choice, first: bool) -> dict | None:
        """The first chunk of a choice names the role; the last one carries the finish reason."""
        if not (first or choice.text or choice.finish_reason or choice.logprobs or choice.tool_calls
                or choice.reasoning):
            return None
        delta = {"role": "assistant", "content": choice.text} if first else {"content": choice.text}
        if not first and not choice.text:
            delta = {}
        if choice.reasoning:
            delta["reasoning_content"] = choice.reasoning
        if choice.tool_calls:
            delta["tool_calls"] = list(choice.tool_calls)
        return _entry(choice, delta=delta)

    @staticmethod
    def logprobs(entries: list[TokenLogprob], token_text: Callable[[int], str], offset: int) -> dict:
        def entry(token: int, logprob: float) -> dict:
            text = token_text(token)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {"content": [{**entry(e.token, e.logprob), "top_logprobs": [entry(t, lp) for t, lp in e.top]}
                            for e in entries]}


FORMATS = {"completion": TextFormat, "chat": ChatFormat}


def response(fmt, request_id: str, created: int, model: str, choices: list[Choice], usage_body: dict) -> dict:
    return {"id": request_id, "object": fmt.object, "created": created, "model": model,
            "choices": [fmt.choice(c) for c in choices], "usage": usage_body}


def chunk(fmt, request_id: str, created: int, model: str, choices: list[dict], usage_body: dict | None = None) -> dict:
    body = {"id": request_id, "object": fmt.chunk_object, "created": created, "model": model, "choices": choices}
    if usage_body is not None:
        body["usage"] = usage_body
    return body
