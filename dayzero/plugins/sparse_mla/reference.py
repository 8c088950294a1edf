"""Absorbed MLA attention over latent rows [c_kv (512) | k_pe (64)] (docs/models.md).

The query arrives absorbed: q [T, H, 576] = [q_nope W_UK | q_pe]. Scores are q . row * sm_scale, values are the
first `v_dim` (512) columns of the same rows; W_UV is applied by the caller. Returns (o [T, H, v_dim] in q's
dtype, lse [T, H] fp32 natural-log-sum-exp of the scaled scores; -inf and o = 0 where nothing is visible).
The latent cache is plain [P, 64, 576] or FP8 records uint8 [P, 64, 656] (paged_cache/formats.py), dequantized on
read; the rope width is q's width minus v_dim.
"""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache.formats import gather_latent
from dayzero.plugins.paged_cache.reference import sequence_bounds


def latent_attention(
    q: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor, sm_scale: float, v_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], rows [S, D], valid [T, S] bool -> (o [T, H, v_dim] fp32, lse [T, H])."""
    scores = torch.einsum("thd,sd->ths", q.float(), rows.float()) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].clamp_min(-1e30)).nan_to_num(0.0)
    return torch.einsum("ths,sd->thd", probs, rows[:, :v_dim].float()), lse


def sparse_mla_paged(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    indices: torch.Tensor, sm_scale: float, v_dim: int = 512,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attend each token t to the logical positions `indices[t]` (-1 skipped) of its sequence's rows."""
    o = q.new_zeros(*q.shape[:2], v_dim, dtype=torch.float32)
    lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        for t in range(start, end):
            picked = indices[t][indices[t] >= 0].long()
            rows = gather_latent(latent_cache, block_table[n], picked, q.shape[-1] - v_dim)
            valid = torch.ones(1, picked.numel(), dtype=torch.bool, device=q.device)
            o[t : t + 1], lse[t : t + 1] = latent_attention(q[t : t + 1], rows, valid, sm_scale, v_dim)
    return o.to(q.dtype), lse


def dense_mla_paged(
    q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, sm_scale: float, v_dim: int = 512,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of each token over every earlier row of its sequence (MLA without an indexer)."""
    o = q.new_zeros(*q.shape[:2], v_dim, dtype=torch.float32)
    lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        if end == start:
            continue
        pos = positions[start:end].long()
        keys = torch.arange(int(pos.max()) + 1, device=q.device)
        rows = gather_latent(latent_cache, block_table[n], keys, q.shape[-1] - v_dim)
        valid = keys[None, :] <= pos[:, None]
        o[start:end], lse[start:end] = latent_attention(q[start:end], rows, valid, sm_scale, v_dim)
    return o.to(q.dtype), lse
