"""AttnRes depth-mix benchmark on the GPU: the fused Triton kernel vs fla 0.6.0 `fused_attnres`.

    PYTHONPATH=. python bench/bench_attnres.py --out DIR

Cases: sources {2, 8, 9} x tokens {1, 64, 8192} x D {2304, 7168}, bf16. Each case is checked against the
reference (fp32 torch) before timing, under every configuration it times. Times are medians of
triton.testing.do_bench:
  * eager: back-to-back launcher calls (bounded by the host-side launch cost wherever that exceeds the GPU time:
    decode sizes, and fla's 90-270 us launch path even at 8192 tokens);
  * graph: the same calls captured in one CUDA graph and replayed, per call: GPU time alone (how the engine runs
    decode); bandwidth, fractions and speedups come from it, at every size;
  * kernel: the kernel's own duration in that graph (the profiler's, bench/common.kernel_ms), without the gap a
    graph leaves between kernels, against a 1 GiB copy kernel timed the same way (`copy_kernel_ceiling_gbs`).
do_bench clears the L2 before each eager call, and inputs rotate through up to 1024 copies (at least 3x the 60 MB
L2 per cycle), so the numbers are cold-cache ones. Bandwidth counts the bytes the kernel must move: every source
read once plus the output written. The headline columns use the kernel's default
configuration (what the engine runs); the cases in SWEPT_CASES also time a sweep of configurations (sources per
tile, tiles in flight, warps, evict-first) and report the fastest, the data for tuning `default_config`. Then the
K3.1-size variants (blocks + partial form, emitted norm). JSON goes to DIR/bench_attnres.json; tables last.
`--no-sweep` skips the sweep.

    PYTHONPATH=. python bench/bench_attnres.py --sweep-cases --out DIR

times only the cases of FOCUSED_CONFIGS (those that missed a target), each under its default and a handful of
candidate configurations, by graph replay (fla's too at decode sizes); every configuration is compiled first in
parallel worker processes. JSON goes to DIR/bench_attnres_focused.json; one table row per configuration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import traceback
from pathlib import Path

import torch
from triton.testing import do_bench

from bench.common import graph_replay_ms, kernel_ms
from dayzero.plugins.attnres import reference
from dayzero.plugins.attnres.kernel import (
    DECODE_TOKENS,
    MixConfig,
    attnres_mix_blocks_launcher,
    attnres_mix_launcher,
    default_config,
)

L2_BYTES = 60 * 2**20
DTYPE = torch.bfloat16
DEVICE = "cuda"

try:
    from fla.ops.attnres import fused_attnres
except Exception as exc:  # noqa: BLE001 (any import failure means: no peer column)
    fused_attnres, FLA_MISSING = None, f"fla not importable: {exc!r}"
else:
    FLA_MISSING = None


def copy_ceiling_gbs() -> float:
    """Device-to-device copy bandwidth, bytes read + written, GB/s; also (KERNEL_CEILING) that of an elementwise copy
    kernel by its profiler duration, the ceiling of the kernel-time column."""
    src = torch.randn(2**28, device=DEVICE, dtype=DTYPE)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    nbytes = 2 * src.numel() * src.element_size()
    KERNEL_CEILING[0] = nbytes / kernel_ms([lambda: torch.add(src, 0, out=dst)]) / 1e6
    return nbytes / ms / 1e6


# GB/s of a 1 GiB elementwise copy by kernel duration (set by copy_ceiling_gbs)
KERNEL_CEILING = [float("nan")]


def rotations(bytes_per_call: int) -> int:
    return max(1, min(1024, math.ceil(3 * L2_BYTES / bytes_per_call)))


def make_sets(num_sources, tokens, dim, copies):
    query = torch.randn(dim, device=DEVICE)
    rms_weight = torch.rand(dim, device=DEVICE) + 0.5
    sets = [[torch.randn(tokens, dim, device=DEVICE, dtype=DTYPE) * (1 + i) for i in range(num_sources)]
            for _ in range(copies)]
    return query, rms_weight, sets


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def eager_ms(calls) -> float:
    cycle = itertools.cycle(calls)
    return do_bench(lambda: next(cycle)(), warmup=25, rep=200, return_mode="median")


def graph_ms(calls) -> float:
    """Per-call time of the calls captured back to back in one CUDA graph."""
    return graph_replay_ms(calls, timer=lambda fn: do_bench(fn, warmup=10, rep=200, return_mode="median"))


def ours_calls(query, rms_weight, sets, config=None):
    return [lambda s=s: attnres_mix_launcher(query, s, rms_weight, 1e-6, config=config) for s in sets]


# the cases whose config decides a target (each swept config compiles for ~1-2 s): a 2-source decode call, where fla
# is level with us, and the 8192-token calls against the 85%-of-copy target
SWEPT_CASES = {(2, 1, 2304), (2, 8192, 2304), (2, 8192, 7168), (8, 8192, 7168), (9, 8192, 7168), (9, 8192, 2304)}


def sweep_configs(tokens: int, dim: int, num_sources: int) -> list[MixConfig]:
    """The default and its neighbours. Decode sizes: sources in pairs or fours, one or two tiles ahead, the same or
    half the warps. Larger calls: the persistent kernel (pairs or fours, the same or half the warps, 1, 2 or 4
    programs per SM) against the default (run r swept the one-program-per-token kernel's neighbours)."""
    base = default_config(tokens, dim, num_sources)
    warps = sorted({max(1, base.num_warps // 2), base.num_warps})
    if tokens <= DECODE_TOKENS:
        configs = [MixConfig(tile, prefetch, w, base.stream) for tile in (2, 4) for prefetch in (1, 2) for w in warps]
    else:
        configs = [MixConfig(tile, 1, w, base.stream, persistent=per_sm) for tile in (2, 4) for w in warps
                   for per_sm in (1, 2, 4)]
    return [base] + [c for c in dict.fromkeys(configs) if c != base]


def sweep(query, rms_weight, sets, tokens, dim, timer, expected, configs=None) -> list[dict]:
    rows = []
    for config in configs or sweep_configs(tokens, dim, len(sets[0])):
        row = {**config.__dict__}
        try:
            # a candidate may not fit (shared memory of a deep pipeline): recorded, the others go on
            row["rel_err"] = rel_err(attnres_mix_launcher(query, sets[0], rms_weight, 1e-6, config=config)[0], expected)
        except Exception as exc:  # noqa: BLE001
            rows.append({**row, "us_error": repr(exc)[:200]})
            continue
        if row["rel_err"] > 1e-2:
            raise AssertionError(f"config {config} differs from the reference: {row['rel_err']}")
        timed("us", lambda config=config: timer(ours_calls(query, rms_weight, sets, config)), row)
        rows.append(row)
    return rows


def _streamed(tile: int, num_warps: int, per_sm: int) -> MixConfig:
    """A bandwidth-bound candidate: evict-first loads; per_sm > 0 persistent programs (one tile ahead across token
    boundaries), 0 one program per token (one tile ahead)."""
    return MixConfig(tile, 1, num_warps, True, per_sm)


# the register-prefetching kernels' defaults before run ca, for comparison in the same run: persistent programs
# (4 per SM, 2 warps, on rows of 2304; 2 per SM, 16 warps on rows of 7168) and one program per token in fours
_NARROW = [_streamed(2, 2, 4)]
_WIDE = [_streamed(2, 16, 2), _streamed(4, 16, 0)]
# the pipelined kernel's neighbours of the defaults (runs ca, cb): tiles copied `stages` - 1 ahead into shared memory,
# programs per SM as shared memory (228 KB) and registers allow (a tile of 2 x 4096 bf16 is 16 KB)
_NARROW_PIPELINED = [MixConfig(2, 1, 8, True, 4, 3), MixConfig(2, 1, 4, True, 4, 2), MixConfig(1, 1, 4, True, 4, 4),
                     MixConfig(2, 1, 4, True, 3, 3), MixConfig(2, 1, 2, True, 8, 3), MixConfig(2, 1, 8, True, 3, 3),
                     MixConfig(1, 1, 2, True, 8, 4)]
_WIDE_PIPELINED = [MixConfig(1, 1, 4, True, 4, 3), MixConfig(1, 1, 4, True, 3, 5), MixConfig(1, 1, 8, True, 2, 5),
                   MixConfig(2, 1, 4, True, 3, 3), MixConfig(1, 1, 4, True, 3, 4), MixConfig(1, 1, 2, True, 6, 3)]
# --sweep-cases: the cases that missed a target in run v (85% of copy at 8192 tokens; level with fla at two sources
# and decode sizes), each with its default first and then these candidates
FOCUSED_CONFIGS = {
    (2, 1, 2304): [MixConfig(2, 2, w, False) for w in (8, 16, 32)],
    (2, 64, 2304): [MixConfig(2, 2, w, False) for w in (8, 16, 32)],
    (2, 64, 7168): [MixConfig(2, 2, w, False) for w in (4, 16, 32)],
    # the two-source narrow case (81.8% of copy in run cd): cached loads (two sources, 113 MB, are twice the L2),
    # 5 programs per SM (registers allow 4: one more waits), 3 tiles ahead
    (2, 8192, 2304): _NARROW + _NARROW_PIPELINED + [MixConfig(2, 1, 4, False, 4, 3), MixConfig(2, 1, 4, True, 5, 3),
                                                    MixConfig(2, 1, 4, False, 4, 4), MixConfig(2, 1, 2, False, 8, 3)],
    (2, 8192, 7168): _WIDE + _WIDE_PIPELINED,
    # more sources on rows of 2304 (run ee: grids of 4, 5 and 10 programs per SM against the default's 8; 8 and 4
    # tie, 5 and 10 lose 10-40%): the default alone
    (8, 8192, 2304): [],
    (9, 8192, 2304): [],
    (8, 8192, 7168): _WIDE + _WIDE_PIPELINED,
    (9, 8192, 7168): _WIDE + _WIDE_PIPELINED,
}


def focused_configs(num_sources: int, tokens: int, dim: int) -> list[MixConfig]:
    base = default_config(tokens, dim, num_sources)
    return [base] + [c for c in FOCUSED_CONFIGS[(num_sources, tokens, dim)] if c != base]


def _compile_one(job) -> None:
    """Run one configuration (None: fla) once on a few tokens, so that its binary lands in the Triton disk cache. A
    persistent call on 16 tokens compiles the kernel that 8192 tokens run (the count only has to be a multiple of
    16); fla specializes on its token count, so it runs the case's own."""
    num_sources, tokens, dim, config = job
    query, rms_weight, sets = make_sets(num_sources, tokens if config is None else min(tokens, 16), dim, 1)
    try:
        with torch.inference_mode():
            if config is None:
                fused_attnres(query, sets[0], rms_weight, rms_eps=1e-6)
            else:
                attnres_mix_launcher(query, sets[0], rms_weight, 1e-6, config=config)
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a candidate that does not fit fails again, and is recorded, when timed
        pass


def warm_compile_cache(jobs, processes: int = 12) -> None:
    """Compile every configuration in parallel worker processes (each swept config takes ~1-2 s to compile, one after
    another in this process); the timing loop then loads them from the cache."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_compile_one, jobs, chunksize=1)


def run_focused(num_sources, tokens, dim, ceiling) -> dict:
    """Graph times of the default and the candidates of FOCUSED_CONFIGS (fla's too at decode sizes)."""
    bytes_per_call = (num_sources + 1) * tokens * dim * 2
    query, rms_weight, sets = make_sets(num_sources, tokens, dim, rotations(bytes_per_call))
    result = {"sources": num_sources, "tokens": tokens, "dim": dim, "bytes": bytes_per_call}
    if fused_attnres is not None and tokens <= DECODE_TOKENS:
        with torch.inference_mode():
            timed("fla_graph_us", lambda: graph_ms(fla_calls(query, rms_weight, sets)), result)
    expected = reference.attnres_mix(query, sets[0], rms_weight, 1e-6)
    result["sweep"] = sweep(query, rms_weight, sets, tokens, dim, graph_ms, expected,
                            focused_configs(num_sources, tokens, dim))
    for row in result["sweep"]:
        if "us" in row:
            row["copy_fraction"] = bytes_per_call / row["us"] / 1e3 / ceiling
    return result


FOCUSED_HEADER = f"{'N':>2} {'T':>5} {'D':>5}  {'us':>7} {'of copy':>7} {'vs fla':>7} {'vs default':>10}  config"


def print_focused(c: dict) -> None:
    """One case's rows (printed as soon as it is measured: a run cut short keeps what it printed)."""
    if "error" in c:
        print(f"{c['sources']:>2} {c['tokens']:>5} {c['dim']:>5}  ERROR {c['error'][:100]}", flush=True)
        return
    default_us = c["sweep"][0].get("us") if c["sweep"] else None
    for i, row in enumerate(c["sweep"]):
        us = row.get("us")
        vs_fla = c["fla_graph_us"] / us if us and c.get("fla_graph_us") else None
        vs_default = default_us / us if us and default_us else None
        label = ("default " if i == 0 else "") + config_label(row)
        print(f"{c['sources']:>2} {c['tokens']:>5} {c['dim']:>5}  {fmt(us, '7.1f')} "
              f"{fmt(row.get('copy_fraction'), '7.1%')} {fmt(vs_fla, '6.2f')}{'x' if vs_fla else ' '} "
              f"{fmt(vs_default, '9.2f')}{'x' if vs_default else ' '}  {label}{row.get('us_error', '')[:80]}",
              flush=True)


def fla_calls(query, rms_weight, sets, **kwargs):
    return [lambda s=s: fused_attnres(query, s, rms_weight, rms_eps=1e-6, **kwargs) for s in sets]


def check(query, rms_weight, sources) -> dict:
    expected = reference.attnres_mix(query, sources, rms_weight, 1e-6)
    errors = {"ours_rel_err": rel_err(attnres_mix_launcher(query, sources, rms_weight, 1e-6)[0], expected)}
    if fused_attnres is not None:
        errors["fla_rel_err"] = rel_err(fused_attnres(query, sources, rms_weight, rms_eps=1e-6), expected)
    if errors["ours_rel_err"] > 1e-2:
        raise AssertionError(f"ours differs from the reference: {errors}")
    return errors


def timed(name: str, fn, result: dict) -> None:
    try:
        result[name] = fn() * 1e3
    except Exception as exc:  # noqa: BLE001 (record and go on)
        result[f"{name}_error"] = repr(exc)


def run_case(num_sources, tokens, dim, ceiling, with_sweep=True) -> dict:
    bytes_per_call = (num_sources + 1) * tokens * dim * 2
    copies = rotations(bytes_per_call)
    query, rms_weight, sets = make_sets(num_sources, tokens, dim, copies)
    result = {"sources": num_sources, "tokens": tokens, "dim": dim, "dtype": "bf16", "bytes": bytes_per_call,
              "rotations": copies, **check(query, rms_weight, sets[0])}
    timed("ours_eager_us", lambda: eager_ms(ours_calls(query, rms_weight, sets)), result)
    if fused_attnres is not None:
        with torch.inference_mode():
            timed("fla_eager_us", lambda: eager_ms(fla_calls(query, rms_weight, sets)), result)
    # GPU time alone at every size: eagerly, a launcher slower than the GPU (fla's 90-270 us per call) leaves the GPU
    # idle between calls and its time counts, also at 8192 tokens
    timed("ours_graph_us", lambda: graph_ms(ours_calls(query, rms_weight, sets)), result)
    if fused_attnres is not None:
        with torch.inference_mode():
            timed("fla_graph_us", lambda: graph_ms(fla_calls(query, rms_weight, sets)), result)
    # the kernel alone (profiler durations, no launch gap), against the copy kernel timed the same way
    timed("ours_kernel_us", lambda: kernel_ms(ours_calls(query, rms_weight, sets[:64])), result)
    if "ours_kernel_us" in result:
        result["ours_kernel_copy_fraction"] = bytes_per_call / result["ours_kernel_us"] / 1e3 / KERNEL_CEILING[0]
    best = result.get("ours_graph_us", result.get("ours_eager_us"))
    if best:
        result["ours_gbs"] = bytes_per_call / best / 1e3
        result["ours_copy_fraction"] = result["ours_gbs"] / ceiling
    result["default_config"] = default_config(tokens, dim, num_sources).__dict__
    if with_sweep:
        expected = reference.attnres_mix(query, sets[0], rms_weight, 1e-6)
        result["sweep"] = sweep(query, rms_weight, sets, tokens, dim, graph_ms, expected)
        fastest = min((r for r in result["sweep"] if "us" in r), key=lambda r: r["us"], default=None)
        if fastest:
            result["best_config"] = {k: v for k, v in fastest.items() if k not in ("rel_err", "us")}
            result["best_us"] = fastest["us"]
    return result


def run_variants(tokens, dim, ceiling) -> list[dict]:
    """K3.1-sized variants: the blocks + partial form and the emitted norm (ours and fla's)."""
    num_sources = 9
    bytes_per_call = (num_sources + 1) * tokens * dim * 2
    copies = rotations(bytes_per_call)
    query, rms_weight, sets = make_sets(num_sources, tokens, dim, copies)
    blocks = [torch.stack(s[:-1]) for s in sets]
    norm_weight = torch.rand(dim, device=DEVICE) + 0.5
    timer = graph_ms
    variants = {
        "blocks+partial": [lambda b=b, s=s: attnres_mix_blocks_launcher(query, b, num_sources - 1, s[-1], rms_weight,
                                                                        1e-6) for b, s in zip(blocks, sets)],
        "emit_norm": [lambda s=s: attnres_mix_launcher(query, s, rms_weight, 1e-6, norm_weight, 1e-6) for s in sets],
    }
    if fused_attnres is not None:
        variants["fla_emit_norm"] = fla_calls(query, rms_weight, sets, output_rms_weight=norm_weight)
    rows = []
    for name, calls in variants.items():
        moved = bytes_per_call + (tokens * dim * 2 if "norm" in name else 0)
        row = {"variant": name, "sources": num_sources, "tokens": tokens, "dim": dim, "timer": timer.__name__}
        with torch.inference_mode():
            timed("us", lambda calls=calls: timer(calls), row)
        if "us" in row:
            row["gbs"] = moved / row["us"] / 1e3
            row["copy_fraction"] = row["gbs"] / ceiling
        rows.append(row)
    got, _ = attnres_mix_blocks_launcher(query, blocks[0], num_sources - 1, sets[0][-1], rms_weight, 1e-6)
    rows[0]["rel_err"] = rel_err(got, reference.attnres_mix(query, sets[0], rms_weight, 1e-6))
    return rows


def fmt(value, spec) -> str:
    """value formatted by spec, or a dash as wide as the spec's field."""
    if isinstance(value, (int, float)):
        return format(value, spec)
    return "-".rjust(int("".join(itertools.takewhile(str.isdigit, spec)) or 1))


def config_label(config: dict | None) -> str:
    if not config:
        return "-"
    kind = f"persistent{config['persistent']}/SM " if config.get("persistent") else "per-token "
    if config.get("stages"):
        kind = f"pipelined{max(1, config['persistent'])}/SM stages{config['stages']} "
    return (f"{kind}tile{config['tile']} ahead{config['prefetch']} w{config['num_warps']}"
            f"{' evict-first' if config['stream'] else ''}")


def print_tables(cases, variants, ceiling) -> None:
    print(f"\ncopy ceiling {ceiling:.0f} GB/s (read + write); {FLA_MISSING or 'peer: fla 0.6.0 fused_attnres'}")
    print("us/call: eager = back-to-back launches, graph = CUDA-graph replay per call; GB/s, fraction and speedup "
          "from the graph times")
    print(f"kernel = the kernel's own duration (profiler), of copy against a copy kernel timed so "
          f"({KERNEL_CEILING[0]:.0f} GB/s)")
    header = (f"{'N':>2} {'T':>5} {'D':>5}  {'ours eager':>10} {'ours graph':>10} {'fla eager':>10} "
              f"{'fla graph':>10} {'GB/s':>7} {'of copy':>7} {'speedup':>8} {'kernel':>7} {'of copy':>7} "
              f"{'best us':>8}  best config")
    print(header)
    for c in cases:
        if "error" in c:
            print(f"{c['sources']:>2} {c['tokens']:>5} {c['dim']:>5}  ERROR {c['error'][:80]}")
            continue
        ours = c.get("ours_graph_us", c.get("ours_eager_us"))
        fla = c.get("fla_graph_us", c.get("fla_eager_us"))
        speedup = fla / ours if ours and fla else None
        print(f"{c['sources']:>2} {c['tokens']:>5} {c['dim']:>5}  {fmt(c.get('ours_eager_us'), '10.1f')} "
              f"{fmt(c.get('ours_graph_us'), '10.1f')} {fmt(c.get('fla_eager_us'), '10.1f')} "
              f"{fmt(c.get('fla_graph_us'), '10.1f')} {fmt(c.get('ours_gbs'), '7.0f')} "
              f"{fmt(c.get('ours_copy_fraction'), '7.1%')} {fmt(speedup, '7.2f')}{'x' if speedup else ' '} "
              f"{fmt(c.get('ours_kernel_us'), '7.1f')} {fmt(c.get('ours_kernel_copy_fraction'), '7.1%')} "
              f"{fmt(c.get('best_us'), '8.1f')}  {config_label(c.get('best_config'))}")
    print(f"\n{'variant':<22} {'T':>5} {'D':>5} {'timer':>9} {'us':>9} {'GB/s':>7} {'of copy':>7}")
    for v in variants:
        print(f"{v['variant']:<22} {v['tokens']:>5} {v['dim']:>5} {v['timer']:>9} {fmt(v.get('us'), '9.1f')} "
              f"{fmt(v.get('gbs'), '7.0f')} {fmt(v.get('copy_fraction'), '7.1%')}")


def main_focused(out: Path, max_tokens: int | None = None, only: tuple | None = None) -> None:
    cases = sorted(c for c in FOCUSED_CONFIGS if (max_tokens is None or c[1] <= max_tokens) and only in (None, c))
    jobs = [(*case, config) for case in cases for config in focused_configs(*case)]
    jobs += [(*case, None) for case in cases if fused_attnres is not None and case[1] <= DECODE_TOKENS]
    warm_compile_cache(jobs)
    ceiling = copy_ceiling_gbs()
    report = {"copy_ceiling_gbs": ceiling, "peer": FLA_MISSING or "fla 0.6.0 fused_attnres", "cases": [],
              "device": torch.cuda.get_device_name()}
    print(f"copy ceiling {ceiling:.0f} GB/s (read + write); graph replay times; {report['peer']}\n{FOCUSED_HEADER}",
          flush=True)
    for case in cases:
        try:
            report["cases"].append(run_focused(*case, ceiling))
        except Exception as exc:  # noqa: BLE001 (one failing case must not stop the rest)
            report["cases"].append({"sources": case[0], "tokens": case[1], "dim": case[2], "error": repr(exc),
                                    "traceback": traceback.format_exc()})
        (out / "bench_attnres_focused.json").write_text(json.dumps(report, indent=1))
        print_focused(report["cases"][-1])
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-sweep", action="store_true", help="time the default configuration only")
    parser.add_argument("--sweep-cases", action="store_true",
                        help="only the cases of FOCUSED_CONFIGS, the default and candidates each, graph times (~2 min)")
    parser.add_argument("--decode-cases", action="store_true", help="with --sweep-cases: the decode-size cases only")
    parser.add_argument("--case", type=lambda text: tuple(int(x) for x in text.split(",")), default=None,
                        help="with --sweep-cases: only this case, as SOURCES,TOKENS,DIM")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if args.sweep_cases:
        main_focused(args.out, DECODE_TOKENS if args.decode_cases else None, args.case)
        return
    ceiling = copy_ceiling_gbs()
    report = {"copy_ceiling_gbs": ceiling, "copy_kernel_ceiling_gbs": KERNEL_CEILING[0],
              "peer": FLA_MISSING or "fla 0.6.0 fused_attnres", "cases": [], "variants": [],
              "device": torch.cuda.get_device_name()}
    for num_sources, tokens, dim in itertools.product((2, 8, 9), (1, 64, 8192), (2304, 7168)):
        try:
            swept = not args.no_sweep and (num_sources, tokens, dim) in SWEPT_CASES
            report["cases"].append(run_case(num_sources, tokens, dim, ceiling, with_sweep=swept))
        except Exception as exc:  # noqa: BLE001 (one failing case must not stop the rest)
            report["cases"].append({"sources": num_sources, "tokens": tokens, "dim": dim, "error": repr(exc),
                                    "traceback": traceback.format_exc()})
        # written after every case: a run cut short by its time slot keeps what it measured
        (args.out / "bench_attnres.json").write_text(json.dumps(report, indent=1))
        torch.cuda.empty_cache()
    for tokens in (64, 8192):
        try:
            report["variants"] += run_variants(tokens, 7168, ceiling)
        except Exception as exc:  # noqa: BLE001
            report["variants"].append({"variant": "all", "tokens": tokens, "dim": 7168, "timer": "-",
                                       "error": repr(exc), "traceback": traceback.format_exc()})
        (args.out / "bench_attnres.json").write_text(json.dumps(report, indent=1))
        torch.cuda.empty_cache()
    print_tables(report["cases"], report["variants"], ceiling)


if __name__ == "__main__":
    main()
