"""The random rows of a step, all at once: temperature, the support (top-k, min-p, then top-p over what they keep:
the sets of the per-row reference, sampling.token_probs), then one token a row, found where the row's cumulative
distribution, in vocabulary order, passes the row's seeded uniform. Vocabulary order keeps the draw free of how a sort
orders ties; the support is a floor on the logit, so tied tokens are kept or dropped together."""

from __future__ import annotations

import torch

from dayzero.runtime.row_plan import RandomRows

# top-p looks at this many most likely tokens first and sorts a whole row only where they do not reach top_p: a full
# sort of 64 rows of 163,840 logits takes ~0.75 s on a CPU; GPUs sort them in about a millisecond, and the check
# would cost them a device sync
TOP_P_CANDIDATES = {"cpu": 1024}


def draw_tokens(logits: torch.Tensor, rows: RandomRows, uniform: torch.Tensor) -> torch.Tensor:
    """logits float32 [n, vocab], uniform float64 [n] -> int64 [n]: each row's token."""
    x = scaled(logits, rows.temperature)
    weights = x.exp()
    return inverse_cdf(weights.masked_fill_(x < support_floor(x, rows, weights)[:, None], 0.0), uniform)


def scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    # shifted so that the largest is 0 first: a tiny temperature then sends the others to -inf, never to +inf (inf -
    # inf is NaN)
    return (logits - logits.max(-1, keepdim=True).values) / temperature[:, None]


def support_floor(x: torch.Tensor, rows: RandomRows, weights: torch.Tensor | None = None) -> torch.Tensor:
    """x [n, vocab] (largest 0), weights: exp(x) where known -> [n]: the smallest logit each row keeps."""
    floor = rows.log_min_p
    if rows.max_top_k:
        kth = x.topk(rows.max_top_k, -1).values.gather(1, (rows.top_k - 1).clamp_min(0)[:, None])[:, 0]
        floor = torch.maximum(floor, torch.where(rows.top_k > 0, kth, float("-inf")))
    if rows.any_top_p:
        weights = x.exp() if weights is None else weights
        if rows.max_top_k or rows.any_min_p:
            below = x < floor[:, None]
            x, weights = x.masked_fill(below, float("-inf")), weights.masked_fill(below, 0.0)
        candidates = TOP_P_CANDIDATES.get(x.device.type, x.shape[1])
        floor = torch.maximum(floor, top_p_floor(x, weights.sum(-1, keepdim=True), rows.top_p, candidates))
    return floor


def top_p_floor(x: torch.Tensor, total: torch.Tensor, top_p: torch.Tensor, candidates: int) -> torch.Tensor:
    """x [n, vocab], total [n, 1]: the sum of exp(x) -> the smallest logit of each row's top-p set: its most likely
    tokens, as many as it takes for their probability to reach top_p (the first always kept; -inf for top_p 1).
    Looks among `candidates` tokens, and sorts the rows where they fall short."""
    vocab = x.shape[1]
    if candidates >= vocab:
        ranked = x.sort(-1, descending=True).values
        probs = ranked.softmax(-1)
    else:
        ranked = x.topk(candidates, -1).values
        probs = ranked.exp() / total
    drop = probs.cumsum(-1) - probs >= top_p[:, None]
    floor = ranked.gather(1, ((~drop).sum(-1, keepdim=True) - 1))[:, 0]
    floor = torch.where(top_p < 1, floor, float("-inf"))
    if candidates < vocab:
        # past the candidates only -inf is left, or the set ended inside them
        short = ~(drop[:, -1] | (ranked[:, -1] == float("-inf"))) & (top_p < 1)
        if short.any():
            rows = short.nonzero()[:, 0]
            floor[rows] = top_p_floor(x[rows], total[rows], top_p[rows], vocab)
    return floor


def inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """weights [n, vocab] (exp of the logits, 0 outside the support) -> the first token whose cumulative weight (in
    float64) passes uniform x the total: a draw from the normalized weights."""
    cumulative = weights.cumsum(-1, dtype=torch.float64)
    target = uniform * cumulative[:, -1]
    return torch.searchsorted(cumulative, target[:, None], right=True)[:, 0]
