"""Prompts and conversations as vLLM's `LLM.generate` and `LLM.chat` take them.

generate: a string, {"prompt": str}, {"prompt_token_ids": [int, ...]}, or a list of these. Token ids go to the
engine as they are, never through the tokenizer, and are checked against the vocabulary first.
chat: one conversation (a list of {"role", "content", ...} messages) or a list of conversations; a content given as
a list of text parts ({"type": "text", "text": ...}) is joined, as the server joins it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from dayzero.errors import DayzeroError

PROMPT_KEYS = frozenset({"prompt", "prompt_token_ids"})


@dataclass(frozen=True)
class Prompt:
    text: str | None  # None: given as token ids
    token_ids: list[int] | None  # None: the text, to be tokenized


def parse_prompts(prompts, vocab_size: int) -> list[Prompt]:
    """A prompt or a list of them -> Prompts (token ids checked against the vocabulary)."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise DayzeroError(f"prompts must be a string, a dict or a list of them, got {type(prompts).__name__}")
    return [_prompt(prompt, index, vocab_size) for index, prompt in enumerate(prompts)]


def _prompt(prompt, index: int, vocab_size: int) -> Prompt:
    if isinstance(prompt, str):
        return Prompt(prompt, None)
    if not isinstance(prompt, dict):
        raise DayzeroError(f"prompt {index} is a {type(prompt).__name__}; give a string, {{\"prompt\": str}} or "
                           "{\"prompt_token_ids\": [int, ...]}")
    unknown = sorted(set(prompt) - PROMPT_KEYS)
    if unknown:
        raise DayzeroError(f"prompt {index} has keys dayzero does not read: {', '.join(unknown)} (it serves text "
                           "models: give \"prompt\" or \"prompt_token_ids\")")
    text = prompt.get("prompt")
    if text is not None and not isinstance(text, str):
        raise DayzeroError(f"prompt {index}: \"prompt\" must be a string")
    if "prompt_token_ids" in prompt:
        return Prompt(text, _token_ids(prompt["prompt_token_ids"], index, vocab_size))
    if text is None:
        raise DayzeroError(f"prompt {index} has neither \"prompt\" nor \"prompt_token_ids\"")
    return Prompt(text, None)


def _token_ids(ids, index: int, vocab_size: int) -> list[int]:
    try:
        ids = [_integer(token) for token in ids]
    except TypeError:
        raise DayzeroError(f"prompt {index}: \"prompt_token_ids\" must be a list of integers") from None
    if not ids:
        raise DayzeroError(f"prompt {index}: \"prompt_token_ids\" is empty; give at least one token")
    bad = next((token for token in ids if not 0 <= token < vocab_size), None)
    if bad is not None:
        raise DayzeroError(f"prompt {index}: token id {bad} is outside the vocabulary [0, {vocab_size})")
    return ids


def _integer(token) -> int:
    if isinstance(token, (bool, str)):
        raise TypeError(token)
    return operator.index(token)


def conversations(messages) -> list[list[dict]]:
    """One conversation or a list of them -> a list of conversations, each message's content as text."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise DayzeroError("chat() takes a conversation (a non-empty list of messages) or a list of conversations")
    batch = [messages] if isinstance(messages[0], dict) else list(messages)
    return [[_message(message, index) for message in _conversation(conversation, index)]
            for index, conversation in enumerate(batch)]


def _conversation(conversation, index: int) -> list:
    if not isinstance(conversation, (list, tuple)) or not conversation:
        raise DayzeroError(f"conversation {index} must be a non-empty list of messages")
    return list(conversation)


def _message(message, index: int) -> dict:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise DayzeroError(f"conversation {index}: each message is a dict with a \"role\", got {message!r}")
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):
            raise DayzeroError(f"conversation {index}: a list content takes text parts only ({{\"type\": \"text\", "
                               "\"text\": ...}}): dayzero serves text models")
        content = "".join(p["text"] for p in content)
    return {**message, "content": content if content is not None else ""}
