"""`python -m dayzero` runs the same command group as the `dayzero` script."""

from __future__ import annotations

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
