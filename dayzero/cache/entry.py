"""One cache entry on disk: manifest.json + the built files, and the checks that decide whether it may load.

Layout of root/<key>/: the files the build wrote, `manifest.json` {format_version, key, ingredients, created,
meta, files: {relpath: {sha256, size}}}, and two bookkeeping files outside the manifest: `stamps.json` (per file
the size, mtime, ctime and inode seen when its sha256 last matched, so the fast check can skip rehashing
unchanged files) and `last_used` (its mtime is the last get()).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STAMPS = "stamps.json"
LAST_USED = "last_used"
RESERVED = frozenset({MANIFEST, STAMPS, LAST_USED})
HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class Entry:
    path: Path
    key: str
    meta: dict
    files: dict  # relpath -> sha256
    sizes: dict  # relpath -> bytes
    ingredients: dict
    created: str  # ISO 8601, UTC

    def file(self, relpath: str) -> Path:
        if relpath not in self.files:
            raise KeyError(f"cache entry {self.key[:12]} has no file {relpath!r}; it has {sorted(self.files)}")
        return self.path / relpath

    @property
    def size(self) -> int:
        """Bytes of the built files (manifest and bookkeeping excluded)."""
        return sum(self.sizes.values())


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_stamp(path: Path) -> list[int]:
    """What changes when a file is rewritten, copied or touched: size, mtime, ctime, inode."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def load_entry(path: Path, key: str, deep: bool, record: bool = True) -> Entry | str:
    """The Entry at `path`, or why it must not load.

    deep=False (what get() uses): manifest, key, every file present with its manifest size, and sha256
    recomputed only for files whose stamp changed since their hash last matched. deep=True rehashes every file.
    record=False writes nothing (the stamps of files whose hash matched anew are not kept).
    """
    manifest = _read_manifest(path, key)
    if isinstance(manifest, str):
        return manifest
    entry = _entry_from_manifest(path, manifest)
    if isinstance(entry, str):
        return entry
    problem = _check_files(entry, deep, record)
    return problem or entry


def _read_manifest(path: Path, key: str) -> dict | str:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return f"no {MANIFEST} (a build stopped before finishing)"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{MANIFEST} is unreadable: {err}"
    if not isinstance(manifest, dict):
        return f"{MANIFEST} is not a JSON object"
    if manifest.get("format_version") != FORMAT_VERSION:
        return f"{MANIFEST} format_version {manifest.get('format_version')!r}, this dayzero reads {FORMAT_VERSION}"
    if manifest.get("key") != key:
        return f"{MANIFEST} is for key {manifest.get('key')!r}, not for its directory {key}"
    return manifest


def _entry_from_manifest(path: Path, manifest: dict) -> Entry | str:
    try:
        files = {rel: str(info["sha256"]) for rel, info in manifest["files"].items()}
        sizes = {rel: int(info["size"]) for rel, info in manifest["files"].items()}
        return Entry(path=path, key=manifest["key"], meta=dict(manifest["meta"]), files=files, sizes=sizes,
                     ingredients=dict(manifest["ingredients"]), created=str(manifest["created"]))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return f"{MANIFEST} lacks or misspells a field: {err!r}"


def _check_files(entry: Entry, deep: bool, record: bool) -> str | None:
    stamps = read_stamps(entry.path)
    fresh = dict(stamps)
    for rel, sha in entry.files.items():
        target = entry.path / rel
        if not target.is_file() or target.is_symlink():
            return f"file {rel} is missing"
        stamp = file_stamp(target)
        if stamp[0] != entry.sizes[rel]:
            return f"file {rel} is {stamp[0]} bytes, the manifest says {entry.sizes[rel]} (truncated or replaced)"
        if deep or stamps.get(rel) != stamp:
            if sha256_file(target) != sha:
                return f"file {rel} does not match its sha256 (altered or corrupt)"
            fresh[rel] = stamp
    if record and fresh != stamps:
        write_stamps(entry.path, fresh)
    return None


def read_stamps(path: Path) -> dict:
    try:
        stamps = json.loads((path / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def write_stamps(path: Path, stamps: dict) -> None:
    """Best effort, atomic (readers race to write the same facts): a read-only cache just rehashes next time."""
    tmp = path / f"{STAMPS}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        tmp.write_text(json.dumps(stamps, sort_keys=True))
        os.replace(tmp, path / STAMPS)
    except OSError:
        tmp.unlink(missing_ok=True)
