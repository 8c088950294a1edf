"""Log probabilities of emitted tokens, for requests that ask for them: the model's own distribution (log-softmax of
the raw logits, before penalties, temperature, top-k / top-p and grammar masks), the chosen token's and the `num_top`
most likely ones'."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float | None  # None: a prompt's first token, which nothing predicts
    top: tuple[tuple[int, float], ...] | None  # (token, logprob), most likely first


def row_logprobs(logits: torch.Tensor, tokens: torch.Tensor, num_top: int) -> list[torch.Tensor]:
    """logits [n, vocab], tokens [n] -> [the tokens' log-probabilities [n], the num_top most likely tokens [n, num_top]
    and their log-probabilities], on the logits' device."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, tokens[:, None])[:, 0]
    if not num_top:
        return [chosen, tokens.new_zeros(len(tokens), 0), logprobs.new_zeros(len(tokens), 0)]
    top = logprobs.topk(num_top, -1)
    return [chosen, top.indices, top.values]


def entries(tokens: list[int], chosen: list[float], top_ids: list[list[int]], top_logprobs: list[list[float]],
            num_top: list[int]) -> list[TokenLogprob]:
    """row_logprobs' results on the host -> one entry a row, each with its own request's num_top alternatives."""
    return [TokenLogprob(token, logprob, tuple(zip(ids[:k], values[:k])))
            for token, logprob, ids, values, k in zip(tokens, chosen, top_ids, top_logprobs, num_top)]
