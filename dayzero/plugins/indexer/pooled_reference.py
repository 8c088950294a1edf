"""Pooled index keys (GLM-5.3-Flash's `index_kpool`, docs/models.md): the indexer scores pools of kpool consecutive
tokens of a sequence (pool j holds positions j*kpool .. j*kpool + kpool - 1), one key a pool.

A token's index row is [k (DI) | g (DI)]: its key k = LayerNorm(wk(x)) and its gate logits g = x @ compress_gate^T.
When a pool's last token arrives, per channel d, with the pool's tokens i = 0 .. kpool - 1:
    a_i[d]   = softmax_i(g_i[d] + ape[i, d])                 (ape [kpool, DI], the pool position embedding)
    key[d]   = sum_i a_i[d] * k_i[d]
and the key is stored in the pooled index cache (paged_cache/formats.py: the page of the pool's last token, row
(position % 64) // kpool). Until then a sequence's last kpool - 1 rows wait in its window, a slot-addressed tensor
`window [S, kpool - 1, 2 * DI]` (oldest first) kept like the short conv's history: prefill starts from and writes
back slot state_slots[n, 0]; decode starts from state_slots[b, num_accepted[b] - 1] and writes the window after
token t into state_slots[b, t] (-1: not written), so rejected drafts are rolled back by the slot rule. A pool
completed by a rejected draft is rewritten when its position is decoded again; readers only see pools that end
at or before their own position.

Selection for a query at position p, with C = (p + 1) // kpool complete pools:
    I[t, j] = sum_h w[t, h] * scale * relu(q[t, h] . key_j)          for j < C
    the top min(topk / kpool, C) pools (ties to the earlier pool), each expanded to its kpool positions, ascending,
    -1 padded to topk; then the unfinished pool's positions C * kpool .. p, -1 padded to kpool - 1.
The row's width is topk + kpool - 1. All math in fp32.
"""

from __future__ import annotations

import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.paged_cache.formats import load_index_rows, pooled_row, pooled_rows_per_page, store_index_rows
from dayzero.plugins.paged_cache.reference import PAGE_SIZE, sequence_bounds
from dayzero.plugins.quant.reference import mxfp8_dequantize


def pool_keys(rows: torch.Tensor, ape: torch.Tensor) -> torch.Tensor:
    """rows [..., kpool, 2 * DI] of whole pools -> their keys [..., DI] (fp32)."""
    keys, gates = rows.float().chunk(2, dim=-1)
    return (torch.softmax(gates + ape.float(), dim=-2) * keys).sum(dim=-2)


def _pool_sequence(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor,
                   slot_mapping: torch.Tensor, positions: torch.Tensor, start_slot: int,
                   out_slots: list[int]) -> None:
    """One sequence's new rows [L, 2 * DI] after the window in `start_slot`; out_slots[t] receives the window after
    token t (-1: none). A token with slot_mapping -1 (padding) writes no pool key."""
    kpool = ape.shape[0]
    history = window[start_slot].float() if start_slot >= 0 else rows.new_zeros(kpool - 1, rows.shape[1]).float()
    for t in range(rows.shape[0]):
        pool = torch.cat([history, rows[t : t + 1].float()])
        slot, position = int(slot_mapping[t]), int(positions[t])
        if slot >= 0 and (position + 1) % kpool == 0:
            row = pooled_row(torch.tensor([slot // PAGE_SIZE]), torch.tensor([position]), kpool)
            store_index_rows(index_cache, pool_keys(pool, ape)[None], row.to(index_cache.device),
                             pooled_rows_per_page(kpool))
        history = pool[1:]
        if out_slots[t] >= 0:
            window[out_slots[t]] = history.to(window.dtype)


def write_pooled_index_keys_prefill(
    index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor,
    slot_mapping: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor, slots: torch.Tensor,
) -> None:
    """Varlen prefill: sequence n is rows[cu_seqlens[n]:cu_seqlens[n+1]] (rows [T, 2 * DI]) after the window in
    slots[n] (-1: a fresh window, not written back); writes the pools its tokens complete and its last window."""
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        slot = int(slots[n])
        out_slots = [-1] * (end - start - 1) + [slot]
        _pool_sequence(index_cache, window, rows[start:end], ape, slot_mapping[start:end], positions[start:end], slot,
                       out_slots)


def write_pooled_index_keys_decode(
    index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor,
    slot_mapping: torch.Tensor, positions: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor,
) -> None:
    """Decode / verify: rows [B, L, 2 * DI], slot_mapping and positions [B, L]; row b starts from the window in
    state_slots[b, num_accepted[b] - 1] and writes the window after token t into state_slots[b, t]. Rows with
    state_slots[b, 0] == -1 are padding."""
    for b in range(rows.shape[0]):
        out_slots = state_slots[b].tolist()
        if out_slots[0] < 0:
            continue
        _pool_sequence(index_cache, window, rows[b], ape, slot_mapping[b], positions[b],
                       out_slots[int(num_accepted[b]) - 1], out_slots)


def pooled_index_topk_paged(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, kpool: int, scale: float | None = None,
    q_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [T, HI, DI] and w [T, HI] of the new tokens over the pooled index cache (already holding the pools they
    complete) -> picks [T, topk + kpool - 1] int32 (logical positions, see the module docstring). An MXFP8 query is
    q e4m3 with q_scales uint8 [T, HI, DI/32]."""
    if q_scales is not None:
        q = mxfp8_dequantize(q, q_scales)
    tokens, dim = q.shape[0], q.shape[-1]
    out = torch.full((tokens, topk + kpool - 1), -1, dtype=torch.int32, device=q.device)
    for n, (start, end) in enumerate(sequence_bounds(cu_seqlens)):
        if end == start:
            continue
        pos = positions[start:end].long()
        complete = (pos + 1) // kpool
        ends = torch.arange(int(complete.max()), device=q.device) * kpool + kpool - 1
        pages = block_table[n].long()[ends // PAGE_SIZE]
        keys = load_index_rows(index_cache, pooled_row(pages, ends, kpool), dim, pooled_rows_per_page(kpool))
        pools = reference.causal_topk(reference.index_scores(q[start:end], keys, w[start:end], scale), complete - 1,
                                      topk // kpool)
        out[start:end] = expand_pools(pools, pos, kpool)
    return out


def expand_pools(pools: torch.Tensor, positions: torch.Tensor, kpool: int) -> torch.Tensor:
    """pools [T, topk / kpool] (pool indices, -1: none) of queries at positions [T] -> picks [T, topk + kpool - 1]
    int32: each pool's kpool positions, then the positions of the query's unfinished pool, -1 padded."""
    members = torch.arange(kpool, device=pools.device)
    picked = torch.where(pools[..., None] >= 0, pools[..., None].long() * kpool + members, -1).flatten(1)
    positions = positions.long()
    tail = ((positions + 1) // kpool * kpool)[:, None] + members[: kpool - 1]
    tail = torch.where(tail <= positions[:, None], tail, -1)
    return torch.cat([picked, tail], dim=1).to(torch.int32)
