"""Garbage collection: dead builds, bad entries, stale locks, and optionally old or excess entries.

Anything a live process holds the key lock for (a build, a removal) is left alone; entries go least recently
used first (the mtime of their `last_used`, touched by every get()). Each goes once, for its first reason. A dry run
lists what a run would remove and writes nothing: it looks at the locks without taking them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dayzero.cache.entry import LAST_USED, MANIFEST, load_entry
from dayzero.cache.lock import KeyLock

DAY_S = 86400.0


class CompilationCache(Protocol):
    """What collection needs of the cache (store.py's CompilationCache)."""

    root: Path
    tmp_root: Path
    lock_root: Path

    def keys(self) -> list[str]: ...

    def discard(self, key: str) -> bool: ...

    def lock(self, key: str) -> KeyLock: ...


@dataclass(frozen=True)
class Removal:
    path: Path
    reason: str
    num_bytes: int


def collect(cache: CompilationCache, older_than_days: float | None = None, max_bytes: int | None = None,
            dry_run: bool = False) -> list[Removal]:
    """Remove (or with dry_run only list) what the cache no longer needs; returns what went."""
    bad = _bad_entries(cache, dry_run)
    removed = _dead_builds(cache, dry_run) + bad
    keep = [(key, used) for key, used in _ranked_entries(cache) if cache.root / key not in {r.path for r in bad}]
    if older_than_days is not None:
        cutoff = time.time() - older_than_days * DAY_S
        old = [key for key, used in keep if used < cutoff]
        removed += _remove_entries(cache, old, f"not used for {older_than_days:g} days", dry_run)
        keep = [(key, used) for key, used in keep if key not in old]
    if max_bytes is not None:
        removed += _remove_entries(cache, _over_size(cache, keep, max_bytes), "over the size limit", dry_run)
    return removed + _stale_locks(cache, dry_run)


def tree_bytes(path: Path) -> int:
    return sum(os.lstat(Path(d) / f).st_size for d, _, files in os.walk(path) for f in files)


def last_used(path: Path) -> float:
    """When get() last returned this entry; its creation if never."""
    for name in (LAST_USED, MANIFEST):
        try:
            return os.stat(path / name).st_mtime
        except FileNotFoundError:
            continue
    return 0.0


def _dead_builds(cache: CompilationCache, dry_run: bool) -> list[Removal]:
    if not cache.tmp_root.is_dir():
        return []
    removed = []
    for path in sorted(cache.tmp_root.iterdir()):
        with _claimed(cache, path.name.split(".")[0], dry_run) as free:
            if not free:
                continue
            removed.append(Removal(path, "left by a build or removal that died", tree_bytes(path)))
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
    return removed


def _bad_entries(cache: CompilationCache, dry_run: bool) -> list[Removal]:
    removed = []
    for key in cache.keys():
        with _claimed(cache, key, dry_run) as free:
            if not free:
                continue
            problem = load_entry(cache.root / key, key, deep=False, record=not dry_run)
            if isinstance(problem, str):
                removed.append(Removal(cache.root / key, f"bad entry: {problem}", tree_bytes(cache.root / key)))
                if not dry_run:
                    cache.discard(key)
    return removed


def _ranked_entries(cache: CompilationCache) -> list[tuple[str, float]]:
    """(key, last used) of the entries still present, least recently used first."""
    present = [(key, last_used(cache.root / key)) for key in cache.keys()]
    return sorted(present, key=lambda item: item[1])


def _over_size(cache: CompilationCache, ranked: list[tuple[str, float]], max_bytes: int) -> list[str]:
    sizes = {key: tree_bytes(cache.root / key) for key, _ in ranked}
    total, victims = sum(sizes.values()), []
    for key, _ in ranked:
        if total <= max_bytes:
            break
        victims.append(key)
        total -= sizes[key]
    return victims


def _remove_entries(cache: CompilationCache, keys: list[str], reason: str, dry_run: bool) -> list[Removal]:
    removed = []
    for key in keys:
        with _claimed(cache, key, dry_run) as free:
            if not free:
                continue
            removed.append(Removal(cache.root / key, reason, tree_bytes(cache.root / key)))
            if not dry_run:
                cache.discard(key)
    return removed


def _stale_locks(cache: CompilationCache, dry_run: bool) -> list[Removal]:
    """Lock files nobody holds; unlinked while held so a waiter on the old inode notices (see KeyLock)."""
    if not cache.lock_root.is_dir():
        return []
    removed = []
    for path in sorted(cache.lock_root.glob("*.lock")):
        lock = cache.lock(path.stem)
        if dry_run:
            if not lock.is_held():
                removed.append(Removal(path, "stale lock file", 0))
            continue
        if lock.try_acquire():
            removed.append(Removal(path, "stale lock file", 0))
            lock.release_and_unlink()
    return removed


@contextlib.contextmanager
def _claimed(cache: CompilationCache, key: str, dry_run: bool) -> Iterator[bool]:
    """Whether nobody else holds `key`'s lock. A run holds it through the block, and removes a lock file it had to
    create for that (there was none to list as stale); a dry run only looks."""
    lock = cache.lock(key)
    if dry_run:
        yield not lock.is_held()
        return
    existed = lock.path.exists()
    if not lock.try_acquire():
        yield False
        return
    try:
        yield True
    finally:
        if existed:
            lock.release()
        else:
            lock.release_and_unlink()
