from __future__ import annotations

import os
import re
import subprocess
import sys

from click.testing import CliRunner

from dayzero.cli import cli
from tests.helpers import ROOT


def test_run_creates_the_embedded_model_and_streams(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["run", "--max-tokens", "5", "--prompt", "hello"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "creating the embedded tiny-hybrid checkpoint" in result.output
    assert "\nhello" in result.output
    assert "5 generated" in result.output and "tokens/s" in result.output
    assert (tmp_path / "checkpoints" / "tiny-hybrid" / "config.json").exists()


def test_init_checkpoint_then_run_it(tmp_path):
    out = tmp_path / "ckpt"
    runner = CliRunner()
    result = runner.invoke(cli, ["init-checkpoint", "tiny-hybrid", str(out), "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["run", "--checkpoint", str(out), "--max-tokens", "3"])
    assert result.exit_code == 0 and "3 generated" in result.output and "drafts accepted" not in result.output
    result = runner.invoke(cli, ["run", "--checkpoint", str(out), "--max-tokens", "12", "--num-draft", "2",
                                 "--prompt", "abcabcabcabc"])
    assert result.exit_code == 0 and "12 generated" in result.output, result.output
    assert re.search(r"drafts accepted \d+/\d+ \(\d+%\)", result.output), result.output


def run_main(*args, env=None):
    return subprocess.run([sys.executable, "-c", "from dayzero.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env)


def test_user_errors_print_without_traceback(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    result = run_main("run", "--checkpoint", str(tmp_path))
    assert result.returncode == 2
    assert "error:" in result.stderr and "is not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_bundled_config(tmp_path):
    result = run_main("init-checkpoint", "no-such-model", str(tmp_path / "x"))
    assert result.returncode == 2 and "no bundled config 'no-such-model'" in result.stderr


def test_run_refuses_a_memory_fraction_outside_0_1(tmp_path):
    result = run_main("run", "--gpu-memory-fraction", "1.5", env={**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 2 and "--gpu-memory-fraction must be in (0, 1], got 1.5" in result.stderr


def test_plan_prints_the_weights_each_rank_holds():
    result = CliRunner().invoke(cli, ["plan", "kimi-k3.1", "--tp", "8", "--ep", "8"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "2779.66 B parameters" in result.output and "per rank (--tp 8 --ep 8): 354.70 B parameters" in result.output
    refused = CliRunner().invoke(cli, ["plan", "tiny-hybrid", "--tp", "3"])
    assert "does not divide this model" in str(refused.exception)
