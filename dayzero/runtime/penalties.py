"""OpenAI's logit adjustments: each token's logit plus its logit_bias, less frequency_penalty x (times it was
generated so far) and presence_penalty x (whether it was). Applied to the logits a token is drawn from, before
sampling or speculative acceptance; log probabilities stay those of the model."""

from __future__ import annotations

import torch

from dayzero.runtime.sampling import SamplingParams


def adjusts_logits(params: SamplingParams) -> bool:
    return bool(params.presence_penalty or params.frequency_penalty or params.logit_bias)


def penalized(rows: torch.Tensor, generated: list[int], drafts: list[int], params: SamplingParams) -> torch.Tensor:
    """rows [n, vocab]: row i picks the token after `generated` + drafts[:i] -> the rows with the bias and penalties
    applied (the rows themselves when the request has none)."""
    if not adjusts_logits(params):
        return rows
    num_rows, vocab = rows.shape
    tokens = torch.tensor(generated, dtype=torch.long)
    counts = torch.bincount(tokens, minlength=vocab).float().expand(num_rows, vocab).clone()
    for i, draft in enumerate(drafts[: num_rows - 1]):
        # a draft counts for the rows after it
        counts[i + 1:, draft] += 1
    bias = torch.zeros(vocab)
    for token, value in params.logit_bias:
        bias[token] = value
    counts, bias = counts.to(rows.device), bias.to(rows.device)
    return rows.float() + bias - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).float()
