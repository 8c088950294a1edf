"""Grouped-query attention over the paged K/V cache (cache_layout.py), the spec of the kernels.

Query head h reads KV head h // (Hq / Hkv). Scores are q . k * sm_scale; a token at position p sees the positions
0..p of its sequence, all read from the cache (the step's own K/V are written before attention). Math in fp32,
o in q's dtype; a token that sees nothing gets o = 0.

* gqa_prefill_paged: q [T, Hq, D], sequences of the step by cu_seqlens [N+1], positions [T] -> o [T, Hq, D].
* gqa_decode_paged: q [B, L, Hq, D] (L = 1 + drafts, causal among them by position), positions [B, L] ->
  o [B, L, Hq, D].
"""

from __future__ import annotations

import torch

from dayzero.plugins.gqa.cache_layout import gather_kv
from dayzero.plugins.paged_cache.reference import sequence_bounds


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """q [T, Hq, D], k / v [S, Hkv, D], valid [T, S] bool -> o [T, Hq, D] fp32 (0 where nothing is valid)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->ths", q.float(), k) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("ths,shd->thd", probs, v)


def gqa_prefill_paged(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                      positions: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """Causal attention of each new token over the positions 0..positions[t] of its sequence."""
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        if end == start:
            continue
        pos = positions[start:end].long()
        keys = torch.arange(int(pos.max()) + 1, device=q.device)
        k, v = gather_kv(kv_cache, block_table[n], keys)
        o[start:end] = attend(q[start:end], k, v, keys[None, :] <= pos[:, None], sm_scale)
    return o.to(q.dtype)


def gqa_decode_paged(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                     sm_scale: float) -> torch.Tensor:
    """q [B, L, Hq, D]: row b's tokens over the positions 0..positions[b, l] of sequence b."""
    batch, width = q.shape[:2]
    cu_seqlens = torch.arange(batch + 1, device=q.device) * width
    o = gqa_prefill_paged(q.flatten(0, 1), kv_cache, block_table, cu_seqlens, positions.flatten(), sm_scale)
    return o.view(q.shape)
