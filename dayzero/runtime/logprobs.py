"""Log probabilities of emitted tokens, for requests that ask for them: the model's own distribution (log-softmax of
the raw logits, before temperature / top-k / top-p), the chosen token's and the `num_top` most likely ones'."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float | None  # None: a prompt's first token, which nothing predicts
    top: tuple[tuple[int, float], ...] | None  # (token, logprob), most likely first


def token_logprob(logits: torch.Tensor, token: int, num_top: int) -> TokenLogprob:
    """logits [vocab] -> the log-probability of `token` and of the num_top most likely tokens."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    top = torch.topk(logprobs, num_top) if num_top else None
    pairs = () if top is None else tuple(zip(top.indices.tolist(), top.values.tolist()))
    return TokenLogprob(token, float(logprobs[token]), pairs)
