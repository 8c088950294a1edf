"""`python -m dayzero` runs the same command group as the `dayzero` script."""

from __future__ import annotations

import os
import subprocess
import sys


def test_python_dash_m_dayzero_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "dayzero", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "serve" in result.stdout and "export" in result.stdout


def test_python_dash_m_dayzero_reports_bad_usage():
    result = subprocess.run([sys.executable, "-m", "dayzero", "no-such-command"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "no-such-command" in result.stderr


def test_the_embedded_model_generates_without_triton(tmp_path):
    """A CPU-only install (the container image) has no Triton: nothing may import it outside a GPU kernel's call,
    and the references serve every op, with the same tokens as with Triton installed."""
    script = ("import sys; sys.modules['triton'] = None\n"
              "import dayzero\n"
              "llm = dayzero.LLM()\n"
              "print(llm.generate(['The hybrid model'], dayzero.SamplingParams(max_tokens=4, temperature=0))"
              "[0].token_ids)\n")
    env = {**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)}
    without = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert without.returncode == 0, without.stderr
    with_triton = subprocess.run([sys.executable, "-c", script.replace("sys.modules['triton'] = None", "pass")],
                                 capture_output=True, text=True, timeout=300, env=env)
    assert without.stdout.splitlines()[-1] == with_triton.stdout.splitlines()[-1]


def test_python_dash_m_dayzero_cli_runs_the_cli_too():
    result = subprocess.run([sys.executable, "-m", "dayzero.cli", "plan", "tiny-hybrid"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "parameters" in result.stdout
