"""OpenAI's logit adjustments: each token's logit plus its logit_bias, less frequency_penalty x (times it was
generated so far) and presence_penalty x (whether it was); vLLM's repetition_penalty (a token seen in the prompt or
the answer: its logit divided by the penalty where positive, multiplied where negative, as in HF transformers) and
min_tokens (no end-of-sequence or stop token id before that many). Applied to the logits a token is drawn from,
before sampling or speculative acceptance; log probabilities stay those of the model. `penalized` is the per-row
reference; the sampler applies the same arithmetic to a whole step's rows (logit_adjustments.py)."""

from __future__ import annotations

import torch

from dayzero.runtime.sampling import SamplingParams


def adjusts_logits(params: SamplingParams) -> bool:
    return bool(params.presence_penalty or params.frequency_penalty or params.logit_bias or params.min_tokens
                or params.repetition_penalty != 1)


def penalized(rows: torch.Tensor, prompt: list[int], generated: list[int], drafts: list[int], params: SamplingParams,
              stop_ids: frozenset[int] = frozenset()) -> torch.Tensor:
    """rows [n, vocab]: row i picks the token after `generated` + drafts[:i] -> the rows with the bias and penalties
    applied (the rows themselves when the request has none); stop_ids: the engine's end-of-sequence ids."""
    if not adjusts_logits(params):
        return rows
    num_rows, vocab = rows.shape
    counts = _counts(generated, drafts, num_rows, vocab)
    bias = torch.zeros(vocab)
    for token, value in params.logit_bias:
        bias[token] = value
    counts, bias = counts.to(rows.device), bias.to(rows.device)
    rows = rows.float() + bias - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).float()
    if params.repetition_penalty != 1:
        seen = (counts > 0) | _seen_in(prompt, vocab).to(rows.device)
        penalty = params.repetition_penalty
        rows = torch.where(seen, torch.where(rows > 0, rows / penalty, rows * penalty), rows)
    return _before_min_tokens(rows, len(generated), params, stop_ids)


def _counts(generated: list[int], drafts: list[int], num_rows: int, vocab: int) -> torch.Tensor:
    """[num_rows, vocab]: how often each token was generated before each row (a draft counts for the rows after
    it)."""
    counts = torch.bincount(torch.tensor(generated, dtype=torch.long), minlength=vocab).float()
    counts = counts.expand(num_rows, vocab).clone()
    for i, draft in enumerate(drafts[: num_rows - 1]):
        counts[i + 1:, draft] += 1
    return counts


def _seen_in(prompt: list[int], vocab: int) -> torch.Tensor:
    seen = torch.zeros(vocab, dtype=torch.bool)
    seen[torch.tensor(prompt, dtype=torch.long)] = True
    return seen


def _before_min_tokens(rows: torch.Tensor, num_generated: int, params: SamplingParams,
                       stop_ids: frozenset[int]) -> torch.Tensor:
    """Row i picks the answer's token num_generated + i: before min_tokens no stop id may be it."""
    early = max(0, min(rows.shape[0], params.min_tokens - num_generated))
    ids = sorted(set(params.stop_token_ids) | (set() if params.ignore_eos else set(stop_ids)))
    if not early or not ids:
        return rows
    rows = rows.clone()
    rows[:early, ids] = float("-inf")
    return rows
