"""How the cold-cache timer shapes the bandwidth figures of the calls near a copy target, and a copy of the same bytes.

    PYTHONPATH=. python bench/bench_timers.py --out DIR

The decode-pool and AttnRes benches time with triton.testing.do_bench, which zeroes a 256 MB buffer before each
call: the call starts with the L2 full of dirty lines that it must write back while it runs. Each case here is timed
three ways, and so is a device-to-device copy of the same bytes (read + written):
  * zero_flush: do_bench as the benches use it;
  * read_flush: the L2 is refilled by reading a buffer twice its size before each call (clean lines, nothing to
    write back), then a device sleep lets the host queue the call before the GPU reaches it, and the call alone
    runs between events (run ca had no sleep: its read-flush column holds host launch time);
  * back_to_back: the case's rotating input sets captured back to back in one CUDA graph, per call (steady state,
    as a decode step replays), with no flush in between.
The copies are an elementwise kernel (dst = src + 0), not `copy_`: captured in a graph, `copy_` becomes a memcpy node
that the copy engine runs (run ca: 2675 GB/s). Cases: the KDA state pool at B64 x H{32, 96} (ours, fla 0.6.0) and
the AttnRes mix at 8192 tokens (ours, fla), the shapes of issues 3 and 5. JSON to DIR/bench_timers.json; a table
last.
"""

from __future__ import annotations

import json
import time

import torch
from triton.testing import do_bench

from bench import bench_attnres as attnres
from bench import bench_kda_decode as kda
from bench.common import copy_times_by_size, graph_replay_ms, median_ms, out_dir_argument

L2_BYTES = 60 * 2**20
DEVICE = "cuda"


def zero_flush_ms(calls) -> float:
    cycle = iter(range(10**12))
    return do_bench(lambda: calls[next(cycle) % len(calls)](), warmup=25, rep=200, return_mode="median")


def read_flush_ms(calls, reps: int = 60) -> float:
    flush = torch.ones(2 * L2_BYTES // 4, device=DEVICE)
    times = []
    for i in range(reps + 5):
        flush.sum()
        # ~0.5 ms: the host queues the call below before the GPU gets to it
        torch.cuda._sleep(1_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        calls[i % len(calls)]()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times = sorted(times[5:])
    return times[len(times) // 2]


def back_to_back_ms(calls) -> float:
    return graph_replay_ms(calls, timer=lambda fn: median_ms(fn, warmup=3, iters=15))


TIMERS = {"zero_flush": zero_flush_ms, "read_flush": read_flush_ms, "back_to_back": back_to_back_ms}


def kda_cases(fla):
    for heads in (32, 96):
        rounds, sets = kda.make_sets(64, heads)
        p = kda.make_params(heads, rounds * 64)
        unfused = [kda.unfused_inputs(s, p) for s in sets]
        nbytes = 64 * heads * kda.K * kda.V * 4 * 2
        state = p["state"]
        ours = [lambda u=u, s=s, st=state: kda.run_pool(u, s, st, (32, 1, False)) for u, s in zip(unfused, sets)]
        yield f"kda_pool B64 H{heads}", "ours", nbytes, ours
        if fla is not None:
            outs = [torch.empty_like(u["v"]) for u in unfused]
            yield f"kda_pool B64 H{heads}", "fla", nbytes, [
                lambda u=u, s=s, o=o, p=p: kda.run_fla(fla, u, s, p, p["state"], o, False)
                for u, s, o in zip(unfused, sets, outs)]


def attnres_cases():
    for sources, dim in ((2, 2304), (8, 2304), (9, 2304), (2, 7168), (8, 7168), (9, 7168)):
        nbytes = (sources + 1) * 8192 * dim * 2
        query, rms_weight, sets = attnres.make_sets(sources, 8192, dim, attnres.rotations(nbytes))
        yield f"attnres {sources}x8192x{dim}", "ours", nbytes, attnres.ours_calls(query, rms_weight, sets)
        if attnres.fused_attnres is not None:
            yield f"attnres {sources}x8192x{dim}", "fla", nbytes, attnres.fla_calls(query, rms_weight, sets)


def measure(calls) -> dict:
    calls[0]()
    torch.cuda.synchronize()
    return {name: timer(calls) * 1e3 for name, timer in TIMERS.items()}


def main() -> None:
    out = out_dir_argument(__doc__.splitlines()[0])
    started = time.time()
    rows = []
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with torch.inference_mode():
        copy_us = copy_times_by_size(measure)
        result["copy_1GiB_us"] = copy_us(2**30)
        for case, who, nbytes, calls in [*kda_cases(kda.load_fla()), *attnres_cases()]:
            copy = copy_us(nbytes)
            rows.append({"case": case, "who": who, "bytes": nbytes, "us": measure(calls), "copy_us": copy})
            del calls
            torch.cuda.empty_cache()
            result["seconds"] = time.time() - started
            (out / "bench_timers.json").write_text(json.dumps(result, indent=2))
    big = result["copy_1GiB_us"]
    print("copy 1 GiB: " + ", ".join(f"{t} {2**30 / us / 1e3:.0f} GB/s" for t, us in big.items()))
    print(f"{'case':<24} {'who':<4} " + " ".join(f"{t:>26}" for t in TIMERS))
    print(f"{'':<29}" + " ".join(f"{'us / % 1GiB copy / % same':>26}" for _ in TIMERS))
    for r in rows:
        cells = []
        for t in TIMERS:
            us = r["us"][t]
            cells.append(f"{us:8.1f} {r['bytes'] * big[t] / (2**30 * us):.0%} {r['copy_us'][t] / us:.0%}".rjust(26))
        print(f"{r['case']:<24} {r['who']:<4} " + " ".join(cells))


if __name__ == "__main__":
    main()
