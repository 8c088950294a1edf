"""Garbage collection of the compilation cache: leftovers of dead builders, bad entries, old or excess entries."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

from dayzero.cache.store import CompilationCache, Entry


def _builder_alive(tmp_name: str) -> bool:
    """tmp dirs are named <key>.<pid>.<rand>; a discarded entry (<key>.discarded.<rand>) has no builder."""
    parts = tmp_name.split(".")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_is_free(path: Path) -> bool:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def _dead_leftovers(cache: CompilationCache) -> list[Path]:
    tmp = [p for p in (cache.root / "tmp").glob("*") if not _builder_alive(p.name)]
    locks = [p for p in (cache.root / "locks").glob("*.lock")
             if not (cache.root / p.stem).exists() and _lock_is_free(p)]
    return tmp + locks


def _expendable(cache: CompilationCache, good: list[Entry], older_than_days: float | None,
                max_size_bytes: int | None) -> list[str]:
    """Entries unused for longer than the limit, then the least recently used until the rest fits the size."""
    by_use = sorted(good, key=lambda e: cache.last_used(e.key))
    doomed = []
    if older_than_days is not None:
        cutoff = time.time() - older_than_days * 86400
        doomed = [e.key for e in by_use if cache.last_used(e.key) < cutoff]
    if max_size_bytes is not None:
        kept = [e for e in by_use if e.key not in doomed]
        total = sum(e.size for e in kept)
        for entry in kept:
            if total <= max_size_bytes:
                break
            doomed.append(entry.key)
            total -= entry.size
    return doomed


def collect(cache: CompilationCache, dry_run: bool = False, older_than_days: float | None = None,
            max_size_bytes: int | None = None) -> list[str]:
    """Remove what is not needed; -> one line per removed (or, with dry_run, removable) thing."""
    entries = cache.entries(deep=False)
    bad = [key for key, e in entries if isinstance(e, str)]
    good = [e for _, e in entries if isinstance(e, Entry)]
    old = _expendable(cache, good, older_than_days, max_size_bytes)
    leftovers = _dead_leftovers(cache)
    report = [f"bad entry {k[:16]}" for k in bad] + [f"unused entry {k[:16]}" for k in old]
    report += [f"leftover {p.relative_to(cache.root)}" for p in leftovers]
    if not dry_run:
        for key in bad + old:
            cache.remove(key)
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return report
