"""A stand-in for a Triton or Gluon kernel in CPU tests of launchers: `kernel[grid](*args, **constexprs)` is recorded,
not run."""

from __future__ import annotations


class LaunchStopped(Exception):
    """Raised by a RecordedLaunch made with stop=True, so that the launcher runs no kernel after it."""


class RecordedLaunch:
    """Records each launch's (grid, constexprs) in `calls`; with `stop`, ends the launcher at its first launch."""

    def __init__(self, stop: bool = False):
        self.calls = []
        self.stop = stop

    def __getitem__(self, grid):
        def launch(*args, **constexprs):
            self.calls.append((grid, constexprs))
            if self.stop:
                raise LaunchStopped

        return launch
