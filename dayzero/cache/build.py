"""Turning a finished build directory into an entry: list and hash its files, write the manifest, fsync."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from dayzero.cache.entry import FORMAT_VERSION, MANIFEST, RESERVED, STAMPS, file_stamp, sha256_file
from dayzero.cache.key import canonical_json


def seal(build_dir: Path, key: str, ingredients: dict, meta: dict) -> None:
    """Write manifest.json and stamps.json into build_dir and flush everything to disk before it is renamed."""
    if not isinstance(meta, dict):
        raise TypeError(f"a cache build returns a dict of metadata, got {type(meta).__name__}")
    canonical_json(meta)
    relpaths = built_files(build_dir)
    files = {rel: {"sha256": sha256_file(build_dir / rel), "size": (build_dir / rel).stat().st_size}
             for rel in relpaths}
    created = datetime.now(UTC).isoformat(timespec="seconds")
    manifest = {"format_version": FORMAT_VERSION, "key": key, "ingredients": ingredients, "created": created,
                "meta": meta, "files": files}
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    stamps = {rel: file_stamp(build_dir / rel) for rel in relpaths}
    (build_dir / STAMPS).write_text(json.dumps(stamps, sort_keys=True))
    fsync_tree(build_dir)


def built_files(build_dir: Path) -> list[str]:
    """Every regular file under build_dir as a posix relpath; links and reserved top-level names refused."""
    found = []
    for dirpath, dirnames, filenames in os.walk(build_dir):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                raise ValueError(f"a cache build wrote a symlink {path}; write the file itself")
        found += [(Path(dirpath) / name).relative_to(build_dir).as_posix() for name in filenames]
    clash = RESERVED.intersection(found)
    if clash:
        raise ValueError(f"a cache build must not write {sorted(clash)}: the cache writes those itself")
    return sorted(found)


def fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
