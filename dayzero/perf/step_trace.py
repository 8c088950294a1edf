"""Where profiled decode steps spend their time, from torch.profiler's trace: the steps' wall time split by op kind
(op_kinds.py), the rest being host gaps.

decode_profile.py opens a `dayzero.step` range around each profiled step and a `dayzero.model` range around the
model's forward in it. On a GPU the device's kernels, copies and fills are attributed: each by the host call that
launched it (a CUDA graph's kernels by the graph's launch), to its kind by name when launched inside the model's
forward, else to sampling; time where several overlap counts once, so the kinds sum to the device's busy time over the
steps. On a CPU the host's outermost ops on the steps' thread are attributed the same way. Host gaps are the steps'
wall time minus that busy time: on a GPU the time the device waits for the host.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
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

    steps: int
    window_us: float
    us: dict[str, float]  # kind -> busy time over the steps
    launches: dict[str, int]  # kind -> kernels, copies and fills (a CPU: outermost ops)
    on_device: bool

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
        i = bisect.bisect_right(self.starts, time) - 1
        return i >= 0 and time <= self.ends[i]


def kind_times(events: list[TraceEvent]) -> KindTimes:
    """Split the profiled steps of a trace by op kind (raises ValueError for a trace with no `dayzero.step` range)."""
    steps = sorted((e for e in events if e.name == STEP and e.category == HOST_RANGE), key=lambda e: e.start)
    if not steps:
        raise ValueError(f"the trace has no {STEP!r} range: no profiled decode step")
    window = (steps[0].start, steps[-1].end)
    model = _Ranges([e for e in events if e.name == MODEL and e.category == HOST_RANGE])
    device = [e for e in events if e.category in DEVICE_CATEGORIES]
    if device:
        us, launches = _device_times(device, _launch_times(events), window, model)
    else:
        us, launches = _host_times([e for e in events if e.category == HOST_OP and e.thread == steps[0].thread],
                                   window, model)
    return KindTimes(len(steps), window[1] - window[0], us, launches, bool(device))


def _launch_times(events: list[TraceEvent]) -> dict[int, float]:
    """Correlation id -> when the host call launching that device work started."""
    return {e.correlation: e.start for e in events
            if e.correlation is not None and e.category not in DEVICE_CATEGORIES | HOST_CATEGORIES}


def _device_times(device: list[TraceEvent], launched: dict[int, float], window: tuple[float, float],
                  model: _Ranges) -> tuple[dict[str, float], dict[str, int]]:
    us: dict[str, float] = {}
    launches: dict[str, int] = {}
    covered = window[0]
    for event in sorted(device, key=lambda e: e.start):
        launch = launched.get(event.correlation)
        at = event.start if launch is None else launch
        if not window[0] <= at <= window[1]:
            continue
        # device work whose launch the trace lost is taken as the model's
        kind = kernel_kind(event.name) if launch is None or at in model else SAMPLING
        launches[kind] = launches.get(kind, 0) + 1
        start, end = max(event.start, covered), min(event.end, window[1])
        if end > start:
            us[kind] = us.get(kind, 0.0) + end - start
        covered = max(covered, end)
    return us, launches


def _host_times(ops: list[TraceEvent], window: tuple[float, float],
                model: _Ranges) -> tuple[dict[str, float], dict[str, int]]:
    us: dict[str, float] = {}
    launches: dict[str, int] = {}
    outer_end = window[0]
    for op in sorted(ops, key=lambda e: (e.start, -e.duration)):
        # only the outermost ops: an op inside another is part of it
        if not window[0] <= op.start < window[1] or op.start < outer_end:
            continue
        outer_end = op.end
        kind = cpu_op_kind(op.name) if op.start in model else SAMPLING
        launches[kind] = launches.get(kind, 0) + 1
        us[kind] = us.get(kind, 0.0) + min(op.end, window[1]) - op.start
    return us, launches
