"""The compilation cache: content-addressed entries under cache_dir()/engines, built once, loaded verified.

root/<key>/         a finished entry (see entry.py); appears only by an atomic rename of a sealed build
root/tmp/<name>     builds in progress (<key>.<pid>.<rand>) and entries being deleted (... .old)
root/locks/<key>.lock  flock held by whoever builds or removes <key>
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from dayzero.cache.build import fsync_path, seal
from dayzero.cache.entry import LAST_USED, Entry, load_entry
from dayzero.cache.gc import Removal, collect, last_used
from dayzero.cache.key import KEY_PATTERN, canonical_json, check_key
from dayzero.cache.lock import KeyLock
from dayzero.errors import DayzeroError
from dayzero.paths import cache_dir

log = logging.getLogger(__name__)
Build = Callable[[Path], dict]


class CompilationCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir() / "engines"
        self.tmp_root = self.root / "tmp"
        self.lock_root = self.root / "locks"

    def get(self, key: str, deep: bool = False) -> Entry | None:
        """The entry for key if it passes the check, else None (a miss or a bad entry); marks it used.

        deep=False (the default, and what get_or_build uses): sizes always, sha256 only of files whose
        size/mtime/ctime/inode changed since their hash last matched (so in-place edits are caught without
        rehashing GBs on every load); deep=True rehashes every file.
        """
        entry = load_entry(self.root / check_key(key), key, deep=deep)
        if isinstance(entry, str):
            return None
        _touch(entry.path / LAST_USED)
        return entry

    def get_or_build(self, key: str, build: Build, ingredients: dict | None = None) -> Entry:
        """The valid entry for key, building it with build(tmp_dir) -> meta under the key's lock if needed.

        A build that raises leaves no entry and no tmp dir and the exception propagates; a bad old entry is
        replaced only once the new build is sealed.
        """
        ingredients = dict(ingredients or {})
        canonical_json(ingredients)
        if (entry := self.get(key)) is not None:
            return entry
        with self.lock(key):
            if (entry := self.get(key)) is not None:
                return entry
            self._build_into_place(key, build, ingredients)
        entry = self.get(key)
        if entry is None:
            raise DayzeroError(f"cache entry {self.root / key} failed its check right after being built; check the "
                               f"disk, or run `dayzero cache verify`")
        return entry

    def entries(self, deep: bool = False) -> list[tuple[str, Entry | str]]:
        """Every entry directory with its Entry or its problem, sorted by key; does not mark anything used."""
        return [(key, load_entry(self.root / key, key, deep=deep)) for key in self.keys()]

    def verify(self, deep: bool = True) -> list[tuple[str, str]]:
        """(key, problem) for every bad entry; deep=True rehashes every file."""
        return [(key, result) for key, result in self.entries(deep) if isinstance(result, str)]

    def last_used(self, key: str) -> float:
        """Epoch seconds of the last get() of key (its creation if never)."""
        return last_used(self.root / check_key(key))

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if KEY_PATTERN.match(p.name) and p.is_dir())

    def remove(self, key: str) -> bool:
        """Delete the entry for key (waiting for a builder of it to finish); False if there was none."""
        with self.lock(check_key(key)):
            return self.discard(key)

    def discard(self, key: str) -> bool:
        """Delete the entry for key; the caller holds its lock."""
        path = self.root / key
        if not path.exists():
            return False
        aside = self._tmp_name(key, ".old")
        os.rename(path, aside)
        shutil.rmtree(aside)
        return True

    def gc(self, older_than_days: float | None = None, max_bytes: int | None = None,
           dry_run: bool = False) -> list[Removal]:
        """Remove dead builds, bad entries (fast check), stale locks, then entries unused for older_than_days and
        the least recently used until the entries fit max_bytes; see gc.py."""
        return collect(self, older_than_days, max_bytes, dry_run)

    def lock(self, key: str) -> KeyLock:
        return KeyLock(self.lock_root / f"{key}.lock")

    def _build_into_place(self, key: str, build: Build, ingredients: dict) -> None:
        build_dir = self._tmp_name(key)
        build_dir.mkdir()
        log.info("building cache entry %s in %s", key[:12], build_dir)
        try:
            meta = build(build_dir)
            seal(build_dir, key, ingredients, {} if meta is None else meta)
        except BaseException:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise
        self.discard(key)
        os.rename(build_dir, self.root / key)
        fsync_path(self.root)

    def _tmp_name(self, key: str, suffix: str = "") -> Path:
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        return self.tmp_root / f"{key}.{os.getpid()}.{os.urandom(4).hex()}{suffix}"


def _touch(path: Path) -> None:
    """Record use by mtime only (never rewrite the manifest); a read-only cache just loses the record."""
    try:
        path.touch()
    except OSError:
        pass
