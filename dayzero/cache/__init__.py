"""The compilation cache: `CompilationCache(root).get_or_build(cache_key(ingredients), build)` -> Entry."""

from __future__ import annotations

from dayzero.cache.entry import Entry
from dayzero.cache.key import cache_key
from dayzero.cache.store import CompilationCache

__all__ = ["CompilationCache", "Entry", "cache_key"]
