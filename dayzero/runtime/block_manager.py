"""Pages of the latent KV and index caches (64 tokens each), one page table per sequence.

Page 0 is the dummy: padded rows of a batch point at it, and it is never given to a sequence.
"""

from __future__ import annotations

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
        self.owner: dict[int, str] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_pages)

    @property
    def capacity_tokens(self) -> int:
        return (self.num_pages - 1) * self.page_size

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def missing_pages(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, self.pages_for(num_tokens) - len(seq.pages))

    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.missing_pages(seq, num_tokens) <= self.num_free

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Give `seq` pages for its first `num_tokens` tokens (the caller checked can_grow)."""
        missing = self.missing_pages(seq, num_tokens)
        if missing > self.num_free:
            raise DayzeroError(f"{seq.request_id}: needs {missing} more cache pages, {self.num_free} are free")
        for _ in range(missing):
            page = self.free_pages.pop()
            self.owner[page] = seq.request_id
            seq.pages.append(page)

    def free(self, seq: Sequence) -> None:
        for page in seq.pages:
            del self.owner[page]
            self.free_pages.append(page)
        seq.pages = []
