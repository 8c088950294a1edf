"""A grammar's steps kept as they are computed: a search of the vocabulary's trie takes the same steps from the same
places again and again (a pattern's automaton, a checked string's character, a bounded number's digits)."""

from __future__ import annotations

from collections.abc import Callable

# entries a store holds before it is emptied and refilled by the steps taken after
MAX_KEPT_STEPS = 1 << 16


class KeptSteps(dict):
    """key (a tuple) -> compute(*key), computed on first use; a kept step costs one dictionary lookup."""

    def __init__(self, compute: Callable):
        super().__init__()
        self._compute = compute

    def __missing__(self, key: tuple):
        if len(self) >= MAX_KEPT_STEPS:
            self.clear()
        value = self[key] = self._compute(*key)
        return value
