"""The compilation cache: hits, misses per ingredient, corruption detected and rebuilt, one build under
concurrency, no loadable entry after a killed or failed build, garbage collection."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.cache import CompilationCache, cache_key
from dayzero.cache.gc import collect
from dayzero.cli import cli
from dayzero.errors import DayzeroError

INGREDIENTS = {"config": {"layers": 6}, "weights": "abc123", "options": {"kv": "fp8", "max_batch": 8},
               "rank": [0, 1], "plugins": "f00d", "torch": "2.13.0", "arch": "cpu"}


def writer(payload: bytes = b"engine bytes"):
    calls = []

    def build(tmp: Path) -> dict:
        calls.append(tmp)
        (tmp / "rank0.pt2").write_bytes(payload)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "extra.json").write_text("{}")
        return {"model": "tiny", "backend": "test"}

    build.calls = calls
    return build


def test_identical_ingredients_hit_and_build_once(tmp_path):
    cache, build = CompilationCache(tmp_path), writer()
    key = cache_key(INGREDIENTS)
    first = cache.get_or_build(key, build, INGREDIENTS)
    second = cache.get_or_build(cache_key(json.loads(json.dumps(INGREDIENTS))), build, INGREDIENTS)
    assert len(build.calls) == 1 and first.path == second.path
    assert first.file("rank0.pt2").read_bytes() == b"engine bytes" and second.meta == {"model": "tiny",
                                                                                      "backend": "test"}
    assert set(first.files) == {"rank0.pt2", "sub/extra.json"}
    assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("ingredient", list(INGREDIENTS))
def test_any_changed_ingredient_misses(ingredient):
    changed = {**INGREDIENTS, ingredient: [INGREDIENTS[ingredient], "changed"]}
    assert cache_key(changed) != cache_key(INGREDIENTS)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5), st.booleans()),
                       min_size=1, max_size=6))
def test_key_ignores_order_and_sees_values(ingredients):
    reordered = dict(reversed(list(ingredients.items())))
    assert cache_key(reordered) == cache_key(ingredients)
    first = next(iter(ingredients))
    assert cache_key({**ingredients, first: [ingredients[first]]}) != cache_key(ingredients)


def test_non_json_ingredient_is_a_user_error():
    with pytest.raises(DayzeroError, match="JSON"):
        cache_key({"weights": object()})


@pytest.mark.parametrize("damage", ["truncate", "alter", "delete", "manifest"])
def test_damaged_entry_fails_verify_and_is_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    cache, build = CompilationCache(), writer()
    key = cache_key(INGREDIENTS)
    entry = cache.get_or_build(key, build, INGREDIENTS)
    engine = entry.file("rank0.pt2")
    if damage == "truncate":
        engine.write_bytes(b"engine")
    elif damage == "alter":
        engine.write_bytes(b"engine BYTES")  # same size: only the checksum sees it
    elif damage == "delete":
        engine.unlink()
    else:
        (entry.path / "manifest.json").write_text("{not json")
    result = CliRunner().invoke(cli, ["cache", "verify"])
    assert result.exit_code == 1 and "BAD" in result.output
    assert cache.get(key, deep=True) is None
    rebuilt = cache.get_or_build(key, build, INGREDIENTS)
    assert len(build.calls) == 2 and rebuilt.file("rank0.pt2").read_bytes() == b"engine bytes"
    assert CliRunner().invoke(cli, ["cache", "verify"]).exit_code == 0


def test_verify_exit_status_through_the_console_script(tmp_path):
    cache = CompilationCache(tmp_path / "engines")
    entry = cache.get_or_build(cache_key(INGREDIENTS), writer(), INGREDIENTS)
    env = {**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)}
    run = [sys.executable, "-c", "from dayzero.cli import main; main()", "cache", "verify"]
    assert subprocess.run(run, env=env, capture_output=True).returncode == 0
    entry.file("rank0.pt2").write_bytes(b"x")
    assert subprocess.run(run, env=env, capture_output=True).returncode == 1


def test_failed_build_leaves_nothing_and_keeps_other_entries(tmp_path):
    cache = CompilationCache(tmp_path)
    kept = cache.get_or_build("a" * 64, writer(), {})

    def broken(tmp: Path) -> dict:
        (tmp / "rank0.pt2").write_bytes(b"half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build("b" * 64, broken, {})
    assert cache.get("b" * 64) is None and not list((tmp_path / "tmp").iterdir())
    assert cache.get("a" * 64, deep=True).path == kept.path


def _slow_build(root: str, key: str, log: str, seconds: float) -> None:
    def build(tmp: Path) -> dict:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        (tmp / "rank0.pt2").write_bytes(b"built")
        return {}

    entry = CompilationCache(Path(root)).get_or_build(key, build, {})
    assert entry.file("rank0.pt2").read_bytes() == b"built"


def test_concurrent_builders_build_once_and_both_succeed(tmp_path):
    log = tmp_path / "builds.log"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_slow_build, args=(str(tmp_path / "c"), "k" * 64, str(log), 1.0)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(log.read_text().split()) == 1
    assert len(CompilationCache(tmp_path / "c").keys()) == 1


def test_killed_builder_leaves_no_loadable_entry(tmp_path):
    root, key, log = tmp_path / "c", "d" * 64, tmp_path / "builds.log"
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_slow_build, args=(str(root), key, str(log), 60.0))
    proc.start()
    deadline = time.time() + 30
    while not log.exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    cache = CompilationCache(root)
    assert cache.get(key) is None and cache.keys() == []
    assert any("leftover tmp" in line for line in collect(cache))
    assert not list((root / "tmp").iterdir())
    # the dead builder's lock was released by the kernel: this build does not wait
    _slow_build(str(root), key, str(log), 0.0)
    assert cache.get(key, deep=True) is not None


def test_gc_removes_bad_old_and_excess_entries(tmp_path):
    cache = CompilationCache(tmp_path)
    keys = [c * 64 for c in "abc"]
    for key in keys:
        cache.get_or_build(key, writer(b"x" * 1000), {})
    cache.get(keys[0]).file("rank0.pt2").write_bytes(b"short")
    assert cache.get(keys[1]) is not None  # marks it used now; then pretend that was 10 days ago
    old = time.time() - 10 * 86400
    os.utime(tmp_path / keys[1] / ".last_used", (old, old))
    assert set(collect(cache, dry_run=True, older_than_days=5)) == {f"bad entry {keys[0][:16]}",
                                                                    f"unused entry {keys[1][:16]}"}
    assert cache.keys() == keys
    collect(cache, older_than_days=5)
    assert cache.keys() == [keys[2]]
    collect(cache, max_size_bytes=10)
    assert cache.keys() == []
