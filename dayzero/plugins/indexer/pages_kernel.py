"""Block-table lookups of the indexer's key loops: which page holds each key of a tile.

A key loop that loads its tile's pages from the block table puts a load in the address of the key loads, and
Triton 3.6's software pipeline then waits for every copy before each tile (its `async_wait` count drops to 0: no
key tile is in flight while one is scored; seen in the sm_90 TTGIR). The decode loops therefore read a
block's pages once (block_pages) and find each tile's in registers (tile_pages).
"""

from __future__ import annotations

import triton
import triton.language as tl


def block_page_count(block_keys: int, page: int, tile_keys: int) -> int:
    """Entries of a block's page vector (block_pages): the pages a block of up to block_keys keys spans when it starts
    at a multiple of tile_keys (a power of two)."""
    pages = -(-block_keys // page) + (0 if tile_keys % page == 0 else 1)
    return triton.next_power_of_2(pages)


@triton.jit
def block_pages(table_row, block, end, PAGE: tl.constexpr, NPB: tl.constexpr):
    """The block-table entries of keys [block, end) from block's page on -> int32 [NPB] (0 past end)."""
    j = tl.arange(0, NPB) + block // PAGE
    return tl.load(table_row + j, mask=j * PAGE < end, other=0)


@triton.jit
def tile_pages(pages, block, start, PAGE: tl.constexpr, BS: tl.constexpr):
    """The pages of keys [start, start + BS) -> int64 [BS], from block_pages of the block from `block` (tiles start at
    multiples of BS: a tile spans BS / PAGE whole pages, or lies in one). Sums over a vector that every warp holds
    whole: no barrier."""
    NP: tl.constexpr = (BS + PAGE - 1) // PAGE
    j = tl.arange(0, pages.shape[0])
    first = start // PAGE - block // PAGE
    key_page = (start + tl.arange(0, BS)) // PAGE - start // PAGE
    page = tl.zeros([BS], tl.int32)
    for p in tl.static_range(NP):
        page = tl.where(key_page == p, tl.sum(tl.where(j == first + p, pages, 0)), page)
    return page.to(tl.int64)


@triton.jit
def key_pages(table_row, s, ok, PAGE: tl.constexpr):
    """The pages of keys s [BS] read from the block-table row -> int64 [BS] (0 where not ok): for loops that are not
    software-pipelined (prefill)."""
    return tl.load(table_row + s // PAGE, mask=ok, other=0).to(tl.int64)
