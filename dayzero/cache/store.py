"""The compilation cache: content-addressed entries of built engines (ARCHITECTURE.md, "Compilation cache").

An entry is a directory `<root>/<key>/` holding the engine files and `manifest.json` (key, ingredients, metadata,
and the size + sha256 of every file). Builds write into `<root>/tmp/` and are renamed into place, under an
exclusive lock per key (flock: released by the kernel when a builder dies), so a reader never sees a partial entry
and two builders of one key build once. An entry whose files do not match its manifest is never returned: the next
`get_or_build` moves it aside and rebuilds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.paths import cache_dir

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LAST_USED = ".last_used"


def cache_key(ingredients: dict) -> str:
    """sha256 of the canonical JSON of everything that determines a build."""
    try:
        text = json.dumps(ingredients, sort_keys=True, separators=(",", ":"))
    except TypeError as err:
        raise DayzeroError(f"a cache key ingredient is not JSON-serializable: {err}") from err
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Entry:
    path: Path
    key: str
    meta: dict
    files: dict  # relative path -> {"sha256", "size"}
    ingredients: dict
    created: float

    def file(self, relpath: str) -> Path:
        return self.path / relpath

    @property
    def size(self) -> int:
        return sum(f["size"] for f in self.files.values())


class CorruptEntry(Exception):
    """An entry whose directory does not match its manifest (the message says how)."""


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def _describe_files(root: Path) -> dict:
    return {str(p.relative_to(root)): {"sha256": file_sha256(p), "size": p.stat().st_size}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in (MANIFEST, LAST_USED)}


def read_entry(path: Path, deep: bool) -> Entry:
    """The entry at `path`, checked against its manifest (sizes always, sha256 when deep); raises CorruptEntry."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise CorruptEntry(f"unreadable manifest: {err}") from err
    if manifest.get("format_version") != FORMAT_VERSION or manifest.get("key") != path.name:
        raise CorruptEntry("manifest is of another format or key")
    for rel, info in manifest["files"].items():
        file = path / rel
        if not file.is_file():
            raise CorruptEntry(f"missing file {rel}")
        if file.stat().st_size != info["size"]:
            raise CorruptEntry(f"{rel} has {file.stat().st_size} bytes, the manifest says {info['size']}")
        if deep and file_sha256(file) != info["sha256"]:
            raise CorruptEntry(f"{rel} does not match its checksum")
    return Entry(path, manifest["key"], manifest["meta"], manifest["files"], manifest["ingredients"],
                 manifest["created"])


class CompilationCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir() / "engines"

    def _entry_dir(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str, deep: bool = False) -> Entry | None:
        """A valid entry (sizes checked; sha256 too when deep), or None for a miss or a bad entry."""
        path = self._entry_dir(key)
        if not path.is_dir():
            return None
        try:
            entry = read_entry(path, deep)
        except CorruptEntry:
            return None
        (path / LAST_USED).touch()
        return entry

    @contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def get_or_build(self, key: str, build: Callable[[Path], dict], ingredients: dict) -> Entry:
        """The entry for `key`, built by `build(tmp_dir) -> meta` if missing or bad; one builder per key at a time."""
        hit = self.get(key, deep=True)
        if hit is not None:
            return hit
        with self._lock(key):
            # a concurrent builder may have finished while this one waited
            hit = self.get(key, deep=True)
            if hit is not None:
                return hit
            return self._build(key, build, ingredients)

    def _build(self, key: str, build: Callable[[Path], dict], ingredients: dict) -> Entry:
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            meta = build(tmp)
            manifest = {"format_version": FORMAT_VERSION, "key": key, "ingredients": ingredients,
                        "created": time.time(), "meta": meta, "files": _describe_files(tmp)}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            _fsync_tree(tmp)
            self._discard(key)
            os.rename(tmp, self._entry_dir(key))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return read_entry(self._entry_dir(key), deep=False)

    def _discard(self, key: str) -> None:
        """Move a (bad) existing entry out of the way, then delete it: a reader never sees half of it."""
        path = self._entry_dir(key)
        if path.exists():
            aside = self.root / "tmp" / f"{key}.discarded.{uuid.uuid4().hex[:8]}"
            os.rename(path, aside)
            shutil.rmtree(aside, ignore_errors=True)

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and len(p.name) == 64)

    def entries(self, deep: bool = False) -> list[tuple[str, Entry | str]]:
        """(key, Entry) for each good entry, (key, problem) for each bad one."""
        found = []
        for key in self.keys():
            try:
                found.append((key, read_entry(self._entry_dir(key), deep)))
            except CorruptEntry as err:
                found.append((key, str(err)))
        return found

    def verify(self, deep: bool = True) -> list[tuple[str, str]]:
        return [(key, problem) for key, problem in self.entries(deep) if isinstance(problem, str)]

    def remove(self, key: str) -> None:
        with self._lock(key):
            self._discard(key)

    def last_used(self, key: str) -> float:
        marker = self._entry_dir(key) / LAST_USED
        return marker.stat().st_mtime if marker.exists() else self._entry_dir(key).stat().st_mtime
