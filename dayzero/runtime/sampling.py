"""Sampling parameters per request, and the distribution one row's random draw follows (token_probs: the per-row
reference of the batched sampler, batch_sampler.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dayzero.errors import DayzeroError
from dayzero.runtime.logprobs import MAX_TOP_LOGPROBS
from dayzero.structured.tool_call_grammar import ToolCallRules

GREEDY_TEMPERATURE = 1e-5
RESPONSE_FORMATS = (None, "json_object", "json_schema")


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0 (or vLLM's -1): all tokens
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()  # stop strings (checked on the decoded text)
    ignore_eos: bool = False
    logprobs: int | None = None  # None: no log probabilities; n: the chosen token's and the n most likely ones'
    prompt_logprobs: int | None = None  # the same for the prompt's tokens (prompt_logprobs.py)
    presence_penalty: float = 0.0  # penalties.py
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # vLLM's: a seen token's logit divided by it (multiplied when negative)
    min_p: float = 0.0  # vLLM's: tokens below min_p x the most likely one's probability are dropped
    min_tokens: int = 0  # vLLM's: no end-of-sequence or stop token id before this many tokens
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token, added to its logit)
    # "json_object": the answer is one JSON object; "json_schema": one that follows json_schema (a JSON text)
    response_format: str | None = None
    json_schema: str | None = None
    # a thinking model's reasoning markers (begin, end token ids): a JSON answer starts after its reasoning;
    # reasoning_opened: the prompt already opened it
    reasoning_tokens: tuple[int, int] | None = None
    reasoning_opened: bool = False
    # tool calls held to the offered functions (tool_call_grammar.py), under tool_choice "auto" / "required"
    tool_calls: ToolCallRules | None = None
    # vLLM's: answers to a prompt. The engine runs one sequence a request; its callers submit n of them (LLM.generate,
    # the server's `n`), with seed + i for answer i where a seed is set
    n: int = 1

    def __post_init__(self):
        if self.max_tokens < 1 or self.n < 1:
            raise DayzeroError(f"max_tokens and n must be >= 1, got {self.max_tokens} and {self.n}")
        if self.top_k == -1:
            object.__setattr__(self, "top_k", 0)
        if not (-2 <= self.presence_penalty <= 2 and -2 <= self.frequency_penalty <= 2):
            raise DayzeroError("presence_penalty and frequency_penalty must be in [-2, 2]")
        object.__setattr__(self, "logit_bias", tuple((int(t), float(b)) for t, b in dict(self.logit_bias).items()))
        if any(t < 0 or not -100 <= b <= 100 for t, b in self.logit_bias):
            raise DayzeroError("logit_bias takes token ids >= 0 and biases in [-100, 100]")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
                raise DayzeroError(f"{name} must be in [0, {MAX_TOP_LOGPROBS}], got {value}")
        if self.response_format not in RESPONSE_FORMATS:
            raise DayzeroError(f"response_format must be one of {RESPONSE_FORMATS}, got {self.response_format!r}")
        if (self.response_format == "json_schema") != (self.json_schema is not None):
            raise DayzeroError("json_schema goes with response_format \"json_schema\", and only with it")
        if self.tool_calls is not None and self.response_format is not None:
            raise DayzeroError("an answer is held to its tool calls or to a response_format, not both")
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise DayzeroError("need temperature >= 0, top_k >= 0 and 0 < top_p <= 1")
        if not (self.repetition_penalty > 0 and 0 <= self.min_p <= 1 and 0 <= self.min_tokens <= self.max_tokens):
            raise DayzeroError("need repetition_penalty > 0, 0 <= min_p <= 1 and 0 <= min_tokens <= max_tokens")
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))

    @property
    def method(self) -> str:
        # below GREEDY_TEMPERATURE the distribution is the argmax to within fp32 (1e-300 would even round to 0)
        return "greedy" if self.temperature < GREEDY_TEMPERATURE else "random"


def filtered_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [vocab] -> the row scaled by the temperature, -inf outside its top-k, min-p and top-p support."""
    logits = logits.float()
    # shifted so that the largest is 0 first: a tiny temperature then sends the others to -inf, never to +inf (inf -
    # inf is NaN in the softmax, and one such request would fail the whole batch's step)
    logits = (logits - logits.max()) / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.min_p > 0:
        # the largest logit is 0 here: a token's probability over the most likely one's is exp(its logit)
        logits = logits.masked_fill(logits < math.log(params.min_p), float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = logits.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # keep the smallest prefix whose probability reaches top_p (the first token always stays)
        drop = cumulative - sorted_logits.softmax(-1) >= params.top_p
        logits = logits.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits


def token_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a random row draws from (temperature, top-k, min-p, top-p applied), on the CPU."""
    return filtered_logits(logits, params).softmax(-1).cpu()
