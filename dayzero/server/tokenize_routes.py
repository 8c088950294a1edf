"""vLLM's /tokenize and /detokenize bodies: a prompt (or a chat's messages, rendered as /v1/chat/completions renders
them) to its token ids, and token ids back to text."""

from __future__ import annotations

from dataclasses import dataclass

from dayzero.llm.chat_template import ChatTemplate
from dayzero.server.openai_fields import DETOKENIZE_FIELDS, TOKENIZE_FIELDS, check_fields
from dayzero.server.openai_messages import chat_messages, parse_tools
from dayzero.server.openai_protocol import flag
from dayzero.server.request_error import RequestError


@dataclass(frozen=True)
class TokenizeRequest:
    text: str
    add_special_tokens: bool


def parse_tokenize(body: dict, template: ChatTemplate) -> TokenizeRequest:
    """A prompt string, or messages through the chat template (whose markers make a BOS unneeded, as in chat)."""
    check_fields(body, "/tokenize", TOKENIZE_FIELDS)
    if ("prompt" in body) == ("messages" in body):
        raise RequestError("/tokenize takes one of 'prompt' (a string) or 'messages' (a chat)", param="prompt")
    if "prompt" in body:
        if not isinstance(body["prompt"], str):
            raise RequestError("'prompt' must be a string", param="prompt")
        return TokenizeRequest(body["prompt"], _flag(body, "add_special_tokens", True))
    tools = parse_tools(body)
    text = template.render(chat_messages(body), None if tools is None else list(tools.tools),
                           _flag(body, "add_generation_prompt", True))
    return TokenizeRequest(text, _flag(body, "add_special_tokens", template.source is None))


def _flag(body: dict, name: str, default: bool) -> bool:
    return default if body.get(name) is None else flag(body, name)


def parse_detokenize(body: dict, vocab_size: int) -> list[int]:
    check_fields(body, "/detokenize", DETOKENIZE_FIELDS)
    tokens = body.get("tokens")
    # bool is an int in Python, not a token id
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t for t in tokens):
        raise RequestError("'tokens' must be a list of token ids (integers >= 0)", param="tokens")
    if tokens and max(tokens) >= vocab_size:
        raise RequestError(f"token id {max(tokens)} is outside the vocabulary of {vocab_size}", param="tokens")
    return tokens
