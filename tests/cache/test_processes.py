"""Real processes: two concurrent builders of one key build once and both succeed; a builder killed mid-build
leaves nothing that loads, and the next get_or_build builds without waiting."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from dayzero.cache import CompilationCache
from tests.cache.builders import slow_build

KEY = "e" * 64


def _wait_for(path, timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.02)
    assert path.exists(), "the builder never started"


def test_concurrent_builders_build_once_and_both_succeed(tmp_path):
    root, log = tmp_path / "c", tmp_path / "builds.log"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=slow_build, args=(str(root), KEY, str(log), 1.5)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(90)
    assert [proc.exitcode for proc in procs] == [0, 0]
    builders = log.read_text().split()
    cache = CompilationCache(root)
    assert len(builders) == 1 and cache.keys() == [KEY]
    assert cache.get(KEY, deep=True).meta == {"pid": int(builders[0])}
    assert not list((root / "tmp").iterdir())


def test_killed_builder_leaves_no_loadable_entry_and_is_rebuilt(tmp_path):
    root, log = tmp_path / "c", tmp_path / "builds.log"
    proc = multiprocessing.get_context("spawn").Process(target=slow_build, args=(str(root), KEY, str(log), 120.0))
    proc.start()
    _wait_for(log)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    cache = CompilationCache(root)
    assert cache.get(KEY) is None and cache.keys() == [] and cache.verify() == []
    left = list((root / "tmp").iterdir())
    assert len(left) == 1 and (left[0] / "rank0.pt2").read_bytes() == b"half"
    start = time.perf_counter()
    slow_build(str(root), KEY, str(log), 0.0)
    # the kernel released the dead builder's lock: no waiting
    assert time.perf_counter() - start < 5.0
    assert cache.get(KEY, deep=True).meta == {"pid": os.getpid()}
    assert [removal.path for removal in cache.gc()][:1] == left and not list((root / "tmp").iterdir())
