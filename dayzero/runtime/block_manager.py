"""Pages of the latent KV and index caches (64 tokens each), one page table per sequence.

Page 0 is the dummy: padded rows of a batch point at it, and it is never given to a sequence.

With prefix caching (prefix_cache.py) a full page can be held by several sequences and by cached prefixes at once:
it returns to the free list when the last holder lets go. Pages that only cached prefixes hold count as available:
`grow` asks the prefix cache to evict (least recently used first) when the free list runs short.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dayzero.errors import DayzeroError
from dayzero.runtime.sequence import Sequence

DUMMY_PAGE = 0


class BlockManager:
    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 2:
            raise DayzeroError(f"the cache holds {num_pages} pages; it needs at least 2 (one is the dummy): "
                               "give the runtime more memory")
        self.page_size = page_size
        self.num_pages = num_pages
        self.free_pages = list(range(num_pages - 1, DUMMY_PAGE, -1))
        self.owner: Counter[int] = Counter()  # running sequences holding each page
        self.cached: Counter[int] = Counter()  # cached prefixes holding each page
        self.num_reclaimable = 0  # pages only cached prefixes hold
        # evicts the least recently used cached prefix; False when none is left (set by the prefix cache)
        self.evict: Callable[[], bool] = lambda: False

    @property
    def num_free(self) -> int:
        return len(self.free_pages)

    @property
    def num_available(self) -> int:
        """Free pages, and those that evicting every cached prefix would free."""
        return self.num_free + self.num_reclaimable

    @property
    def capacity_tokens(self) -> int:
        return (self.num_pages - 1) * self.page_size

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def missing_pages(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, self.pages_for(num_tokens) - len(seq.pages))

    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.missing_pages(seq, num_tokens) <= self.num_available

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Give `seq` pages for its first `num_tokens` tokens (the caller checked can_grow)."""
        missing = self.missing_pages(seq, num_tokens)
        while missing > self.num_free and self.evict():
            pass
        if missing > self.num_free:
            raise DayzeroError(f"{seq.request_id}: needs {missing} more cache pages, {self.num_free} are free")
        for _ in range(missing):
            page = self.free_pages.pop()
            self._change(page, seq_delta=1)
            seq.pages.append(page)

    def share(self, seq: Sequence, pages: list[int]) -> None:
        """`seq` starts with these cached pages (read only: it writes past them)."""
        for page in pages:
            self._change(page, seq_delta=1)
        seq.pages = list(pages)

    def free(self, seq: Sequence) -> None:
        for page in seq.pages:
            self._change(page, seq_delta=-1)
        seq.pages = []

    def hold(self, pages: list[int]) -> None:
        """A cached prefix keeps these pages."""
        for page in pages:
            self._change(page, cache_delta=1)

    def release(self, pages: list[int]) -> None:
        for page in pages:
            self._change(page, cache_delta=-1)

    def _only_cached(self, page: int) -> bool:
        return self.cached[page] > 0 and self.owner[page] == 0

    def _change(self, page: int, seq_delta: int = 0, cache_delta: int = 0) -> None:
        was = self._only_cached(page)
        for counter, delta in ((self.owner, seq_delta), (self.cached, cache_delta)):
            counter[page] += delta
            if counter[page] <= 0:
                del counter[page]
        self.num_reclaimable += self._only_cached(page) - was
        if page not in self.owner and page not in self.cached:
            self.free_pages.append(page)
