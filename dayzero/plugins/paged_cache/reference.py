"""Paged cache addressing shared by the latent-KV and indexer caches.

A cache is `[num_pages, PAGE_SIZE, ...]`; a sequence's logical position p lives in physical page
`block_table[p // PAGE_SIZE]` at offset `p % PAGE_SIZE`. `slot_mapping[t]` is the flat physical row
(page * PAGE_SIZE + offset) a new token is written to; -1 means "do not write" (padding).
"""

from __future__ import annotations

import torch

PAGE_SIZE = 64


def physical_rows(block_table_row: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Flat physical rows of logical `positions` of one sequence."""
    pages = block_table_row.long()[positions // PAGE_SIZE]
    return pages * PAGE_SIZE + positions % PAGE_SIZE


def write_rows(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """cache [P, PAGE_SIZE, *F] <- rows [T, *F] at slot_mapping [T] (in place; -1 skipped)."""
    keep = slot_mapping >= 0
    flat = cache.view(-1, *cache.shape[2:])
    flat[slot_mapping[keep].long()] = rows[keep].to(cache.dtype)


def sequence_bounds(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:]))
