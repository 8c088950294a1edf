"""The KDA pool decode (and the fused decode step) run back to back for a while, against a copy kernel of the same
bytes: each kernel's duration in launch order (the profiler's) and the GPU's clocks and power (nvidia-smi every
50 ms) while they run.

    PYTHONPATH=. python bench/bench_kda_sustained.py --out DIR [--case 256x96] [--calls 100] [--slot-order random]

The question (runs mb, mc): profiled back-to-back replays of the pool kernel at B256 H96 ran 8-10% slower than its
first replay and than its isolated calls under do_bench, where a copy of the same bytes did not slow down.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch

from bench.bench_kda_decode import SLOT_ORDERS, make_params, make_sets, run_fused, run_pool, unfused_inputs
from bench.common import captured_graph, copy_calls, profiled_kernel_us

SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
POOL_CONFIG = (32, 1, False)
FUSED_CONFIG = (32, 4, False)


def phase(name: str, graph: torch.cuda.CUDAGraph, replays: int, marks: list) -> dict:
    """Idle a second, then one profiled replay of the graph (from idle), `replays` unprofiled ones (for the clock
    samples) and one more profiled -> the two profiled replays' kernel durations (us, launch order)."""
    time.sleep(1.0)
    marks.append((name, time.time()))
    first = profiled_kernel_us(graph)
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    last = profiled_kernel_us(graph)
    marks.append((name + " end", time.time()))
    return {"from_idle": first, "sustained": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--case", default="256x96")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--slot-order", choices=SLOT_ORDERS, default="pool")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    B, H = (int(x) for x in args.case.split("x"))
    torch.manual_seed(0)
    rounds, sets = make_sets(B, H, args.slot_order, 1)
    p = make_params(H, rounds * B)
    unfused = [unfused_inputs(s, p) for s in sets]
    state_bytes = B * H * 128 * 128 * 4 * 2
    pool_calls = [lambda i=i: run_pool(unfused[i % rounds], sets[i % rounds], p["state"], POOL_CONFIG)
                  for i in range(args.calls)]
    pool = captured_graph(pool_calls, warm=pool_calls[:2])
    fused_calls = [lambda i=i: run_fused(sets[i % rounds], p, p["state"], p["conv_state"], FUSED_CONFIG)
                   for i in range(args.calls)]
    fused = captured_graph(fused_calls, warm=fused_calls[:2])
    copies = copy_calls(state_bytes)
    copy = captured_graph([copies[i % len(copies)] for i in range(args.calls)], warm=copies[:2])
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader", "-lms", "50"],
                           stdout=open(args.out / "smi.csv", "w"), stderr=subprocess.DEVNULL)
    marks: list = []
    try:
        result = {"case": args.case, "calls": args.calls, "state_bytes": state_bytes,
                  "pool": phase("pool", pool, 10, marks), "copy": phase("copy", copy, 10, marks),
                  "pool again": phase("pool again", pool, 10, marks), "fused": phase("fused", fused, 10, marks)}
    finally:
        time.sleep(0.3)
        smi.terminate()
    result.update(marks=marks, slot_order=args.slot_order)
    (args.out / "kda_sustained.json").write_text(json.dumps(result, indent=1))
    for name in ("pool", "copy", "pool again", "fused"):
        for when, d in result[name].items():
            picks = [d[i] for i in (0, 1, 2, 5, 10, 20, 50, len(d) - 1) if i < len(d)]
            median = sorted(d)[len(d) // 2]
            print(f"{name:10} {when:9} median {median:8.1f} us ({state_bytes / (median * 1e3):.0f} GB/s), in launch "
                  "order: " + " ".join(f"{x:.0f}" for x in picks))
    print("marks: " + ", ".join(f"{n} {t:.2f}" for n, t in marks))


if __name__ == "__main__":
    main()
