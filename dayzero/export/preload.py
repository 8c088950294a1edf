"""The libstdc++ preload that AOTInductor packages need on some GPU images.

There, loading a package's wrapper .so crashes (a stack overflow inside std::regex from mixed libstdc++ copies)
unless the process starts with the system libstdc++ preloaded. Entry points that load AOTI engines call
`reexec_with_libstdcxx()` first: it restarts the same command once with LD_PRELOAD set, before any engine loads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM_LIBSTDCXX = Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
# set in the restarted process (no second restart) and by users who want none
NO_REEXEC = "DAYZERO_NO_REEXEC"


def needs_reexec(environ: dict | None = None, cuda: bool | None = None) -> bool:
    environ = os.environ if environ is None else environ
    if environ.get(NO_REEXEC) or not sys.platform.startswith("linux") or not SYSTEM_LIBSTDCXX.exists():
        return False
    if str(SYSTEM_LIBSTDCXX) in environ.get("LD_PRELOAD", ""):
        return False
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return cuda


def preload_environment(environ: dict) -> dict:
    preload = ":".join(p for p in (str(SYSTEM_LIBSTDCXX), environ.get("LD_PRELOAD", "")) if p)
    return {**environ, "LD_PRELOAD": preload, NO_REEXEC: "1"}


def reexec_with_libstdcxx() -> None:
    """Replace this process by the same command with the preload set, when this machine needs it."""
    if needs_reexec():
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], preload_environment(dict(os.environ)))
