"""An installed dayzero (a wheel, not this checkout) finds its bundled configs: `dayzero run`'s embedded model is
built from one."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from tests.helpers import ROOT


def _clean_copy(target):
    """The project's files without build leftovers (an egg-info's file list would mask missing package data)."""
    listed = subprocess.run(["git", "ls-files", "-c", "-o", "--exclude-standard", "pyproject.toml", "README.md",
                             "LICENSE", "dayzero"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    for name in listed:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, target / name)
    return target


def test_the_wheel_carries_the_bundled_configs(tmp_path):
    source = _clean_copy(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("dayzero-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {path.relative_to(ROOT).as_posix() for path in (ROOT / "dayzero" / "configs").glob("*/config.json")}
    assert "dayzero/configs/tiny-hybrid/config.json" in bundled and bundled <= names
    # typed for users' checkers, and the license travels with it
    assert "dayzero/py.typed" in names and any(name.endswith("licenses/LICENSE") for name in names)
