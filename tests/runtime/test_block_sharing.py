"""Shared pages (block_manager.py with prefix caching): under any sequence of grows, shares, frees, holds, releases
and evictions, a page is free exactly when nothing holds it, no page is given out twice, and the reclaimable count
is the number of pages only cached prefixes hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence

NUM_PAGES = 12


def _check(blocks: BlockManager, holders: dict[int, int], cached: dict[int, int]) -> None:
    free = set(blocks.free_pages)
    assert len(free) == len(blocks.free_pages), "a page is free twice"
    for page in range(1, NUM_PAGES):
        held = holders.get(page, 0) + cached.get(page, 0)
        assert (page in free) == (held == 0), page
        assert blocks.owner[page] == holders.get(page, 0) and blocks.cached[page] == cached.get(page, 0)
    only_cached = sum(1 for p in range(1, NUM_PAGES) if cached.get(p, 0) and not holders.get(p, 0))
    assert blocks.num_reclaimable == only_cached


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["grow", "share", "free", "hold", "release", "evict"]),
                              st.integers(0, 3), st.integers(1, 4)), max_size=40))
def test_page_holders_stay_exact(ops):
    blocks = BlockManager(NUM_PAGES, page_size=4)
    seqs = [Sequence([1], SamplingParams()) for _ in range(4)]
    prefixes: list[list[int]] = []  # what a prefix cache would hold
    blocks.evict = lambda: bool(prefixes) and (blocks.release(prefixes.pop(0)) or True)
    holders, cached = {}, {}

    def count(table, pages, delta):
        for page in pages:
            table[page] = table.get(page, 0) + delta

    for op, index, size in ops:
        seq = seqs[index]
        if op == "grow" and blocks.can_grow(seq, 4 * (len(seq.pages) + size)):
            before = set(blocks.free_pages)
            evicted = list(prefixes)
            blocks.grow(seq, 4 * (len(seq.pages) + size))
            for pages in evicted[: len(evicted) - len(prefixes)]:
                count(cached, pages, -1)
            new = seq.pages[len(seq.pages) - size:]
            assert set(new) <= before | set(p for pages in evicted for p in pages)
            count(holders, new, 1)
        elif op == "share" and not seq.pages and prefixes:
            pages = prefixes[index % len(prefixes)]
            blocks.share(seq, pages)
            count(holders, pages, 1)
        elif op == "free":
            count(holders, seq.pages, -1)
            blocks.free(seq)
        elif op == "hold" and seq.pages:
            pages = seq.pages[:size]
            blocks.hold(pages)
            prefixes.append(list(pages))
            count(cached, pages, 1)
        elif op == "release" and prefixes:
            pages = prefixes.pop(index % len(prefixes))
            blocks.release(pages)
            count(cached, pages, -1)
        elif op == "evict" and prefixes:
            pages = prefixes[0]
            assert blocks.evict()
            count(cached, pages, -1)
        _check(blocks, {p: n for p, n in holders.items() if n}, {p: n for p, n in cached.items() if n})
