"""`dayzero bench --profile`: where a decode step of the engine goes, by op kind, against each kind's share of the
decode floor.

The bench's untimed run (engine_bench.run_engine) prefills its B requests, decodes WARM_STEPS steps (CUDA graphs of
the batch captured), then N decode steps under torch.profiler (device kernels on a GPU, host ops on a CPU).
step_trace.py splits their wall time by op kind and host gaps; floor_kinds.py splits the floor the same way, at the
device's copy rate. The profiler adds host work of its own: a profiled step is slower than the timed run's.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from dayzero.contract import EngineManifest
from dayzero.model.config import ModelConfig
from dayzero.perf.floor_kinds import floor_bytes_by_kind
from dayzero.perf.op_kinds import HOST_GAPS, KINDS, MODEL_GAPS, cpu_op_kind, kernel_kind, label
from dayzero.perf.step_trace import MODEL, STEP, KindTimes, kind_times, read_trace
from dayzero.runtime.llm_engine import LLMEngine

PROFILE_STEPS = 16
WARM_STEPS = 2
# kernels (a CPU: ops) the JSON lists by name, the busiest first
TOP_KERNELS = 100


@dataclass(frozen=True)
class KindRow:
    kind: str
    ms: float  # a step
    launches: float  # a step: device kernels, copies and fills (a CPU: outermost ops)
    floor_ms: float  # the kind's share of the floor at the copy rate


@dataclass(frozen=True)
class DecodeProfile:
    batch: int
    context: int  # mean cached tokens a sequence over the profiled steps
    steps: int
    step_ms: float
    busy_ms: float  # the device's (a CPU: the host ops') time a step
    on_device: bool
    rows: tuple[KindRow, ...]  # every kind with time or floor bytes, in KINDS order; the gaps last
    # the busiest kernels (a CPU: ops): (name, kind, launches a step, ms a step)
    kernels: tuple[tuple[str, str, float, float], ...] = ()

    def to_json(self) -> dict:
        return {"batch": self.batch, "context": self.context, "steps": self.steps, "step ms": round(self.step_ms, 4),
                "busy ms": round(self.busy_ms, 4), "device": "gpu" if self.on_device else "cpu",
                "kinds": {r.kind: {"ms": round(r.ms, 4), "launches": round(r.launches, 2),
                                   "floor ms": round(r.floor_ms, 4)} for r in self.rows},
                "kernels": [{"name": name, "kind": kind, "launches": round(launches, 2), "ms": round(ms, 4)}
                            for name, kind, launches, ms in self.kernels]}

    def table(self) -> str:
        busy = "GPU busy" if self.on_device else "host ops"
        head = (f"profile, batch {self.batch} ({self.steps} decode steps, context {self.context}): step "
                f"{self.step_ms:.3f} ms, {busy} {self.busy_ms:.3f} ms")
        lines = [head, f"{'':20} {'ms':>8} {'of step':>8} {'launches':>9} {'floor ms':>9} {'floor/time':>10}"]
        for r in self.rows:
            ratio = f"{r.floor_ms / r.ms:.2f}" if r.ms > 0 and r.floor_ms > 0 else "-"
            lines.append(f"{label(r.kind):20} {r.ms:8.3f} {r.ms / self.step_ms:8.1%} {r.launches:9.1f} "
                         f"{r.floor_ms:9.3f} {ratio:>10}")
        return "\n".join(lines)


def decode_profile(cfg: ModelConfig, manifest: EngineManifest, batch: int, prompt_tokens: int, times: KindTimes,
                   copy_bytes_per_s: float) -> DecodeProfile:
    """The profile of `times` (engine_bench.run_engine's profiled steps after prompts of `prompt_tokens` tokens) with
    each kind's share of the floor; cfg: the network one rank runs (decode_traffic.py)."""
    context = prompt_tokens + WARM_STEPS + (times.steps + 1) // 2
    floor = floor_bytes_by_kind(cfg, manifest, batch, context)
    floor_ms = {kind: 1e3 * nbytes / copy_bytes_per_s for kind, nbytes in floor.items()}
    per_step = 1e-3 / times.steps
    rows = [KindRow(k, times.us.get(k, 0.0) * per_step, times.launches.get(k, 0) / times.steps, floor_ms.get(k, 0.0))
            for k in KINDS if k not in (MODEL_GAPS, HOST_GAPS) and (k in times.us or k in times.launches
                                                                  or floor_ms.get(k))]
    step_ms, busy_ms, model_gap_ms = (us * per_step for us in (times.window_us, times.busy_us, times.model_gap_us))
    host_gap_ms = step_ms - busy_ms - model_gap_ms
    rows += [KindRow(MODEL_GAPS, model_gap_ms, 0.0, 0.0), KindRow(HOST_GAPS, host_gap_ms, 0.0, 0.0)]
    return DecodeProfile(batch, context, times.steps, step_ms, busy_ms, times.on_device, tuple(rows),
                         _busiest(times, per_step))


def _busiest(times: KindTimes, per_step: float) -> tuple[tuple[str, str, float, float], ...]:
    top = sorted(times.by_name.items(), key=lambda item: -item[1][1])[:TOP_KERNELS]
    kind = kernel_kind if times.on_device else cpu_op_kind
    return tuple((name, kind(name), count / times.steps, us * per_step) for name, (count, us) in top)


def traced_steps(engine: LLMEngine, steps: int) -> KindTimes:
    """`steps` engine steps under the profiler, each in a STEP range, the model's forward in a MODEL range."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if torch.device(engine.manifest.device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    forward = engine.decode
    engine.decode = _in_range(forward, MODEL)
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function(STEP):
                    engine.step()
            if torch.device(engine.manifest.device).type == "cuda":
                torch.cuda.synchronize(engine.manifest.device)
    finally:
        engine.decode = forward
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        return kind_times(read_trace(trace))


def _in_range(fn, name: str):
    from torch.profiler import record_function

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with record_function(name):
            return fn(*args, **kwargs)

    return call
