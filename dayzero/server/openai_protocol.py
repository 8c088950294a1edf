"""The OpenAI API's request fields as dayzero reads them.

`/v1/completions` and `/v1/chat/completions` share the sampling fields; they ask for log probabilities in their own
ways (`logprobs: n` / `logprobs: true, top_logprobs: n`). `echo` (completions) puts the prompt's text before each
answer; with `logprobs` the prompt's tokens get theirs too, and `max_tokens: 0` then asks for nothing else (how
evaluation harnesses score text). Fields dayzero cannot honour (suffix, ...) are refused by name rather than
ignored, and so are fields it does not know (openai_fields.py lists what each route takes), so a client never gets
an answer computed differently from what it asked for. `response_format: {"type": "json_object"}` holds the answer
to one JSON object, `{"type": "json_schema", ...}` to one that follows the schema (structured/json_schema.py).
`top_k`, `ignore_eos`, `stop_token_ids`, `repetition_penalty`, `min_p` and `min_tokens` are accepted as extensions,
as in vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dayzero.runtime.logprobs import MAX_TOP_LOGPROBS
from dayzero.runtime.sampling import SamplingParams
from dayzero.server.openai_fields import CHAT_FIELDS, COMPLETION_FIELDS, check_fields
from dayzero.server.request_error import RequestError
from dayzero.structured.json_schema import SchemaError, checked_schema
from dayzero.structured.tool_call_grammar import ToolCallRules

MAX_CHOICES = 16
MAX_STOP_STRINGS = 16
MAX_STOP_TOKEN_IDS = 64
# as in OpenAI's API: 16 tokens for a text completion, up to the context's end for a chat answer
DEFAULT_MAX_TOKENS = {"max_tokens": 16, "max_completion_tokens": None}


@dataclass(frozen=True)
class Sampling:
    """The sampling fields of a request; max_tokens None = up to the engine's max length."""

    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    logprobs: int | None = None  # top alternatives a token; None: no log probabilities
    prompt_logprobs: int | None = None  # the same for the prompt's tokens (completions: echo with logprobs)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    min_tokens: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop_token_ids: tuple[int, ...] = ()  # vLLM's extension: ids that end the answer (their text stays in it)
    response_format: str | None = None  # "json_object" / "json_schema": the answer is one JSON object
    json_schema: str | None = None  # the schema "json_schema" follows, as JSON text
    reasoning_tokens: tuple[int, int] | None = None  # a thinking model's markers: its JSON starts after them
    reasoning_opened: bool = False
    tool_calls: ToolCallRules | None = None  # the answer's tool calls held to the offered functions

    def params(self, num_prompt_tokens: int, max_len: int, choice: int) -> SamplingParams:
        """Choice i of a request with a seed samples with seed + i, so n > 1 choices differ but replay. max_tokens 0
        (the prompt only) still runs to one token, which the server leaves out."""
        max_tokens = self.max_tokens if self.max_tokens is not None else max(1, max_len - num_prompt_tokens)
        max_tokens = max(max_tokens, 1)
        seed = None if self.seed is None else self.seed + choice
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, seed=seed, stop=self.stop, ignore_eos=self.ignore_eos,
                              logprobs=self.logprobs, prompt_logprobs=self.prompt_logprobs,
                              presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, logit_bias=self.logit_bias,
                              repetition_penalty=self.repetition_penalty, min_p=self.min_p,
                              min_tokens=min(self.min_tokens, max_tokens),
                              stop_token_ids=self.stop_token_ids, response_format=self.response_format,
                              json_schema=self.json_schema, reasoning_tokens=self.reasoning_tokens,
                              reasoning_opened=self.reasoning_opened, tool_calls=self.tool_calls)


@dataclass(frozen=True)
class GenerateRequest:
    prompts: tuple[str | tuple[int, ...], ...]  # text, or token ids
    sampling: Sampling
    n: int
    stream: bool
    include_usage: bool
    echo: bool = False  # completions: the prompt's text goes before each answer
    prompt_only: bool = False  # completions, max_tokens 0 with echo: the answer is the prompt alone


def _number(body: dict, name: str, default, kind: type, low: float, high: float):
    value = body.get(name, default)
    if value is None:
        return default
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not integral):
        raise RequestError(f"'{name}' must be {'an integer' if kind is int else 'a number'}, got {value!r}",
                           param=name)
    # an integer compares exactly, however long (math.isfinite would overflow on one past 1.8e308)
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise RequestError(f"'{name}' must be in [{low}, {high}], got {value}", param=name)
    return kind(value)


def flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"'{name}' must be true or false, got {value!r}", param=name)
    return value


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of them", param="stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise RequestError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}", param="stop")
    return tuple(stop)


def _stop_token_ids(body: dict) -> tuple[int, ...]:
    """vLLM's stop_token_ids: a list of token ids (the server checks them against the vocabulary)."""
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
        raise RequestError("'stop_token_ids' must be a list of token ids", param="stop_token_ids")
    if len(ids) > MAX_STOP_TOKEN_IDS:
        raise RequestError(f"at most {MAX_STOP_TOKEN_IDS} stop token ids, got {len(ids)}", param="stop_token_ids")
    return tuple(ids)


def _logit_bias(body: dict) -> tuple[tuple[int, float], ...]:
    """{"token id": bias in [-100, 100]} -> ((token, bias), ...); the server checks the ids against the vocabulary."""
    bias = body.get("logit_bias") or {}
    if not isinstance(bias, dict):
        raise RequestError("'logit_bias' must map token ids to biases", param="logit_bias")
    try:
        pairs = tuple((int(token), float(value)) for token, value in bias.items())
    except (TypeError, ValueError, OverflowError) as err:
        raise RequestError(f"'logit_bias' must map token ids to numbers: {err}", param="logit_bias") from err
    if any(token < 0 or not -100 <= value <= 100 for token, value in pairs):
        raise RequestError("'logit_bias' takes token ids >= 0 and biases in [-100, 100]", param="logit_bias")
    return pairs


def _response_format(body: dict) -> tuple[str | None, str | None]:
    """-> (None: text, "json_object" or "json_schema"; the schema as JSON text)."""
    response_format = body.get("response_format")
    if response_format in (None, {"type": "text"}):
        return None, None
    if response_format == {"type": "json_object"}:
        return "json_object", None
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        raise RequestError("'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                           "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                           param="response_format")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise RequestError("'response_format.json_schema' must be an object with the schema under \"schema\"",
                           param="response_format")
    try:
        return "json_schema", checked_schema(spec["schema"])
    except SchemaError as err:
        raise RequestError(f"response_format.json_schema: {err}", param="response_format") from err


def _sampling(body: dict, max_tokens_field: str, logprobs: int | None, echo: bool) -> Sampling:
    max_tokens = _number(body, max_tokens_field, DEFAULT_MAX_TOKENS[max_tokens_field], int, 0, 2**31 - 1)
    response_format, json_schema = _response_format(body)
    if max_tokens == 0 and not echo:
        raise RequestError(f"'{max_tokens_field}' must be >= 1 (0 only with \"echo\": true, for the prompt alone)",
                           param=max_tokens_field)
    top_k = _number(body, "top_k", 0, int, -1, 2**31 - 1)
    return Sampling(max_tokens=max_tokens, temperature=_number(body, "temperature", 1.0, float, 0.0, 2.0),
                    top_p=_number(body, "top_p", 1.0, float, 1e-9, 1.0), top_k=max(top_k, 0),
                    seed=_number(body, "seed", None, int, -(2**63), 2**63 - 1), stop=_stop(body),
                    stop_token_ids=_stop_token_ids(body),
                    ignore_eos=flag(body, "ignore_eos"), logprobs=logprobs,
                    prompt_logprobs=logprobs if echo else None, response_format=response_format,
                    json_schema=json_schema,
                    presence_penalty=_number(body, "presence_penalty", 0.0, float, -2.0, 2.0),
                    frequency_penalty=_number(body, "frequency_penalty", 0.0, float, -2.0, 2.0),
                    repetition_penalty=_number(body, "repetition_penalty", 1.0, float, 0.01, 100.0),
                    min_p=_number(body, "min_p", 0.0, float, 0.0, 1.0),
                    min_tokens=_number(body, "min_tokens", 0, int, 0, 2**31 - 1), logit_bias=_logit_bias(body))


def _stream_options(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream or not isinstance(options, dict):
        raise RequestError("'stream_options' needs \"stream\": true and must be an object", param="stream_options")
    return flag(options, "include_usage")


def _request(body: dict, prompts: tuple, max_tokens_field: str, logprobs: int | None,
             echo: bool = False) -> GenerateRequest:
    stream = flag(body, "stream")
    sampling = _sampling(body, max_tokens_field, logprobs, echo)
    if stream and sampling.prompt_logprobs is not None:
        raise RequestError("'echo' with 'logprobs' is answered whole; leave out \"stream\"", param="stream")
    return GenerateRequest(prompts=prompts, sampling=sampling, n=_number(body, "n", 1, int, 1, MAX_CHOICES),
                           stream=stream, include_usage=_stream_options(body, stream), echo=echo,
                           prompt_only=sampling.max_tokens == 0)


def _prompts(prompt) -> tuple[str | tuple[int, ...], ...]:
    """OpenAI's four prompt forms: a string, a list of strings, a token list, a list of token lists."""
    # bool is an int in Python, not a token id
    is_tokens = lambda p: isinstance(p, list) and bool(p) and all(type(t) is int and t >= 0 for t in p)  # noqa: E731
    if isinstance(prompt, str):
        return (prompt,)
    if is_tokens(prompt):
        return (tuple(prompt),)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or is_tokens(p) for p in prompt):
        return tuple(p if isinstance(p, str) else tuple(p) for p in prompt)
    raise RequestError("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                       param="prompt")


def with_defaults(body: dict, defaults: dict) -> dict:
    """The request with its unset sampling fields taken from the checkpoint's defaults (SamplingParams names, from
    generation_config.json), as vLLM's server does; a chat request's answer length is either of its two fields."""
    unset = {name: value for name, value in defaults.items() if body.get(name) is None}
    if unset.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        del unset["max_tokens"]
    return {**body, **unset}


def parse_completion(body: dict, defaults: dict | None = None) -> GenerateRequest:
    check_fields(body, "/v1/completions", COMPLETION_FIELDS)
    body = with_defaults(body, defaults or {})
    if "prompt" not in body:
        raise RequestError("'prompt' is required", param="prompt")
    logprobs = _number(body, "logprobs", None, int, 0, MAX_TOP_LOGPROBS)
    echo = flag(body, "echo")
    return _request(body, _prompts(body["prompt"]), "max_tokens", logprobs, echo=echo)


def parse_chat(body: dict, prompt: str, defaults: dict | None = None) -> GenerateRequest:
    """A chat request whose messages were rendered into `prompt`; defaults: as parse_completion's."""
    check_fields(body, "/v1/chat/completions", CHAT_FIELDS)
    body = with_defaults(body, defaults or {})
    field_name = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    top = _number(body, "top_logprobs", None, int, 0, MAX_TOP_LOGPROBS)
    if top is not None and not flag(body, "logprobs"):
        raise RequestError("'top_logprobs' needs \"logprobs\": true", param="top_logprobs")
    return _request(body, (prompt,), field_name, (top or 0) if flag(body, "logprobs") else None)
