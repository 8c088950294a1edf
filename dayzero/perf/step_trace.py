"""Where profiled decode steps spend their time, from torch.profiler's trace: the steps' wall time split by op kind
(op_kinds.py), the rest being host gaps.

decode_profile.py opens a `dayzero.step` range around each profiled step and a `dayzero.model` range around the
model's forward in it. On a GPU the device's kernels, copies and fills are attributed: each by the host call that
launched it (a CUDA graph's kernels by the graph's launch), to its kind by name when launched inside the model's
forward, else to sampling; time where several overlap counts once, so the kinds sum to the device's busy time over the
steps. On a CPU the host's outermost ops on the steps' thread are attributed the same way. The idle time between two
pieces of work of one forward is the model's gaps (on a GPU the time between a CUDA graph's kernels, on a CPU the
Python between ops); the rest of the steps' wall time is host gaps: on a GPU the time the device waits for the host.

On a GPU the wall time is the device's: from the first to the last piece of work the steps launched, over the forwards
they launched. The host's window would be wrong by a step: with overlap a step's call launches the next forward before
it waits for its own, so the first call's window opens while the device still runs a forward launched before it.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

from dayzero.perf.op_kinds import SAMPLING, cpu_op_kind, kernel_kind

STEP, MODEL = "dayzero.step", "dayzero.model"
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_OP, HOST_RANGE = "cpu_op", "user_annotation"
# ranges and ops (and a range's copy on the device's timeline): what a device event's correlation never points to
HOST_CATEGORIES = frozenset({HOST_OP, HOST_RANGE, "gpu_user_annotation", "python_function"})


@dataclass(frozen=True)
class TraceEvent:
    name: str
    category: str
    start: float  # us
    duration: float  # us
    thread: object = None
    correlation: int | None = None  # a device event's and the host call's that launched it

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class KindTimes:
    """The profiled steps' wall time (`window_us`), the part of it some device work (a CPU: some op) ran, by kind."""

    steps: int  # on a GPU the forwards the steps launched
    window_us: float
    us: dict[str, float]  # kind -> busy time over the steps
    launches: dict[str, int]  # kind -> kernels, copies and fills (a CPU: outermost ops)
    on_device: bool
    model_gap_us: float = 0.0  # idle time between two pieces of one forward's work, over the steps
    # kernel (a CPU: op) name -> (launches, busy time) over the steps
    by_name: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def busy_us(self) -> float:
        return sum(self.us.values())


def read_trace(path: str | Path) -> list[TraceEvent]:
    """The complete ("X") events of a chrome trace written by torch.profiler's export_chrome_trace."""
    data = json.loads(Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [TraceEvent(e["name"], e.get("cat", ""), float(e["ts"]), float(e.get("dur", 0.0)), e.get("tid"),
                       (e.get("args") or {}).get("correlation")) for e in events if e.get("ph") == "X"]


class _Ranges:
    """Sorted, non-overlapping [start, end] ranges of one name; whether a time falls in one."""

    def __init__(self, events: list[TraceEvent]):
        spans = sorted((e.start, e.end) for e in events)
        self.starts = [s for s, _ in spans]
        self.ends = [e for _, e in spans]

    def __contains__(self, time: float) -> bool:
        return self.index(time) is not None

    def index(self, time: float) -> int | None:
        """The range `time` falls in, by its order; None outside them all."""
        i = bisect.bisect_right(self.starts, time) - 1
        return i if i >= 0 and time <= self.ends[i] else None


def kind_times(events: list[TraceEvent]) -> KindTimes:
    """Split the profiled steps of a trace by op kind (raises ValueError for a trace with no `dayzero.step` range)."""
    steps = sorted((e for e in events if e.name == STEP and e.category == HOST_RANGE), key=lambda e: e.start)
    if not steps:
        raise ValueError(f"the trace has no {STEP!r} range: no profiled decode step")
    window = (steps[0].start, steps[-1].end)
    forwards = [e for e in events if e.name == MODEL and e.category == HOST_RANGE]
    device = _device_work(events, window)
    if device:
        return _device_kind_times(device, forwards, window, len(steps))
    tally = _Tally(window, _Ranges(forwards))
    _host_times([e for e in events if e.category == HOST_OP and e.thread == steps[0].thread], tally)
    return KindTimes(len(steps), window[1] - window[0], tally.us, tally.launches, False, tally.model_gap_us,
                     tally.by_name)


def _device_work(events: list[TraceEvent], window: tuple[float, float]) -> list[tuple[TraceEvent, float | None]]:
    """The device work the steps launched, each with when its launch started (None: the trace lost the launch, and
    the work started within the steps)."""
    launched = _launch_times(events)
    device = [(e, launched.get(e.correlation)) for e in events if e.category in DEVICE_CATEGORIES]
    return [(e, launch) for e, launch in device if window[0] <= (e.start if launch is None else launch) <= window[1]]


def _device_kind_times(device: list[tuple[TraceEvent, float | None]], forwards: list[TraceEvent],
                       window: tuple[float, float], num_steps: int) -> KindTimes:
    """On the device's timeline: from the first to the last piece of the steps' work, a step a forward launched (a
    trace without forward ranges: a step a `dayzero.step` range)."""
    num_forwards = sum(window[0] <= f.start <= window[1] for f in forwards)
    window = (min(e.start for e, _ in device), max(e.end for e, _ in device))
    tally = _Tally(window, _Ranges(forwards))
    _device_times(device, tally)
    return KindTimes(num_forwards or num_steps, window[1] - window[0], tally.us, tally.launches, True,
                     tally.model_gap_us, tally.by_name)


class _Tally:
    """The profiled steps' work, one event at a time in start order: busy time and launches by kind and by name, and
    the idle time between two pieces of one forward's work."""

    def __init__(self, window: tuple[float, float], model: _Ranges):
        self.window, self.model = window, model
        self.us: dict[str, float] = {}
        self.launches: dict[str, int] = {}
        self.by_name: dict[str, tuple[int, float]] = {}
        self.model_gap_us = 0.0
        self.covered = window[0]  # busy until
        self.forward: int | None = None  # the forward (MODEL range) of the work that ran last

    def add(self, name: str, kind: str, start: float, end: float, forward: int | None) -> None:
        """Work of `kind` that ran start..end, launched in forward `forward` (None: outside the model)."""
        self.launches[kind] = self.launches.get(kind, 0) + 1
        start, end = max(start, self.covered), min(end, self.window[1])
        if forward is not None and forward == self.forward and start > self.covered:
            self.model_gap_us += min(start, self.window[1]) - self.covered
        busy = max(end - start, 0.0)
        self.us[kind] = self.us.get(kind, 0.0) + busy
        count, total = self.by_name.get(name, (0, 0.0))
        self.by_name[name] = (count + 1, total + busy)
        self.covered = max(self.covered, end)
        self.forward = forward


def _launch_times(events: list[TraceEvent]) -> dict[int, float]:
    """Correlation id -> when the host call launching that device work started."""
    return {e.correlation: e.start for e in events
            if e.correlation is not None and e.category not in DEVICE_CATEGORIES | HOST_CATEGORIES}


def _device_times(device: list[tuple[TraceEvent, float | None]], tally: _Tally) -> None:
    """device: the steps' device work, each with when its launch started (None: the trace lost it)."""
    for event, launch in sorted(device, key=lambda item: item[0].start):
        # device work whose launch the trace lost is taken as the model's
        forward = tally.forward if launch is None else tally.model.index(launch)
        kind = kernel_kind(event.name) if launch is None or forward is not None else SAMPLING
        tally.add(event.name, kind, event.start, event.end, forward)


def _host_times(ops: list[TraceEvent], tally: _Tally) -> None:
    outer_end = tally.window[0]
    for op in sorted(ops, key=lambda e: (e.start, -e.duration)):
        # only the outermost ops: an op inside another is part of it
        if not tally.window[0] <= op.start < tally.window[1] or op.start < outer_end:
            continue
        outer_end = op.end
        forward = tally.model.index(op.start)
        tally.add(op.name, cpu_op_kind(op.name) if forward is not None else SAMPLING, op.start, op.end, forward)
