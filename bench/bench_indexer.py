"""DSA indexer kernels on the GPU: paged decode (split-N + merge) and prefill, against the machine's ceilings.

    PYTHONPATH=. python bench/bench_indexer.py --out DIR [--quick] [--sweep] [--decode-only]
        [--decode-kernels select,buffers] [--contexts 8192,32768] [--heads 64] [--caches mxfp8,bf16]

Ceilings first (device-to-device copy counting bytes read + written, bf16 8192^3 matmul), then per case: a
correctness check of the kernel against the reference on the bench inputs (a few sequences / rows of them), then
the median time (triton.testing.do_bench, which flushes the L2 before every run; decode also as a CUDA-graph replay,
as the engine runs it). Decode bytes: every cached key byte of every sequence once + q, w and the output; prefill
FLOPs: 2 * HI * DI * T * T / 2 (the causal dots).
--sweep also times a few launch configurations of each phase; --decode-kernels names the decode kernels to time
(kernel.DECODE_LAUNCHERS, e.g. select-bytes: the select kernel with MXFP8 keys loaded byte by byte; each
case once per kernel); --caches the decode index-cache formats. Results go to DIR/bench_indexer.json; a table is
printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path

import torch
import triton

from bench.common import graph_replay_ms, long_graph_ms
from dayzero.plugins.indexer import reference
from dayzero.plugins.indexer.kernel import index_topk_paged_launcher
from dayzero.plugins.paged_cache.formats import gather_index_keys, index_cache_shape
from dayzero.plugins.quant.op import mxfp8_quantize
from dayzero.plugins.quant.reference import mxfp8_dequantize

DI, TOPK, BATCH = 128, 2048, 64
DEVICE = "cuda"
E4M3_NAN_CODES = (0x7F, 0xFF)
# worst score gap (relative to the row's largest score) between the kernel's and the reference's picks with the FP8 dot
FP8_DOT_SCORE_GAP = 1e-3
# the H200's L2 is 50 MB: the long graph rotates input sets until three L2s' worth of keys lie between two uses
L2_BYTES = 60 << 20
MAX_SETS = 3


def bench_ms(fn, rep_ms: int = 100) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")


def kernel_breakdown_us(fn, runs: int = 5) -> dict:
    """Mean GPU time per call of each kernel `fn` launches (torch.profiler), e.g. split vs merge."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(runs):
                fn()
            torch.cuda.synchronize()
        totals = {}
        for event in prof.key_averages():
            total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
            if total:
                totals[event.key[:60]] = total / runs
        return totals
    except Exception as error:  # the breakdown is a diagnostic only
        return {"error": repr(error)[:200]}


def measure_ceilings() -> dict:
    src = torch.randn(256 * 2**20, device=DEVICE)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    a, b = (torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    mm_ms = bench_ms(lambda: a @ b)
    return {"copy_GBps": 2 * src.numel() * 4 / copy_ms / 1e6, "matmul_bf16_TFLOPs": 2 * 8192**3 / mm_ms / 1e9}


def random_cache(num_pages: int, quantized: bool) -> torch.Tensor:
    """Random index cache: bf16 normal keys, or MXFP8 with random e4m3 codes (no NaN) and scales near 2^0."""
    if not quantized:
        return torch.randn(index_cache_shape(num_pages, DI, False), device=DEVICE, dtype=torch.bfloat16)
    cache = torch.randint(0, 256, index_cache_shape(num_pages, DI, True), device=DEVICE, dtype=torch.uint8)
    values = cache[:, : 64 * DI]
    for code in E4M3_NAN_CODES:
        values[values == code] -= 1
    cache[:, 64 * DI :] = torch.randint(118, 128, (num_pages, 64 * DI // 32), device=DEVICE, dtype=torch.uint8)
    return cache


def paged_inputs(contexts: list[int], new: list[int], heads: int, quantized: bool, mxfp8_query: bool = False) -> dict:
    """Sequences with `contexts` cached keys (the last `new` of them the query tokens), shuffled pages; mxfp8_query:
    q quantized to MXFP8 (q_scales), as the model does over an MXFP8 cache."""
    pages_per_seq = [triton.cdiv(c, 64) for c in contexts]
    max_pages = max(pages_per_seq)
    perm = torch.randperm(sum(pages_per_seq), device=DEVICE).int()
    table = torch.zeros(len(contexts), max_pages, dtype=torch.int32, device=DEVICE)
    start = 0
    for n, count in enumerate(pages_per_seq):
        table[n, :count] = perm[start : start + count]
        start += count
    num_tokens = sum(new)
    case = dict(
        q=torch.randn(num_tokens, heads, DI, device=DEVICE, dtype=torch.bfloat16),
        w=torch.randn(num_tokens, heads, device=DEVICE) * heads**-0.5,
        index_cache=random_cache(sum(pages_per_seq), quantized), block_table=table,
        cu_seqlens=torch.tensor([0, *new], device=DEVICE).cumsum(0).int(),
        positions=torch.cat([torch.arange(c - m, c, device=DEVICE) for c, m in zip(contexts, new)]))
    if mxfp8_query:
        case["q"], case["q_scales"] = mxfp8_quantize(case["q"])
    return case


def check_rows(got: torch.Tensor, case: dict, rows: torch.Tensor, seq: int) -> dict:
    """Kernel rows `rows` (tokens of sequence `seq`) vs the reference: exact rows, and equal score lists."""
    q, w, pos = case["q"][rows], case["w"][rows], case["positions"][rows]
    q_scales = case["q_scales"][rows] if "q_scales" in case else None
    sub = dict(q=q, w=w, index_cache=case["index_cache"], block_table=case["block_table"][seq : seq + 1],
               cu_seqlens=torch.tensor([0, rows.numel()], device=DEVICE, dtype=torch.int32), positions=pos)
    expected = reference.index_topk_paged(**sub, topk=TOPK, q_scales=q_scales)
    keys = gather_index_keys(case["index_cache"], sub["block_table"][0], torch.arange(int(pos.max()) + 1,
                             device=DEVICE), DI)
    scores = reference.index_scores(q if q_scales is None else mxfp8_dequantize(q, q_scales), keys, w)
    picked, wanted = got[rows], expected
    same_layout = bool(torch.equal(picked < 0, wanted < 0))
    worst = 0.0
    for r in range(rows.numel()):
        valid = wanted[r] >= 0
        # rows list positions: a near-tie swapped by the FP8 dot shifts them, so compare the sorted scores
        a, b = scores[r, picked[r][valid].long()].sort().values, scores[r, wanted[r][valid].long()].sort().values
        worst = max(worst, float((a - b).abs().max() / scores[r].abs().max()))
    # the FP8 dot sums a block's 32 products in the tensor core at reduced precision (fp8_dot_kernel.py)
    tolerance = 1e-5 if q_scales is None else FP8_DOT_SCORE_GAP
    return {"exact_rows": float((picked == wanted).all(1).float().mean()), "same_padding": same_layout,
            "worst_score_gap": worst, "ok": same_layout and worst <= tolerance}


def run_decode(context: int, heads: int, cache: str, tokens: int, options: dict, batch: int, ceilings: dict) -> dict:
    quantized = cache != "bf16"
    case = paged_inputs([context] * batch, [tokens] * batch, heads, quantized, mxfp8_query=cache == "mxfp8")
    fn = lambda: index_topk_paged_launcher(**case, topk=TOPK, phase="decode", **options)  # noqa: E731
    got = fn()
    check = check_rows(got, case, torch.arange(tokens, device=DEVICE), 0)
    check_last = check_rows(got, case, torch.arange((batch - 1) * tokens, batch * tokens, device=DEVICE), batch - 1)
    ms = bench_ms(fn)
    breakdown = kernel_breakdown_us(fn)
    key_bytes = batch * context * (DI + DI // 32 if quantized else 2 * DI)
    io_bytes = case["q"].numel() * 2 + case["w"].numel() * 4 + got.numel() * 4 + case["block_table"].numel() * 4
    gbps = (key_bytes + io_bytes) / ms / 1e6
    graph = decode_graph_ms([fn])
    long_graph = None
    if graph is not None:  # the extra input sets only where the call can be captured at all
        sets = [case, *(paged_inputs([context] * batch, [tokens] * batch, heads, quantized,
                                     mxfp8_query=cache == "mxfp8")
                        for _ in range(min(MAX_SETS, math.ceil(3 * L2_BYTES / key_bytes)) - 1))]
        long_graph = decode_graph_ms(
            [lambda c=c: index_topk_paged_launcher(**c, topk=TOPK, phase="decode", **options) for c in sets], long=True)
    fraction_at = lambda t: None if t is None else (key_bytes + io_bytes) / t / 1e6 / ceilings["copy_GBps"]  # noqa: E731
    return {"phase": "decode", "shape": f"B{batch} ctx{context} L{tokens} HI{heads} DI{DI} k{TOPK}",
            "cache": cache, "options": options, "ms": ms, "GBps": gbps,
            "fraction": gbps / ceilings["copy_GBps"], "kernels_us": breakdown, "check": [check, check_last],
            "ok": check["ok"] and check_last["ok"], "graph_ms": graph, "graph_fraction": fraction_at(graph),
            "long_graph_ms": long_graph, "long_graph_fraction": fraction_at(long_graph)}


def decode_graph_ms(calls, long: bool = False) -> float | None:
    """A decode call as a CUDA-graph replay, as the engine runs it: the eager time also holds the launchers' host
    time where it outlasts the timer's L2 flush. `long`: per call of LONG_GRAPH_CALLS in one graph, taken from
    `calls` in turn. None for kernels that cannot be captured (the chunked decode loops on the host)."""
    try:
        return long_graph_ms(calls, bench_ms) if long else graph_replay_ms(calls, timer=bench_ms)
    except Exception as error:  # noqa: BLE001 - an eager-only kernel has no graph time
        print(f"no graph time: {type(error).__name__}: {str(error)[:120]}")
        return None


def run_prefill(length: int, context: int, heads: int, quantized: bool, options: dict, ceilings: dict) -> dict:
    """One sequence: `length` new tokens after `context` cached ones."""
    case = paged_inputs([context + length], [length], heads, quantized)
    fn = lambda: index_topk_paged_launcher(**case, topk=TOPK, phase="prefill", **options)  # noqa: E731
    got = fn()
    rows = torch.cat([torch.arange(0, 48), torch.arange(length // 2, length // 2 + 16),
                      torch.arange(length - 64, length)]).to(DEVICE)
    check = check_rows(got, case, rows, 0)
    ms = bench_ms(fn, rep_ms=250)
    flops = 2 * heads * DI * (length * context + length * length / 2)
    tflops = flops / ms / 1e9
    return {"phase": "prefill", "shape": f"T{length} ctx{context} HI{heads} DI{DI} k{TOPK}",
            "cache": "mxfp8" if quantized else "bf16", "options": options, "ms": ms, "TFLOPs": tflops,
            "fraction": tflops / ceilings["matmul_bf16_TFLOPs"], "check": [check], "ok": check["ok"]}


SWEEPS = {
    # the union length first: each block of U - K new keys costs one bitwise search (up to 32 block-wide counts)
    "select": (dict(union_keys=8192), dict(union_keys=16384), dict(block_keys=128, union_keys=8192),
               dict(block_keys=128), dict(min_chunk=8192), dict(num_warps=8, maxnreg="auto"), dict(merge_warps=4)),
    "buffers": (dict(block_keys=128), dict(block_keys=128, maxnreg=128), dict(maxnreg=None), dict(super_chunk=512),
                dict(super_chunk=2048), dict(num_warps=4, maxnreg=None), dict(min_chunk=4096),
                dict(merge_chunk=512)),
}


def decode_cases(args) -> list[tuple]:
    contexts = args.contexts or ([8192, 32768] if args.quick else [8192, 32768, 131072])
    cases = []
    for kernel in args.decode_kernels:
        named = {"decode_kernel": kernel, **args.decode_options}
        cases += [(c, h, cache, 1, named, b) for b in args.batch for c in contexts for h in args.heads
                  for cache in args.caches]
        if not args.contexts:
            cases += [(32768, 64, "mxfp8", 2, named, BATCH), (32768, 64, "mxfp8", 4, named, BATCH)]
        if args.sweep:
            # at the longest context asked for (32K by default): the selection's share grows with the keys
            context = max(args.contexts or [32768])
            cases += [(context, 64, "mxfp8", 1, {**named, **o}, BATCH) for o in SWEEPS[kernel]]
    return cases


def prefill_cases(quick: bool, sweep: bool) -> list[tuple]:
    cases = [(8192, 0, 64, True, {})] if quick else [(32768, 0, 32, True, {}), (32768, 0, 64, True, {}),
                                                     (16384, 16384, 64, True, {})]
    if sweep:
        cases += [(8192, 0, 64, True, o) for o in (
            dict(block_keys=64), dict(block_rows=128, block_keys=64), dict(num_warps=4))]
    return cases


def run_all(args) -> tuple[dict, list[dict]]:
    torch.manual_seed(0)
    ceilings = measure_ceilings()
    results = []
    jobs = [("decode", c) for c in decode_cases(args)]
    if not args.decode_only:
        jobs += [("prefill", c) for c in prefill_cases(args.quick, args.sweep)]
    for phase, params in jobs:
        started = time.time()
        try:
            result = run_decode(*params, ceilings) if phase == "decode" else run_prefill(*params, ceilings)
        except Exception as error:  # one failing case must not stop the others
            result = {"phase": phase, "params": repr(params), "error": repr(error)[-2000:],
                      "traceback": traceback.format_exc()[-4000:]}
        result["wall_s"] = time.time() - started
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k not in ("check", "traceback")}), flush=True)
        # after every case: a run cut short by its time slot keeps what it measured
        write_report(args.out, ceilings, results)
        torch.cuda.empty_cache()
    return ceilings, results


def write_report(out: Path, ceilings: dict, results: list[dict]) -> None:
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    (out / "bench_indexer.json").write_text(json.dumps({**meta, "ceilings": ceilings, "results": results}, indent=1))


def print_table(ceilings: dict, results: list[dict]) -> None:
    copy, matmul = ceilings["copy_GBps"], ceilings["matmul_bf16_TFLOPs"]
    print(f"\nceilings: copy {copy:.0f} GB/s, bf16 matmul {matmul:.0f} TFLOP/s")
    print(f"{'phase':8} {'shape':34} {'cache':6} {'options':34} {'ms':>9} {'rate':>14} {'ceil':>6} {'ok':>4} "
          f"{'graph ms':>9} {'ceil':>6} {'64-call graph ms':>16} {'ceil':>6}")
    for r in results:
        if "error" in r:
            print(f"{r['phase']:8} {r['params'][:70]:70} ERROR {r['error'][:60]}")
            continue
        rate = f"{r['GBps']:.0f} GB/s" if r["phase"] == "decode" else f"{r['TFLOPs']:.0f} TFLOP/s"
        graph = f" {r['graph_ms']:9.3f} {r['graph_fraction']:6.1%}" if r.get("graph_ms") else ""
        if r.get("long_graph_ms"):
            graph += f" {r['long_graph_ms']:16.3f} {r['long_graph_fraction']:6.1%}"
        print(f"{r['phase']:8} {r['shape']:34} {r['cache']:6} {json.dumps(r['options'])[:34]:34} {r['ms']:9.3f} "
              f"{rate:>14} {r['fraction']:6.1%} {'yes' if r['ok'] else 'NO':>4}{graph}")


def _names(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def _numbers(text: str) -> list[int]:
    return [int(name) for name in _names(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="fewer, smaller cases")
    parser.add_argument("--sweep", action="store_true", help="also time a few launch configurations")
    parser.add_argument("--decode-only", action="store_true", help="no prefill cases")
    parser.add_argument("--decode-kernels", type=_names, default=["select"], help="comma-separated decode kernels")
    parser.add_argument("--contexts", type=_numbers, default=None, help="comma-separated decode contexts")
    parser.add_argument("--heads", type=_numbers, default=[32, 64], help="comma-separated decode head counts")
    parser.add_argument("--batch", type=_numbers, default=[BATCH], help="comma-separated decode batch sizes")
    parser.add_argument("--caches", type=_names, default=["mxfp8", "bf16"],
                        help="decode index caches: mxfp8 (with an MXFP8 query, as the model runs it), mxfp8-bf16q "
                             "(MXFP8 keys, bf16 query), bf16")
    parser.add_argument("--decode-options", type=json.loads, default={},
                        help='launcher options for every decode case, as JSON: {"num_warps": 4, "maxnreg": null}')
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ceilings, results = run_all(args)
    print_table(ceilings, results)


if __name__ == "__main__":
    main()
