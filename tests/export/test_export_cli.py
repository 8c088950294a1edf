"""`dayzero export` on the command line: build, then a cache hit; user errors exit 2 with a message."""

from __future__ import annotations

import torch
from click.testing import CliRunner

from dayzero.cli import cli
from dayzero.model.checkpoint_writer import write_random_checkpoint
from tests.helpers import TINY_CONFIG
from tests.test_cli import run_main


def test_export_twice_is_a_hit_and_lists_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    write_random_checkpoint(TINY_CONFIG, tmp_path / "ckpt", torch.float32, overwrite=True)
    runner = CliRunner()
    first = runner.invoke(cli, ["export", str(tmp_path / "ckpt"), "--backend", "eager"], catch_exceptions=False)
    second = runner.invoke(cli, ["export", str(tmp_path / "ckpt"), "--backend", "eager"], catch_exceptions=False)
    assert first.exit_code == second.exit_code == 0
    assert "built" in first.output and "cache hit" in second.output
    listing = runner.invoke(cli, ["cache", "ls"]).output
    assert "eager" in listing and listing.count(" ok") == 1


def test_export_user_errors(tmp_path):
    write_random_checkpoint(TINY_CONFIG, tmp_path / "ckpt", torch.float32, overwrite=True)
    env_args = {"env": {"DAYZERO_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin"}}
    fp8 = run_main("export", str(tmp_path / "ckpt"), "--backend", "eager", "--kv-cache", "fp8", **env_args)
    assert fp8.returncode == 2 and "use --kv-cache bf16" in fp8.stderr and "Traceback" not in fp8.stderr
    multi = run_main("export", str(tmp_path / "ckpt"), "--tp", "2", **env_args)
    assert multi.returncode == 2 and "not built yet" in multi.stderr
    assert not (tmp_path / "engines").exists() or not [p for p in (tmp_path / "engines").iterdir()
                                                         if len(p.name) == 64]
