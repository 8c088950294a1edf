"""The compilation cache of built engines."""

from dayzero.cache.store import CompilationCache, CorruptEntry, Entry, cache_key

__all__ = ["CompilationCache", "CorruptEntry", "Entry", "cache_key"]
