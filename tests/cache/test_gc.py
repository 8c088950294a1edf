"""gc: dead builds, bad entries, stale locks; old and excess entries least recently used first; nothing a live
lock holder owns."""

from __future__ import annotations

import os
import time

from dayzero.cache import CompilationCache
from tests.cache.builders import writer

KEYS = [c * 64 for c in "abc"]


def _cache_of_three(tmp_path) -> CompilationCache:
    cache = CompilationCache(tmp_path)
    for key in KEYS:
        cache.get_or_build(key, writer(b"x" * 1000), {})
    return cache


def _age(cache: CompilationCache, key: str, days: float) -> None:
    then = time.time() - days * 86400
    os.utime(cache.root / key / "last_used", (then, then))


def test_gc_removes_dead_tmp_dirs_but_not_a_live_builders(tmp_path):
    cache = _cache_of_three(tmp_path)
    dead, live = cache.tmp_root / f"{'d' * 64}.999999.abcd", cache.tmp_root / f"{'f' * 64}.1.abcd"
    for path in (dead, live):
        path.mkdir()
        (path / "rank0.pt2").write_bytes(b"half")
    with cache.lock("f" * 64):
        removed = cache.gc()
    assert [r.path for r in removed if "died" in r.reason] == [dead] and removed[0].num_bytes == 4
    assert not dead.exists() and live.exists() and cache.keys() == KEYS


def test_gc_dry_run_lists_then_gc_removes_bad_and_old(tmp_path):
    cache = _cache_of_three(tmp_path)
    cache.get(KEYS[0]).file("rank0.pt2").write_bytes(b"short")
    _age(cache, KEYS[1], 10)
    _age(cache, KEYS[2], 1)
    planned = cache.gc(older_than_days=5, dry_run=True)
    entries = {r.path.name: r.reason for r in planned if r.path.parent == tmp_path}
    assert set(entries) == {KEYS[0], KEYS[1]} and entries[KEYS[0]].startswith("bad entry")
    assert cache.keys() == KEYS
    cache.gc(older_than_days=5)
    assert cache.keys() == [KEYS[2]]


def test_gc_fits_a_size_limit_least_recently_used_first(tmp_path):
    cache = _cache_of_three(tmp_path)
    for days, key in zip([3, 1, 2], KEYS, strict=True):
        _age(cache, key, days)
    entry_bytes = sum(f.stat().st_size for f in (tmp_path / KEYS[0]).rglob("*") if f.is_file())
    removed = cache.gc(max_bytes=2 * entry_bytes)
    assert [r.path.name for r in removed if r.reason == "over the size limit"] == [KEYS[0]]
    assert cache.keys() == KEYS[1:]
    cache.gc(max_bytes=0)
    assert cache.keys() == []


def test_gc_skips_entries_whose_lock_is_held(tmp_path):
    cache = _cache_of_three(tmp_path)
    with cache.lock(KEYS[0]):
        cache.gc(max_bytes=0)
    assert cache.keys() == [KEYS[0]]


def test_gc_removes_unheld_lock_files_and_locks_still_work_after(tmp_path):
    cache = _cache_of_three(tmp_path)
    assert sorted(p.stem for p in cache.lock_root.iterdir()) == KEYS
    held = cache.lock(KEYS[1])
    held.acquire()
    stale = [r.path.stem for r in cache.gc() if r.reason == "stale lock file"]
    assert sorted(stale) == [KEYS[0], KEYS[2]] and [p.stem for p in cache.lock_root.iterdir()] == [KEYS[1]]
    assert not cache.lock(KEYS[1]).try_acquire()
    held.release()
    assert cache.remove(KEYS[1]) and cache.keys() == [KEYS[0], KEYS[2]]


def _tree(root) -> dict:
    """Every path under root with its size and mtime (a directory's mtime changes when a name in it does)."""
    return {path: (path.stat().st_size, path.stat().st_mtime_ns) for path in [root, *root.rglob("*")]}


def test_gc_dry_run_writes_nothing_and_lists_each_item_once_as_the_run_removes_it(tmp_path):
    cache = _cache_of_three(tmp_path)
    # an entry both bad and old, entries without lock files (a copied cache), a dead build, a lock file nobody holds
    cache.get(KEYS[0]).file("rank0.pt2").write_bytes(b"short")
    for key in KEYS[:2]:
        _age(cache, key, 10)
        (cache.lock_root / f"{key}.lock").unlink()
    dead = cache.tmp_root / f"{'d' * 64}.999999.abcd"
    dead.mkdir(parents=True)
    before = _tree(tmp_path)
    planned = cache.gc(older_than_days=5, max_bytes=0, dry_run=True)
    assert _tree(tmp_path) == before
    paths = [r.path for r in planned]
    assert len(paths) == len(set(paths))
    assert {p.name: r.reason.split(":")[0] for p, r in zip(paths, planned) if p.parent == tmp_path} == {
        KEYS[0]: "bad entry", KEYS[1]: "not used for 5 days", KEYS[2]: "over the size limit"}
    assert [p.name for p in paths if p.parent == cache.lock_root] == [f"{KEYS[2]}.lock"]
    assert cache.gc(older_than_days=5, max_bytes=0) == planned
    assert cache.keys() == [] and not dead.exists() and list(cache.lock_root.iterdir()) == []


def test_gc_dry_run_leaves_what_a_live_holder_locks(tmp_path):
    cache = _cache_of_three(tmp_path)
    with cache.lock(KEYS[0]):
        planned = cache.gc(max_bytes=0, dry_run=True)
    assert sorted(r.path.name for r in planned if r.path.parent == tmp_path) == KEYS[1:]
    assert f"{KEYS[0]}.lock" not in [r.path.name for r in planned]
