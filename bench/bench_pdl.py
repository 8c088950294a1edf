"""What programmatic dependent launch (PDL) saves on the decode-path kernels, and what the kernels alone take.

    PYTHONPATH=. python bench/bench_pdl.py --out DIR

Each case is timed with PDL off, early and late (the launchers' `pdl` mode; dayzero/plugins/dependent_launch.py),
each mode twice in the order off early late late early off (the table gives each mode's mean; both passes are in
the JSON), every timing after 200 ms of the same calls (clocks steady):
  * graph: its rotating input sets captured back to back in one CUDA graph, per call (as a decode step replays);
  * do_bench: eager calls with do_bench's 256 MB L2 flush before each (the decode-pool bench's timer);
  * kernel: the kernels' own durations in that graph, from the profiler (CUPTI), per call: no launch gap.
A device copy (dst = src + 0, an elementwise kernel) of the same bytes gets the same three timers, and a 1 GiB copy
gives the ceiling. Outputs under each PDL mode must equal those without, bit for bit, before anything is timed.
Cases: AttnRes at decode sizes and 8192 tokens (issue 5), the KDA pool kernel and the fused step at B 1 / 64
(issue 3, slots a random permutation of the pool). JSON to DIR/bench_pdl.json; a table last.
"""

from __future__ import annotations

import json
import time

import torch
from triton.testing import do_bench

from bench import bench_attnres as attnres
from bench import bench_kda_decode as kda
from bench.common import copy_times_by_size, graph_replay_ms, kernel_ms, median_ms, out_dir_argument, rel_err
from dayzero.plugins.attnres.kernel import attnres_mix_launcher
from dayzero.plugins.dependent_launch import EARLY, LATE, OFF

DEVICE = "cuda"
ATTNRES_CASES = [(2, 1, 2304), (2, 64, 2304), (2, 64, 7168), (9, 64, 7168), (2, 8192, 2304), (9, 8192, 7168)]
KDA_CASES = [(1, 32), (1, 96), (64, 32), (64, 96)]
GRAPH_CALLS = 64
MODES = {"off": OFF, "early": EARLY, "late": LATE}


def graph_us(calls) -> float:
    return graph_replay_ms(calls[:GRAPH_CALLS], timer=lambda fn: median_ms(fn, warmup=3, iters=15)) * 1e3


def do_bench_us(calls) -> float:
    cycle = iter(range(10**12))
    return do_bench(lambda: calls[next(cycle) % len(calls)](), warmup=25, rep=200, return_mode="median") * 1e3


def kernel_us(calls) -> float:
    return kernel_ms(calls[:GRAPH_CALLS]) * 1e3


TIMERS = {"graph": graph_us, "do_bench": do_bench_us, "kernel": kernel_us}


def attnres_calls(num_sources: int, tokens: int, dim: int):
    nbytes = (num_sources + 1) * tokens * dim * 2
    query, rms_weight, sets = attnres.make_sets(num_sources, tokens, dim, attnres.rotations(nbytes))
    outs = [torch.empty_like(s[0]) for s in sets]

    def calls(**options):
        return [lambda s=s, o=o: attnres_mix_launcher(query, s, rms_weight, 1e-6, out=o, **options)
                for s, o in zip(sets, outs)]

    return f"attnres {num_sources}x{tokens}x{dim}", nbytes, calls, lambda: outs[0].clone()


def kda_calls(batch: int, heads: int, fused: bool, slot_order: str = "random"):
    """(name, bytes, calls(**launcher options), result, reset) of one KDA decode case."""
    rounds, sets = kda.make_sets(batch, heads, slot_order)
    p = kda.make_params(heads, rounds * batch)
    nbytes = batch * heads * kda.K * kda.V * 4 * 2
    state0, conv0 = p["state"].clone(), p["conv_state"].clone()
    if fused:
        def calls(**options):
            return [lambda s=s: kda.fused_kda_decode_launcher(
                s["qkv"], p["conv_weight"], p["conv_state"], s["z"], p["A_log"], p["dt_bias"], None,
                s["beta_logits"], p["state"], s["slots"], s["num_accepted"], **options) for s in sets]
    else:
        unfused = [kda.unfused_inputs(s, p) for s in sets]

        def calls(**options):
            return [lambda u=u, s=s: kda.recurrent_kda_pool_launcher(
                u["q"], u["k"], u["v"], u["g"], u["beta"], p["state"], s["slots"], s["num_accepted"],
                use_qk_l2norm_in_kernel=True, **options) for u, s in zip(unfused, sets)]

    def result():
        return p["state"].clone()

    def reset():
        p["state"].copy_(state0)
        p["conv_state"].copy_(conv0)

    order = "" if slot_order == "random" else f" {slot_order}"
    name = f"kda {'fused' if fused else 'pool'} B{batch} H{heads}{order}"
    return name, nbytes, calls, result, reset


def same_under_every_option(calls, result, reset, variants: list[dict], tolerance: float = 0.0) -> bool:
    """Every call once under each set of launcher options, from the same start each time: identical results (or
    within `tolerance`, relative, where the options change a reduction's order)."""
    outputs = []
    for options in variants:
        reset()
        for call in calls(**options):
            call()
        torch.cuda.synchronize()
        outputs.append(result())
    reset()
    if tolerance == 0.0:
        return all(torch.equal(outputs[0], o) for o in outputs[1:])
    return all(rel_err(o, outputs[0]) < tolerance for o in outputs[1:])


def measure(calls, steady_ms: float = 200.0) -> dict:
    """The three timers, after the calls have run for `steady_ms`: the first timing after an idle GPU came out up to
    8% slow in graph replay (run ld: B64 H96 246.8 against 228.9 us for the next, slower-kernel variant)."""
    started = time.perf_counter()
    while (time.perf_counter() - started) * 1e3 < steady_ms:
        for call in calls[:GRAPH_CALLS]:
            call()
        torch.cuda.synchronize()
    return {name: timer(calls) for name, timer in TIMERS.items()}


def measure_modes(name: str, calls, read, reset) -> dict:
    """Checks that every PDL mode gives the results of plain launches, then times each mode twice, in a palindrome
    (off early late late early off): a drift over the case shows as a difference between a mode's two passes, and
    each mode's mean is fair to the others."""
    if not same_under_every_option(calls, read, reset, [{"pdl": pdl} for pdl in MODES.values()]):
        raise AssertionError(f"{name}: PDL changed the results")
    row = {"identical": True}
    for mode in [*MODES, *reversed(MODES)]:
        row.setdefault(f"pdl_{mode}_passes", []).append(measure(calls(pdl=MODES[mode])))
    for mode in MODES:
        passes = row[f"pdl_{mode}_passes"]
        row[f"pdl_{mode}"] = {t: sum(p[t] for p in passes) / len(passes) for t in TIMERS}
    reset()
    return row


def cases():
    for shape in ATTNRES_CASES:
        name, nbytes, calls, result = attnres_calls(*shape)
        yield name, nbytes, calls, result, lambda: None
    for batch, heads in KDA_CASES:
        for fused in (False, True):
            yield kda_calls(batch, heads, fused)


def main() -> None:
    out = out_dir_argument(__doc__.splitlines()[0])
    started = time.time()
    rows = []
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with torch.inference_mode():
        copy_us = copy_times_by_size(measure)
        result["copy_1GiB_us"] = copy_us(2**30)
        for name, nbytes, calls, read, reset in cases():
            rows.append({"case": name, "bytes": nbytes, "copy_us": copy_us(nbytes),
                         **measure_modes(name, calls, read, reset)})
            torch.cuda.empty_cache()
            result["seconds"] = time.time() - started
            (out / "bench_pdl.json").write_text(json.dumps(result, indent=2))
    print_table(result)


def print_table(result: dict) -> None:
    big = result["copy_1GiB_us"]
    print("copy 1 GiB: " + ", ".join(f"{t} {2**30 / us / 1e3:.0f} GB/s" for t, us in big.items()))
    print(f"{'case':<28} {'timer':<9} " + " ".join(f"{m + ' us':>9} {'%':>6}" for m in MODES) + f" {'copy us':>8}")
    for r in result["rows"]:
        for t in TIMERS:
            rate = r["bytes"] * big[t] / 2**30
            cells = " ".join(f"{r['pdl_' + m][t]:9.2f} {rate / r['pdl_' + m][t]:6.1%}" for m in MODES)
            print(f"{r['case']:<28} {t:<9} {cells} {r['copy_us'][t]:8.2f}")


if __name__ == "__main__":
    main()
