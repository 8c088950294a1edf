"""DSA lightning indexer (docs/models.md): relevance scores and causal Top-K selection.

    I[t, s] = sum_h w[t, h] * scale * relu(q[t, h] . k[s])      (scale defaults to DI^-1/2), s <= pos(t)
    indices[t] = Top-K of I[t, :] with K = min(topk, pos(t) + 1); the rest of the row is -1.
    Ties go to the earlier position. A row lists its picks in ascending position: the attention that reads them is
    indifferent to their order, the kernels keep their Top-K sets in position order, so none of them pays for a sort
    by score (about 26 us of the decode merge), and the attention gathers rows in address
    order.

`w` already carries the HI^-1/2 factor (the model applies it to weights_proj). Indices are logical token
positions of the query's own sequence. All math in fp32.
"""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache.formats import gather_index_keys
from dayzero.plugins.paged_cache.reference import sequence_bounds
from dayzero.plugins.quant.reference import mxfp8_dequantize


def index_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q [T, HI, DI], k [S, DI], w [T, HI] -> scores [T, S] (fp32, unmasked)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = torch.relu(torch.einsum("thd,sd->ths", q.float(), k.float()))
    return torch.einsum("ths,th->ts", logits, w.float()) * scale


def causal_topk(scores: torch.Tensor, positions: torch.Tensor, topk: int) -> torch.Tensor:
    """scores [T, S], positions [T] -> indices [T, topk] int32 over s <= positions[t], ascending, -1 padded."""
    num_keys = scores.shape[1]
    visible = torch.arange(num_keys, device=scores.device)[None, :] <= positions[:, None]
    masked = scores.masked_fill(~visible, float("-inf"))
    # a stable sort makes ties (frequent: relu zeroes whole scores) go to the earlier position, so the selection
    # does not depend on how many later keys exist; kernels implement the same rule
    values, indices = masked.sort(dim=-1, descending=True, stable=True)
    values, indices = values[:, :topk], indices[:, :topk]
    # ascending position, the invisible (-inf) ones last and then -1
    indices = indices.masked_fill(values == float("-inf"), num_keys).sort(dim=-1).values
    indices = indices.masked_fill(indices == num_keys, -1).to(torch.int32)
    padding = indices.new_full((scores.shape[0], topk - indices.shape[1]), -1)
    return torch.cat([indices, padding], dim=1)


def index_topk(
    q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, topk: int, positions: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Dense form: q [B, T, HI, DI], k [B, S, DI], w [B, T, HI] -> indices [B, T, topk].

    positions [B, T] are the query positions among the S keys (default: the last T, i.e. S - T + t).
    """
    batch, length = q.shape[:2]
    if positions is None:
        positions = torch.arange(k.shape[1] - length, k.shape[1], device=q.device).expand(batch, length)
    rows = [causal_topk(index_scores(q[b], k[b], w[b], scale), positions[b], topk) for b in range(batch)]
    return torch.stack(rows)


def index_topk_paged(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, scale: float | None = None,
    q_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paged form: q [T, HI, DI] and w [T, HI] of the new tokens, keys read from `index_cache` (plain
    [P, 64, DI] or MXFP8 page-major uint8, see paged_cache/formats.py; already holding the new tokens) through
    `block_table [N, max_pages]` -> indices [T, topk].

    A pre-quantized MXFP8 query is q e4m3 [T, HI, DI] with its E8M0 scales q_scales uint8 [T, HI, DI/32]."""
    if q_scales is not None:
        q = mxfp8_dequantize(q, q_scales)
    out = torch.full((q.shape[0], topk), -1, dtype=torch.int32, device=q.device)
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        if end == start:
            continue
        pos = positions[start:end].long()
        keys = gather_index_keys(index_cache, block_table[n], torch.arange(int(pos.max()) + 1, device=q.device),
                                 q.shape[-1])
        out[start:end] = causal_topk(index_scores(q[start:end], keys, w[start:end], scale), pos, topk)
    return out
