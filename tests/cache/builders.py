"""Builds for the cache tests, importable by spawned processes without pulling in torch."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dayzero.cache import CompilationCache


def writer(payload: bytes = b"engine bytes"):
    """A build writing rank0.pt2 and a nested file; build.calls lists the tmp dirs it was called with."""
    calls = []

    def build(tmp: Path) -> dict:
        calls.append(tmp)
        (tmp / "rank0.pt2").write_bytes(payload)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "extra.json").write_text("{}")
        return {"model": "tiny", "backend": "test"}

    build.calls = calls
    return build


def slow_build(root: str, key: str, log: str, seconds: float) -> None:
    """get_or_build with a build that logs its pid, writes half an engine, sleeps, then finishes it."""
    def build(tmp: Path) -> dict:
        (tmp / "rank0.pt2").write_bytes(b"half")
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        (tmp / "rank0.pt2").write_bytes(b"built")
        return {"pid": os.getpid()}

    entry = CompilationCache(Path(root)).get_or_build(key, build, {"test": "slow"})
    assert entry.file("rank0.pt2").read_bytes() == b"built"
