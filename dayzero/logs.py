"""Logging and progress bars: the `dayzero` logger tree writes timestamped lines to stderr at the level
`--log-level` names, and long loops (checkpoint writing, weight loading, export steps) show a tqdm bar on stderr
when it is a terminal and info lines are shown."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

from tqdm import tqdm

LEVELS = ("debug", "info", "warning", "error")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ROOT = logging.getLogger("dayzero")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is logged (a test runner may swap it between commands), above
    any bar being drawn (tqdm.write clears the bars, writes the line, redraws them)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:
            self.handleError(record)


def configure(level: str) -> None:
    """Send the `dayzero` logger tree's records at `level` (debug, info, warning, error) and above to stderr."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    for handler in [h for h in ROOT.handlers if isinstance(h, _StderrHandler)]:
        ROOT.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    ROOT.addHandler(handler)
    ROOT.setLevel(level.upper())


def progress_bar(iterable: Iterable | None = None, **kwargs) -> tqdm:
    """A tqdm bar on stderr: shown only when stderr is a terminal (tqdm's `disable=None`) and info lines are on."""
    disable = None if ROOT.isEnabledFor(logging.INFO) else True
    return tqdm(iterable, file=sys.stderr, disable=disable, leave=False, dynamic_ncols=True, **kwargs)
