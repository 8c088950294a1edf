"""`dayzero cache ls | verify | gc`, through click and through the console entry point (exit statuses)."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from dayzero.cache import CompilationCache, cache_key
from dayzero.cli import cli
from tests.cache.builders import writer
from tests.helpers import ROOT

KEY = cache_key({"model": "tiny"})


def _cache(tmp_path, monkeypatch) -> CompilationCache:
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    cache = CompilationCache()
    cache.get_or_build(KEY, writer(), {"model": "tiny"})
    return cache


def test_ls_shows_key_size_status_and_meta(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    result = CliRunner().invoke(cli, ["cache", "ls"], catch_exceptions=False)
    assert result.exit_code == 0 and "1 entries" in result.output
    line = next(line for line in result.output.splitlines() if line.startswith(KEY[:12]))
    assert " ok " in line and 'model="tiny"' in line and 'backend="test"' in line
    cache.get(KEY).file("rank0.pt2").write_bytes(b"x")
    line = CliRunner().invoke(cli, ["cache", "ls"]).output.splitlines()[-1]
    assert " bad " in line and "truncated" in line


def test_verify_prints_bad_entries_and_exits_1(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    assert CliRunner().invoke(cli, ["cache", "verify"]).exit_code == 0
    cache.get(KEY).file("rank0.pt2").write_bytes(b"engine BYTES")
    result = CliRunner().invoke(cli, ["cache", "verify"])
    assert result.exit_code == 1 and f"bad {KEY}: file rank0.pt2 does not match its sha256" in result.output


def test_verify_exit_status_through_main(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    command = [sys.executable, "-c", "from dayzero.cli import main; main()", "cache", "verify"]
    env = {**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)}
    assert subprocess.run(command, env=env, cwd=ROOT, capture_output=True).returncode == 0
    cache.get(KEY).file("rank0.pt2").write_bytes(b"x")
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "1 bad" in done.stdout


def test_gc_dry_run_then_gc(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    dead = cache.tmp_root / f"{KEY}.999999.dead"
    dead.mkdir()
    result = CliRunner().invoke(cli, ["cache", "gc", "--dry-run", "--max-size-gb", "0"], catch_exceptions=False)
    assert result.exit_code == 0 and f"would remove {dead}" in result.output and "over the size limit" in result.output
    assert dead.exists() and cache.keys() == [KEY]
    result = CliRunner().invoke(cli, ["cache", "gc", "--older-than-days", "1"], catch_exceptions=False)
    assert f"removed {dead}" in result.output and not dead.exists() and cache.keys() == [KEY]
    CliRunner().invoke(cli, ["cache", "--root", str(cache.root), "gc", "--max-size-gb", "0"], catch_exceptions=False)
    assert cache.keys() == []
