"""Shared benchmark helpers: timers, the copy and matmul ceilings, the h200-slice model, and the result file."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import traceback
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"
# a decode step's CUDA graph replays every layer's kernels back to back: decode calls are also timed this many in one
# graph, so that the graph's own launch (3-5 us) is paid once a step, not once a call
LONG_GRAPH_CALLS = 64
# inputs rotate through enough copies to exceed the L2 (50 MB on the H100 and H200) several times a cycle
L2_BYTES = 60 << 20


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose description is the module docstring, with `--out` (the results folder)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the result JSON and PNG (bench/results)")
    return p


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


def bench_ms(fn, rep_ms: int = 200) -> float:
    """triton.testing.do_bench's median in ms (it clears the L2 before every call)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")


def graph_replay_ms(calls, timer=bench_ms) -> float:
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


def long_graph_ms(calls, timer=bench_ms) -> float:
    """Milliseconds per call of LONG_GRAPH_CALLS calls in one CUDA graph, taken from `calls` in turn (input sets that
    together outgrow the L2, so that no call finds the one before's bytes there)."""
    return graph_replay_ms([calls[i % len(calls)] for i in range(LONG_GRAPH_CALLS)], timer=timer)


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


def kernel_ms(calls, replays: int = 5, min_graph_calls: int = LONG_GRAPH_CALLS) -> float:
    """Milliseconds of GPU kernel time per call: the calls captured back to back in one graph of at least
    `min_graph_calls` calls, the profiler's kernel durations summed per replay, the median replay. Unlike a replay's
    wall time it leaves out the gap a graph leaves between kernels. Graphs of one or two long calls take a slow
    mode on some replays (8-10% at the KDA pool's sizes); graphs of many calls, as the engine replays, do not."""
    graph_calls = list(calls) * -(-min_graph_calls // len(calls))
    graph = captured_graph(graph_calls, warm=calls)
    graph.replay()
    torch.cuda.synchronize()
    durations = profiled_kernel_us(graph, replays)
    if not durations or len(durations) % replays:
        return float("nan")
    size = len(durations) // replays
    per_replay = sorted(sum(durations[i * size:(i + 1) * size]) / len(graph_calls) / 1e3 for i in range(replays))
    return per_replay[len(per_replay) // 2]


def kernel_breakdown_us(fn, runs: int = 5, width: int = 48) -> dict[str, float]:
    """Mean GPU time per call of each kernel fn launches (the profiler's), by kernel name cut to `width`."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total:
            out[event.key.split("(")[0][:width]] = round(total / runs, 1)
    return out


def copy_calls(nbytes: int) -> list:
    """Elementwise copies (dst = src + 0: a kernel, also inside a CUDA graph, where `copy_` becomes a copy-engine
    memcpy node) moving nbytes (read + written) each, over enough buffer pairs to exceed the L2 three times a cycle."""
    pairs = max(1, min(64, math.ceil(3 * L2_BYTES / nbytes)))
    elems = max(1, nbytes // 2 // 4)
    bufs = [(torch.randn(elems, device="cuda"), torch.empty(elems, device="cuda")) for _ in range(pairs)]
    return [lambda s=s, d=d: torch.add(s, 0.0, out=d) for s, d in bufs]


@functools.cache
def copy_kernel_ms(nbytes: int) -> float:
    """Kernel time of an elementwise copy moving nbytes, timed as kernel_ms times the benchmarked kernels."""
    return kernel_ms(copy_calls(nbytes))


def copy_gbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy, bytes read + written per second (GB/s), by do_bench."""
    src = torch.randn(nbytes // 8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / bench_ms(lambda: dst.copy_(src)) / 1e6


def copy_kernel_gbs(nbytes: int = 1 << 30) -> float:
    """The same by kernel time (an elementwise copy kernel of 1 GiB): the ceiling of kernel-time columns."""
    return nbytes / copy_kernel_ms(nbytes) / 1e6


def matmul_tflops(n: int = 8192) -> float:
    """bf16 n^3 matmul (cuBLAS) TFLOP/s."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2 * n**3 / bench_ms(lambda: a @ b) / 1e9


def attempt(rows: list, label: str, fn) -> None:
    """Append fn()'s row, or the case's error (printed) so that the other cases still run."""
    try:
        rows.append(fn())
    except Exception as error:  # noqa: BLE001 - one failing case must not stop the others
        traceback.print_exc()
        rows.append({"case": label, "error": f"{type(error).__name__}: {error}"[:300]})
    torch.cuda.empty_cache()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def gpu_name() -> str:
    """H200, H100, ... (the card's model), or CPU."""
    if not torch.cuda.is_available():
        return "CPU"
    name = torch.cuda.get_device_name()
    return next((card for card in ("H200", "H100", "B200", "A100") if card in name), name)


def commit() -> str | None:
    """The measured tree's commit: BENCH_COMMIT, else the checkout's HEAD (None where neither is known)."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=Path(__file__).parent, text=True,
                              capture_output=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def command(benchmark: str) -> str:
    """The command line that measured a result, without its --out."""
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--out" or arg.startswith("--out="):
            skip = arg == "--out"
            continue
        args.append(arg)
    return " ".join([f"python -m bench.bench_{benchmark}", *args])


def write_result(out: Path, benchmark: str, tables: dict, **meta) -> Path:
    """out/<benchmark>.json: the card, the commit, the software, `meta` (ceilings, peer) and the tables, each
    {"title", "columns": {key: header}, "rows": [...], "plot": {...} (optional, see plot.py)}; then its PNG."""
    software = {"torch": torch.__version__, **meta.pop("software", {})}
    try:
        import triton

        software["triton"] = triton.__version__
    except ImportError:
        pass
    payload = {"benchmark": benchmark, "command": command(benchmark), "gpu": gpu_name(),
               "commit": commit(), "software": software, **meta, "tables": tables}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{benchmark}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    from bench import plot

    try:
        plot.render(path)
    except ImportError as error:
        print(f"no plot ({error}): install matplotlib, then `python -m bench.plot {path}`")
    return path


def print_tables(path: Path) -> None:
    """The result file's tables as text (plot.py's markdown)."""
    from bench import plot

    print(plot.markdown(json.loads(Path(path).read_text())))


def h200_slice_config(num_layers: int | None = None):
    """The bundled h200-slice config (K3.1 width), optionally cut to its first KDA layers and first MLA layer."""
    from dayzero.model.config import ModelConfig
    from dayzero.paths import bundled_config

    data = json.loads(bundled_config("h200-slice").read_text())
    text = data["text_config"]
    if num_layers is not None:
        attn = text["linear_attn_config"]
        pattern = ["kda" if i + 1 in attn["kda_layers"] else "mla" for i in range(text["num_hidden_layers"])]
        kinds = [k for k in pattern if k == "kda"][: max(1, num_layers - 1)] + ["mla"]
        attn["kda_layers"] = [i + 1 for i, k in enumerate(kinds) if k == "kda"]
        attn["full_attn_layers"] = [i + 1 for i, k in enumerate(kinds) if k == "mla"]
        text["num_hidden_layers"] = len(kinds)
        for key in ("layer_types", "mlp_layer_types"):
            text.pop(key, None)
    return ModelConfig.from_dict(data)


def h200_slice_model(num_layers: int | None = None, seed: int = 0, dtype=torch.bfloat16, device: str = "cuda"):
    """An h200-slice model with random weights built on the device (no checkpoint on disk)."""
    from dayzero.model.random_init import init_random_
    from dayzero.model.weights import build_empty

    model = build_empty(h200_slice_config(num_layers), dtype, device)
    init_random_(model, seed)
    return model.eval()
