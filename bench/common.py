"""Shared benchmark helpers: ceilings, timing, result files (run on the H200)."""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch


def median_ms(fn, warmup: int = 3, iters: int = 20) -> float:
    """Median wall time of fn() in ms, measured with CUDA events after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def graph_replay_ms(calls, timer=median_ms) -> float:
    """Milliseconds per call of `calls` captured back to back in one CUDA graph (Python launch overhead removed);
    the calls run once on a side stream first, as graph capture requires."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return timer(graph.replay) / len(calls)


# decode calls are also timed this many back to back in one graph, as an engine's decode step replays every layer's
# kernels in one graph: its launch, 3-5 us, is paid once a step, not once a call (runs te, tf)
LONG_GRAPH_CALLS = 64


def long_graph_ms(calls, timer=median_ms) -> float:
    """Milliseconds per call of LONG_GRAPH_CALLS calls in one CUDA graph, taken from `calls` in turn (input sets that
    together outgrow the L2, so that no call finds the one before's bytes there)."""
    return graph_replay_ms([calls[i % len(calls)] for i in range(LONG_GRAPH_CALLS)], timer=timer)


def kernel_ms(calls, replays: int = 5) -> float:
    """Milliseconds of GPU kernel time per call: the median of `replay_kernel_ms`. Unlike a replay's wall time it
    leaves out the gap a graph leaves between kernels (their launch), as a bandwidth figure of the kernel should."""
    per_replay = replay_kernel_ms(calls, replays)
    return per_replay[len(per_replay) // 2] if per_replay else float("nan")


def replay_kernel_ms(calls, replays: int = 5, min_graph_calls: int = 64) -> list[float]:
    """The profiler's (CUPTI) kernel durations over replays of the calls captured back to back in one CUDA graph,
    repeated to at least `min_graph_calls` calls: per replay their sum divided by the graph's calls, in ms, sorted.

    Graphs of one or two long calls replayed 20 times (run mb) timed most replays of the KDA pool kernel 8-10% slower
    than its first, in two modes (B256 H96: 824-927 us); graphs of 100 back-to-back calls (bench_kda_sustained.py,
    runs md, me) ran every call at the fast mode's time, steady from the first, at 1980 MHz without throttling, as
    did do_bench's isolated calls. Not understood; the longer graphs are what the engine replays."""
    graph_calls = list(calls) * -(-min_graph_calls // len(calls))
    graph = captured_graph(graph_calls, warm=calls)
    graph.replay()
    torch.cuda.synchronize()
    durations = profiled_kernel_us(graph, replays)
    if not durations or len(durations) % replays:
        return []
    size = len(durations) // replays
    return sorted(sum(durations[i * size:(i + 1) * size]) / len(graph_calls) / 1e3 for i in range(replays))


def captured_graph(calls, warm) -> torch.cuda.CUDAGraph:
    """`calls` captured back to back in one CUDA graph, after the `warm` calls ran eagerly (compiles, allocations)."""
    for call in warm:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


def profiled_kernel_us(graph: torch.cuda.CUDAGraph, replays: int = 1) -> list[float]:
    """The profiler's (CUPTI) durations of the kernels of `replays` replays of the graph, in us, in launch order."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    return [e.time_range.elapsed_us() for e in kernels]


def copy_calls(nbytes: int, l2_bytes: int = 60 * 2**20) -> list:
    """Elementwise copies (dst = src + 0: a kernel, also inside a CUDA graph, where `copy_` becomes a copy-engine
    memcpy node) moving nbytes (read + written) each, over enough buffer pairs to exceed the L2 three times a cycle."""
    import math

    pairs = max(1, min(64, math.ceil(3 * l2_bytes / nbytes)))
    elems = max(1, nbytes // 2 // 4)
    bufs = [(torch.randn(elems, device="cuda"), torch.empty(elems, device="cuda")) for _ in range(pairs)]
    return [lambda s=s, d=d: torch.add(s, 0.0, out=d) for s, d in bufs]


def copy_times_by_size(measure):
    """nbytes -> measure(copy_calls(nbytes)), each size measured once: the cases of one size share their copy."""
    return functools.cache(lambda nbytes: measure(copy_calls(nbytes)))


def copy_bandwidth_gbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy, bytes read + written per second (GB/s)."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), iters=10)
    return 2 * nbytes / ms / 1e6


def matmul_tflops(n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b, iters=10)
    return 2 * n ** 3 / ms / 1e9


def out_dir_argument(description: str) -> Path:
    """The one argument of the benches that take only `--out DIR`: the folder, created; torch seeded."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    return out


def write_results(out_dir: str | Path, name: str, payload: dict) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    payload = {"device": device, "torch": torch.__version__,
               "time": time.strftime("%Y-%m-%d %H:%M:%S"), **payload}
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)
