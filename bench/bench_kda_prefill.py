"""Chunked KDA prefill: dayzero's Triton kernel vs flash-linear-attention 0.6.0 `chunk_kda` on the same inputs.

Shapes from issue 3: (B=1, T=8192, H=32), (B=1, T=32768, H=96), (B=8, T=4096, H=96), K = V = 128, bf16 q/k/v/beta,
fp32 log-space g, L2 norm of q and k in the kernel, zero initial state, final state returned.
Run on the H200: `. bench/h200.sh && python3 bench/bench_kda_prefill.py --quick --out DIR` (~60 s; --quick skips
the launch sweeps).
"""

from __future__ import annotations

import argparse
import traceback
from functools import partial

import torch

from bench.common import copy_bandwidth_gbs, graph_replay_ms, matmul_tflops, median_ms, rel_err, table, write_results
from dayzero.plugins.kda.chunk_kernel import (
    DEFAULT_PAIRS,
    PAIR_PATHS,
    chunk_kda_launcher,
    chunk_states,
    intra_chunk,
)

SHAPES = [(1, 8192, 32), (8, 4096, 96), (1, 32768, 96)]
K = V = 128


def make_inputs(B, T, H):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B * T, H, K, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    g = -torch.nn.functional.softplus(torch.randn(B * T, H, K, device="cuda", generator=gen)) * 0.1
    beta = torch.rand(B * T, H, device="cuda", generator=gen).to(torch.bfloat16)
    cu = torch.arange(0, (B + 1) * T, T, device="cuda", dtype=torch.int32)
    return q, k, v, g, beta, cu


def ours(q, k, v, g, beta, cu, block_v, pairs=DEFAULT_PAIRS, wy="tiles"):
    return chunk_kda_launcher(q, k, v, g, beta, K ** -0.5, None, cu, True, True, state_block_v=block_v, pairs=pairs,
                              intra_options=WY_VARIANTS[wy])


def fla_chunk(q, k, v, g, beta, cu, B, T):
    from fla.ops.kda import chunk_kda

    shape = (B, T, *q.shape[1:])
    return chunk_kda(q.view(shape), k.view(shape), v.view(shape), g.view(shape), beta.view(B, T, -1),
                     scale=K ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=True)


# pair kernel launch settings (path, BK, num_warps, num_stages); the first is intra_chunk's default. Few, because each
# compiles for ~10-20 s. column_grid (a program per 16-column block; run aa: 0.29 ms at B1 T8192 H32) at other K
# steps, warps and stages; column (a program per chunk looping over its column blocks, the default before run aa)
# at its old default and at its best of run s (BK16 w4 s3). Off-device sm_90 builds of the column path
# (bench/triton_resources.py, bench/kda_pair_notes.md): none spills, all use wgmma; stages >= 2 pipeline the q / k / G
# tile loads through shared memory (cp.async).
PAIR_CONFIGS = [("column_grid", 32, 4, 1), ("column_grid", 16, 4, 1), ("column_grid", 64, 4, 1),
                ("column_grid", 32, 8, 1), ("column_grid", 32, 4, 2), ("column_grid", 32, 2, 1),
                ("column", 16, 4, 1), ("column", 16, 4, 3)]
# WY kernel (num_warps, BK = BV)
WY_CONFIGS = [(4, 32), (8, 64)]
# WY kernel variants for --wy (intra_chunk options): the default (a program per 32-column tile, chunk and head, 4 warps)
# or 64-column tiles at 4 or 8 warps (within 1% in run ac). Removed after losing on the H200: one program per chunk
# looping over its tiles (run ab), a program walking one tile of 8 consecutive chunks in a pipelined loop and a
# register cap of 80 (run bb: 0.27-0.36 / 3.3-4.5 ms against the default's 0.234 / 2.99).
WY_VARIANTS = {"tiles": {}, "tiles64w4": {"block_k": 64}, "tiles64w8": {"block_k": 64, "wy_warps": 8}}
# per-kernel profiler rows of ours in the final table (kernel_ms names them after the Triton kernels)
KERNEL_COLUMNS = ["_chunk_tables_kernel_ms", "gate_cumsum_kernel_ms", "intra_pairs_kernel_ms",
                  "column_grid_pairs_kernel_ms", "solve_kernel_ms", "wy_kernel_ms", "_state_kernel_ms"]


def kernel_ms(fn, iters: int = 5, width: int = 24) -> dict:
    """Device time per call of each kernel fn launches (torch profiler), to see where the time goes; kernel names
    are cut to `width` characters (fla's two intra kernels share their first 24)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    out = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if "kernel" in event.key and total > 0:
            out[f"{event.key.split('(')[0][:width]}_ms"] = round(total / iters / 1000, 3)
    return out


def pair_sweep(q, k, v, g, beta, cu) -> dict:
    """The intra-chunk kernels with each pair-kernel launch setting (the gate cumsum and WY kernels are the same in
    every run, so the differences are the pair kernel's)."""
    times = {}
    for pairs, bk, warps, stages in PAIR_CONFIGS:
        run = partial(intra_chunk, q, k, v, g, beta, K ** -0.5, cu, True, pair_block_k=bk, pair_warps=warps,
                      pair_stages=stages, pairs=pairs)
        times[f"intra_{pairs}_pk{bk}w{warps}s{stages}_ms"] = round(median_ms(run), 3)
    return times


def stage_times(q, k, v, g, beta, cu) -> dict:
    """The intra-chunk kernels under a few launch configurations and the state kernel alone."""
    times = pair_sweep(q, k, v, g, beta, cu)
    for warps, bk in WY_CONFIGS:
        run = partial(intra_chunk, q, k, v, g, beta, K ** -0.5, cu, True, wy_warps=warps, block_k=bk)
        times[f"intra_wy_w{warps}k{bk}_ms"] = round(median_ms(run), 3)
    times.update(state_sweep(q, k, v, g, beta, cu))
    times.update(kernel_ms(lambda: ours(q, k, v, g, beta, cu, None)))
    return times


def state_sweep(q, k, v, g, beta, cu) -> dict:
    """The sequential state kernel alone per V-block width: narrower blocks give more programs (B1 H32 at BV 32 is
    128 programs on 132 SMs, one 4-warp program per SM to hide each chunk step's latency)."""
    terms = intra_chunk(q, k, v, g, beta, K ** -0.5, cu, True)
    o = torch.empty_like(v)
    final = torch.empty(cu.shape[0] - 1, q.shape[1], K, V, device="cuda")
    times = {}
    for block_v, warps in ((16, 4), (32, 4), (64, 4), (32, 8)):
        times[f"state_bv{block_v}_w{warps}_ms"] = round(median_ms(
            lambda bv=block_v, w=warps: chunk_states(terms, o, None, final, cu, block_v=bv, num_warps=w)), 3)
    return times


def quick_times(B, T, H, q, k, v, g, beta, cu, with_pair_sweep: bool) -> dict:
    """Per-kernel times, and the pair and state kernel launch sweeps where asked (each compiles for ~10-20 s)."""
    times = {**pair_sweep(q, k, v, g, beta, cu), **state_sweep(q, k, v, g, beta, cu)} if with_pair_sweep else {}
    return {**times, **kernel_ms(lambda: ours(q, k, v, g, beta, cu, None))}


def path_label(pairs: str, wy: str) -> str:
    return pairs if wy == "tiles" else f"{pairs}+{wy}"


def path_times(q, k, v, g, beta, cu, paths: list[tuple[str, str]]) -> dict:
    """ours end to end with each (pair path, WY variant) of `--pairs` / `--wy`, and each one's per-kernel profile: old
    vs new in one run."""
    times = {}
    for pairs, wy in paths:
        label = path_label(pairs, wy)
        run = partial(ours, q, k, v, g, beta, cu, None, pairs, wy)
        times[f"ours_{label}_ms"] = round(median_ms(run), 3)
        times.update({f"{label}:{name}": value for name, value in kernel_ms(run).items()})
    return times


def best_pair_config(row: dict) -> str:
    """The fastest pair-kernel setting of a row's sweep, e.g. 'column_pk32w4s1 1.234' (empty without a sweep)."""
    swept = {key[len("intra_"):-len("_ms")]: value for key, value in row.items()
             if key.startswith("intra_column")}
    return "" if not swept else min(((v, key) for key, v in swept.items()))[1] + f" {min(swept.values())}"


def bench_shape(B, T, H, sweep: bool, pair_sweep_only: bool = False,
                paths: list[tuple[str, str]] | None = None, state_sweep_too: bool = False) -> dict:
    """One shape; with `paths`, each pair path timed end to end (no sweeps) and `ours` is the first of them."""
    q, k, v, g, beta, cu = make_inputs(B, T, H)
    row = {"shape": f"B{B} T{T} H{H}", "B": B, "T": T, "H": H}
    if paths:
        row.update(path_times(q, k, v, g, beta, cu, paths))
        if state_sweep_too:
            row.update(state_sweep(q, k, v, g, beta, cu))
    else:
        row.update(stage_times(q, k, v, g, beta, cu) if sweep else
                   quick_times(B, T, H, q, k, v, g, beta, cu, pair_sweep_only))
    row["best_pair_config"] = best_pair_config(row)
    pairs, wy = paths[0] if paths else (DEFAULT_PAIRS, "tiles")
    row["pairs"] = path_label(pairs, wy)
    o, s = ours(q, k, v, g, beta, cu, None, pairs, wy)
    row["ours_ms"] = row.get(f"ours_{row['pairs']}_ms") or round(median_ms(
        lambda: ours(q, k, v, g, beta, cu, None, pairs, wy)), 3)
    try:
        fo, fs = fla_chunk(q, k, v, g, beta, cu, B, T)
        row["fla_ms"] = round(median_ms(lambda: fla_chunk(q, k, v, g, beta, cu, B, T)), 3)
        row["speedup"] = round(row["fla_ms"] / row["ours_ms"], 2)
        row.update(graph_times(q, k, v, g, beta, cu, B, T, pairs, wy))
        row["err_o_vs_fla"] = f"{rel_err(o.float(), fo.reshape(o.shape).float()):.1e}"
        row["err_S_vs_fla"] = f"{rel_err(s, fs.float()):.1e}"
        # fla's stages, to set against ours (which of its intra kernels is where the gap is)
        row.update({f"fla:{name}": ms for name, ms in kernel_ms(lambda: fla_chunk(q, k, v, g, beta, cu, B, T),
                                                               width=48).items()})
    except Exception as err:  # the peer is optional on this machine
        row["fla_error"] = f"{type(err).__name__}: {err}"[:200]
        fo = None
    if T * H <= 8192 * 32 and sweep:
        row.update(fp32_errors(q, k, v, g, beta, cu, o, fo))
    return row


def graph_times(q, k, v, g, beta, cu, B, T, pairs=DEFAULT_PAIRS, wy="tiles") -> dict:
    """GPU time alone (CUDA-graph replay): a plain call also counts each side's Python launch path."""
    try:
        ours_ms = graph_replay_ms([lambda: ours(q, k, v, g, beta, cu, None, pairs, wy)])
        fla_ms = graph_replay_ms([lambda: fla_chunk(q, k, v, g, beta, cu, B, T)])
    except Exception as err:  # a capture failure must not lose the plain timings
        return {"graph_error": f"{type(err).__name__}: {err}"[:200]}
    return {"ours_graph_ms": round(ours_ms, 3), "fla_graph_ms": round(fla_ms, 3),
            "speedup_graph": round(fla_ms / ours_ms, 2)}


def fp32_errors(q, k, v, g, beta, cu, o, fla_o) -> dict:
    """ours and fla vs the fp32 reference on the same bf16 inputs (the smallest bench shape only: memory)."""
    from dayzero.plugins.kda import reference as R

    ro, _ = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), output_final_state=True,
                        use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    errors = {"err_o_vs_ref32": f"{rel_err(o.float(), ro[0]):.1e}"}
    if fla_o is not None:
        errors["fla_err_o_vs_ref32"] = f"{rel_err(fla_o.reshape(o.shape).float(), ro[0]):.1e}"
    return errors


def reference_check(paths=None) -> dict:
    """ours vs the fp32 reference on a small varlen problem (fla-independent), for every pair path (or `paths`)."""
    from dayzero.plugins.kda import reference as R

    lengths = [1000, 77, 1]
    q, k, v, g, beta, _ = make_inputs(1, sum(lengths), 8)
    cu = torch.tensor([0, *lengths], device="cuda").cumsum(0).int()
    S0 = torch.randn(len(lengths), 8, K, V, device="cuda")
    ro, rs = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=S0, output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    errors = {}
    for pairs in paths or PAIR_PATHS:
        o, s = chunk_kda_launcher(q, k, v, g, beta, K ** -0.5, S0, cu, True, True, pairs=pairs)
        suffix = "" if pairs == DEFAULT_PAIRS else f"_{pairs}"
        errors |= {f"err_o_vs_reference{suffix}": rel_err(o.float(), ro[0]),
                   f"err_S_vs_reference{suffix}": rel_err(s, rs)}
    return errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--quick", action="store_true",
                        help="ours and fla with a per-kernel breakdown, the pair and state kernel launch sweeps on "
                             "the first shape only; no WY sweep, no fp32 reference")
    parser.add_argument("--first-shape-only", action="store_true", help="B1 T8192 H32 only (with --quick: its sweeps)")
    parser.add_argument("--pairs", default="", help="comma-separated pair paths (chunk_kernel.PAIR_PATHS keys, "
                        "e.g. column_grid,column): time ours end to end with each on every shape, "
                        "with per-kernel profiles, instead of the sweeps; the first one is compared with fla")
    parser.add_argument("--wy", default="", help="comma-separated WY_VARIANTS keys: each timed end to end with "
                        "the first --pairs path (default column_grid); that path with the first of them is compared "
                        "with fla")
    parser.add_argument("--state-sweep", action="store_true", help="with --pairs / --wy: also the state kernel's "
                        "V-block sweep on every shape")
    parser.add_argument("--shapes", default="", help="comma-separated indices into SHAPES (default: all)")
    parser.add_argument("--no-reference-check", action="store_true",
                        help="skip the varlen fp32 reference check (its fp32 compiles; the GPU tests cover it)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ceilings = {"copy_GBps": round(copy_bandwidth_gbs()), "bf16_matmul_TFLOPs": round(matmul_tflops())}
    pair_paths = [p for p in args.pairs.split(",") if p]
    wy_variants = [w for w in args.wy.split(",") if w]
    if wy_variants and not pair_paths:
        pair_paths = [DEFAULT_PAIRS]
    first_wy = wy_variants[0] if wy_variants else "tiles"
    paths = [(p, first_wy) for p in pair_paths] + [(pair_paths[0], w) for w in wy_variants[1:]]
    check = {} if args.no_reference_check else reference_check(pair_paths)
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    rows = []
    with torch.inference_mode():
        for B, T, H in shapes[:1] if args.first_shape_only else shapes:
            try:
                rows.append(bench_shape(B, T, H, sweep=not args.quick, pair_sweep_only=args.quick and not rows,
                                        paths=paths, state_sweep_too=args.state_sweep))
            except Exception as err:
                rows.append({"shape": f"B{B} T{T} H{H}", "error": f"{type(err).__name__}: {err}"[:300]})
                traceback.print_exc()
            torch.cuda.empty_cache()
            # after every shape, so that a run cut short by its time limit still leaves what it measured
            write_results(args.out, "kda_prefill", {"ceilings": ceilings, "reference_check": check, "rows": rows})
            print(rows[-1], flush=True)
    print("ceilings", ceilings, "| reference check", {k: f"{v:.1e}" for k, v in check.items()})
    for row in rows:
        print(row["shape"], {key: value for key, value in row.items() if key.endswith("_ms") and "ours" not in key})
    labels = [path_label(*path) for path in paths]
    per_path = [f"ours_{p}_ms" for p in labels] + [f"{p}:{name}" for p in labels for name in KERNEL_COLUMNS]
    print(table(rows, ["shape", "pairs", *per_path, "ours_ms", "fla_ms", "speedup", "ours_graph_ms", "fla_graph_ms",
                       "speedup_graph", *KERNEL_COLUMNS, "best_pair_config",
                       "err_o_vs_fla", "err_S_vs_fla", "err_o_vs_ref32", "fla_err_o_vs_ref32", "fla_error", "error"]))


if __name__ == "__main__":
    main()
