"""Log-probabilities of given next tokens over a prefill's rows (a prompt's own tokens, for OpenAI's echo with
logprobs): the LM head a bounded block of rows at a time, never the [T, vocab] logits of a long prompt at once."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import ScoredRows

# rows through the LM head at once: [512, 163840] fp32 log-probabilities are 320 MiB
ROWS_AT_ONCE = 512


def score_rows(lm_head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, num_top: int) -> ScoredRows:
    """hidden [T, D] of a step's tokens, targets [T] (the token that follows each one; -1: none to score) ->
    the scored rows' log-probabilities (log-softmax of the raw logits) and their num_top most likely tokens."""
    rows = (targets >= 0).nonzero().flatten()
    parts = []
    for start in range(0, len(rows), ROWS_AT_ONCE):
        block = rows[start:start + ROWS_AT_ONCE]
        logprobs = torch.log_softmax(lm_head(hidden[block]).float(), dim=-1)
        top = logprobs.topk(num_top, dim=-1)
        parts.append((logprobs.gather(1, targets[block, None]).squeeze(1), top.indices, top.values))
    if not parts:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return ScoredRows(rows, empty, rows.new_zeros((0, num_top)), empty.new_zeros((0, num_top)))
    logprobs, top_ids, top_logprobs = (torch.cat(p) for p in zip(*parts))
    return ScoredRows(rows, logprobs, top_ids, top_logprobs)
