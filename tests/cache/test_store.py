"""The store: hits build once, damaged or partial entries are never returned and get rebuilt, a failed build
leaves nothing and loses nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dayzero.cache import CompilationCache, cache_key
from tests.cache.builders import writer

INGREDIENTS = {"config": {"layers": 6}, "weights": "abc123", "options": {"kv": "fp8"}, "rank": [0, 1]}
KEY = cache_key(INGREDIENTS)


def test_identical_ingredients_hit_and_build_once(tmp_path):
    cache, build = CompilationCache(tmp_path), writer()
    first = cache.get_or_build(KEY, build, ingredients=INGREDIENTS)
    second = cache.get_or_build(cache_key(json.loads(json.dumps(INGREDIENTS))), build, ingredients=INGREDIENTS)
    assert len(build.calls) == 1 and first.path == second.path == tmp_path / KEY
    assert first.file("rank0.pt2").read_bytes() == b"engine bytes"
    assert second.meta == {"model": "tiny", "backend": "test"} and second.ingredients == INGREDIENTS
    assert set(first.files) == {"rank0.pt2", "sub/extra.json"} and first.size == len(b"engine bytes") + 2
    manifest = json.loads((first.path / "manifest.json").read_text())
    assert manifest["files"]["rank0.pt2"]["size"] == 12 and manifest["key"] == KEY
    assert not list((tmp_path / "tmp").iterdir())


def test_a_changed_ingredient_builds_a_second_entry(tmp_path):
    cache, build = CompilationCache(tmp_path), writer()
    cache.get_or_build(KEY, build, ingredients=INGREDIENTS)
    other = {**INGREDIENTS, "weights": "abc124"}
    cache.get_or_build(cache_key(other), build, ingredients=other)
    assert len(build.calls) == 2 and cache.keys() == sorted([KEY, cache_key(other)])


def _damage(entry, how: str) -> None:
    engine = entry.file("rank0.pt2")
    if how == "truncate":
        engine.write_bytes(b"engine")
    elif how == "alter":
        # same size: only the checksum sees it
        engine.write_bytes(b"engine BYTES")
    elif how == "delete":
        engine.unlink()
    elif how == "manifest":
        (entry.path / "manifest.json").write_text("{not json")
    elif how == "wrong-key":
        manifest = json.loads((entry.path / "manifest.json").read_text())
        (entry.path / "manifest.json").write_text(json.dumps({**manifest, "key": "0" * 64}))


@pytest.mark.parametrize("how", ["truncate", "alter", "delete", "manifest", "wrong-key"])
def test_damaged_entry_is_never_returned_and_is_rebuilt(tmp_path, how):
    cache, build = CompilationCache(tmp_path), writer()
    _damage(cache.get_or_build(KEY, build, ingredients=INGREDIENTS), how)
    assert cache.get(KEY) is None and cache.get(KEY, deep=True) is None
    assert [key for key, _ in cache.verify()] == [KEY] and isinstance(dict(cache.entries())[KEY], str)
    rebuilt = cache.get_or_build(KEY, build, ingredients=INGREDIENTS)
    assert len(build.calls) == 2 and rebuilt.file("rank0.pt2").read_bytes() == b"engine bytes"
    assert cache.verify() == [] and not list((tmp_path / "tmp").iterdir())


def test_alteration_that_restores_the_mtime_is_caught_by_the_fast_check_via_ctime(tmp_path):
    cache = CompilationCache(tmp_path)
    engine = cache.get_or_build(KEY, writer(), ingredients=INGREDIENTS).file("rank0.pt2")
    stat = engine.stat()
    engine.write_bytes(b"engine BYTES")
    os.utime(engine, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.get(KEY) is None


def test_fast_check_trusts_unchanged_files_and_rehashes_copied_ones(tmp_path):
    cache = CompilationCache(tmp_path / "a")
    cache.get_or_build(KEY, writer(), ingredients=INGREDIENTS)
    copy = tmp_path / "b" / KEY
    copy.mkdir(parents=True)
    for path in (tmp_path / "a" / KEY).rglob("*"):
        target = copy / path.relative_to(tmp_path / "a" / KEY)
        target.mkdir(exist_ok=True) if path.is_dir() else target.write_bytes(path.read_bytes())
    assert CompilationCache(tmp_path / "b").get(KEY) is not None
    (copy / "rank0.pt2").write_bytes(b"engine BYTES")
    assert CompilationCache(tmp_path / "b").get(KEY) is None


def test_partial_entry_without_manifest_is_rebuilt(tmp_path):
    (tmp_path / KEY).mkdir(parents=True)
    (tmp_path / KEY / "rank0.pt2").write_bytes(b"half")
    cache, build = CompilationCache(tmp_path), writer()
    assert cache.get(KEY) is None and "no manifest.json" in dict(cache.verify())[KEY]
    assert cache.get_or_build(KEY, build, ingredients=INGREDIENTS).file("rank0.pt2").read_bytes() == b"engine bytes"


def test_failed_build_leaves_nothing_and_keeps_other_entries(tmp_path):
    cache = CompilationCache(tmp_path)
    kept = cache.get_or_build("a" * 64, writer(), {})

    def broken(tmp: Path) -> dict:
        (tmp / "rank0.pt2").write_bytes(b"half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build("b" * 64, broken, {})
    assert cache.get("b" * 64) is None and not (tmp_path / ("b" * 64)).exists()
    assert not list((tmp_path / "tmp").iterdir())
    assert cache.get("a" * 64, deep=True).path == kept.path


@pytest.mark.parametrize("meta", [{"dtype": object()}, ["not", "a", "dict"]], ids=["non-json", "list"])
def test_build_returning_bad_metadata_leaves_nothing(tmp_path, meta):
    cache = CompilationCache(tmp_path)
    with pytest.raises(Exception, match="JSON|dict"):
        cache.get_or_build(KEY, lambda tmp: (tmp / "x").write_text("x") and meta, {})
    assert cache.keys() == [] and not list((tmp_path / "tmp").iterdir())


def test_build_may_not_write_the_manifest(tmp_path):
    with pytest.raises(ValueError, match="manifest.json"):
        CompilationCache(tmp_path).get_or_build(KEY, lambda tmp: (tmp / "manifest.json").write_text("{}") and {})
    assert CompilationCache(tmp_path).keys() == []


def test_get_marks_use_and_remove_deletes(tmp_path):
    cache = CompilationCache(tmp_path)
    entry = cache.get_or_build(KEY, writer(), ingredients=INGREDIENTS)
    os.utime(entry.path / "last_used", (1.0, 1.0))
    assert cache.last_used(KEY) == 1.0
    cache.entries()
    assert cache.last_used(KEY) == 1.0
    cache.get(KEY)
    assert cache.last_used(KEY) > 1.0
    assert cache.remove(KEY) and not cache.remove(KEY) and cache.keys() == []


def test_keys_must_come_from_cache_key(tmp_path):
    with pytest.raises(ValueError, match="64 lowercase hex"):
        CompilationCache(tmp_path).get("../escape")


def test_default_root_is_under_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    assert CompilationCache().root == tmp_path / "engines"
