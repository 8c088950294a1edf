"""`--log-level` and progress bars: debug shows timestamped lines, error hides the info lines, and no bar is drawn
when stderr is not a terminal (CliRunner)."""

from __future__ import annotations

import io
import re

import pytest
import torch
from click.testing import CliRunner

from dayzero.cli import cli
from dayzero.logs import ROOT, configure, progress_bar
from dayzero.model.checkpoint_writer import write_random_checkpoint
from tests.helpers import TINY_CONFIG

STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO) dayzero\.[\w.]+: ", re.MULTILINE)


@pytest.fixture(autouse=True)
def restore_logging():
    level, handlers = ROOT.level, list(ROOT.handlers)
    yield
    ROOT.setLevel(level)
    ROOT.handlers[:] = handlers


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("ckpt") / "tiny", torch.float32)


def _export(checkpoint, level: str):
    args = ["--log-level", level, "export", str(checkpoint), "--backend", "eager", "--max-batch", "2",
            "--max-len", "128"]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_debug_prints_timestamped_lines(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = _export(checkpoint, "debug")
    assert result.exit_code == 0, result.output
    assert STAMPED.search(result.stderr), result.stderr
    assert re.search(r"INFO dayzero\.export\.build: \[export\] load \+ lay out weights done in", result.stderr)


def test_error_silences_info_lines(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = _export(checkpoint, "error")
    assert result.exit_code == 0 and result.stdout.startswith("built "), result.output
    assert "[export]" not in result.stderr and "INFO" not in result.stderr


def test_no_bar_when_stderr_is_not_a_terminal(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = _export(checkpoint, "info")
    assert result.exit_code == 0, result.output
    assert "[export] load + lay out weights done in" in result.stderr
    assert "\r" not in result.stderr and "loading weights" not in result.stderr and "step/s" not in result.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("level, shown", [("info", True), ("debug", True), ("warning", False)])
def test_bar_on_a_terminal_only_at_info_or_below(level, shown, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    configure(level)
    for _ in progress_bar(range(3), desc="writing checkpoint"):
        pass
    assert ("writing checkpoint" in terminal.getvalue()) == shown


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        configure("verbose")
    result = CliRunner().invoke(cli, ["--log-level", "verbose", "plan", "tiny-hybrid"])
    assert result.exit_code == 2 and "verbose" in result.output
