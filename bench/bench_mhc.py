"""mHC hyper-connections: dayzero's `mhc_pre` (projection + finish kernels) and `mhc_post`, alone and as the pair the
model runs around each sublayer, against the torch reference and the copy ceiling.

    python -m bench.bench_mhc [--out DIR]

Cases: GLM-5.3-Flash's hyper-connection (HC 4 streams, D 4096, 20 Sinkhorn steps), bf16 streams, fn in bf16 (the
checkpoint's dtype) and, at 64 and 8192 tokens, in fp32; tokens {1, 8, 16, 64} (decode) and 8192 (prefill). Every
case is checked against the fp32 reference first. Times: CUDA-graph replay per call of calls rotating over enough
input sets (streams, fn, base, scale: a decode step reads another layer's fn at each call) to exceed the L2; at
8192 tokens also the kernels' own duration in a graph of 64 calls (the profiler's) against a 1 GiB copy kernel timed
the same way. Bytes, what a call must move at least: pre = streams + fn read, the sublayer input + post + comb
written; post = streams + the sublayer output + post + comb read, the streams written; the pair (pre + post) = the
sum: one read and one write of the streams by the update, one read by the collapse. The pre kernels read the streams
twice (the projection, then the collapse once the coefficients are known): "traffic" counts that read.
The reference runs in the graph as torch ops on the same inputs (bf16 in, fp32 math).
Targets: <= 10 us a call at decode sizes, >= 80% of copy at 8192 tokens.
"""

from __future__ import annotations

import functools
import math

import torch

from bench.common import (
    L2_BYTES,
    attempt,
    copy_gbs,
    copy_kernel_gbs,
    graph_replay_ms,
    kernel_ms,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.mhc import reference
from dayzero.plugins.mhc.kernel import mhc_post_launcher, mhc_pre_launcher
from dayzero.plugins.mhc.plan import DECODE_TOKENS

HC, DIM, ITERS = 4, 4096, 20
NORM_EPS, HC_EPS = 1e-5, 1e-6
DTYPE = torch.bfloat16


def make_sets(tokens: int, fn_dtype: torch.dtype) -> list[dict]:
    """Input sets of one call each (streams, the sublayer output, fn, base, scale, post, comb), enough to touch three
    L2s a cycle."""
    m = (2 + HC) * HC
    set_bytes = tokens * HC * DIM * 2 * 2 + m * HC * DIM * fn_dtype.itemsize
    copies = max(1, min(512, math.ceil(3 * L2_BYTES / set_bytes)))
    sets = []
    for _ in range(copies):
        streams = (torch.randn(tokens, HC, DIM, device="cuda") * torch.arange(1, HC + 1, device="cuda")[:, None])
        fn = (torch.randn(m, HC * DIM, device="cuda") * 2 / (HC * DIM) ** 0.5).to(fn_dtype)
        one = {"streams": streams.to(DTYPE), "out": torch.randn(tokens, DIM, device="cuda", dtype=DTYPE), "fn": fn,
               "base": torch.randn(m, device="cuda"), "scale": torch.rand(3, device="cuda") + 0.5}
        one["post"], one["comb"] = torch.rand(tokens, HC, device="cuda"), torch.rand(tokens, HC, HC, device="cuda")
        sets.append(one)
    return sets


def pre(s: dict, impl=mhc_pre_launcher):
    return impl(s["streams"], s["fn"], s["base"], s["scale"], NORM_EPS, HC_EPS, ITERS)


def post(s: dict, impl=mhc_post_launcher):
    return impl(s["out"], s["streams"], s["post"], s["comb"])


def check(s: dict) -> float:
    """The largest relative error of pre's and post's outputs against the fp32 reference."""
    got = pre(s)
    expected = pre(s, reference.mhc_pre)
    errors = [rel_err(g, e) for g, e in zip(got, expected)]
    errors.append(rel_err(post(s), post(s, reference.mhc_post)))
    if max(errors) > 1e-2:
        raise AssertionError(f"mhc kernels differ from the reference: {errors}")
    return max(errors)


def graph_us(calls) -> float:
    return graph_replay_ms(calls) * 1e3


def nbytes(tokens: int, fn_dtype: torch.dtype) -> dict[str, int]:
    """Bytes each call must move at least, and (traffic) what the kernels move: the second read of the streams by
    mhc_pre."""
    streams, row = tokens * HC * DIM * 2, tokens * DIM * 2
    coefficients = tokens * (HC + HC * HC) * 4
    fn = (2 + HC) * HC * HC * DIM * fn_dtype.itemsize
    pre_bytes, post_bytes = streams + fn + row + coefficients, 2 * streams + row + coefficients
    return {"pre": pre_bytes, "pre_traffic": pre_bytes + streams, "post": post_bytes,
            "pair": pre_bytes + post_bytes, "pair_traffic": pre_bytes + post_bytes + streams}


def case(tokens: int, fn_dtype: torch.dtype, kernel_gbs: float) -> dict:
    sets = make_sets(tokens, fn_dtype)
    row = {"case": f"T{tokens} fn {str(fn_dtype).removeprefix('torch.')}", "tokens": tokens, "rel_err": check(sets[0])}
    row["pre_graph_us"] = graph_us([lambda s=s: pre(s) for s in sets])
    row["post_graph_us"] = graph_us([lambda s=s: post(s) for s in sets])
    row["pair_graph_us"] = graph_us([lambda s=s: (pre(s), post(s)) for s in sets])
    row["torch_pair_graph_us"] = graph_us([lambda s=s: (pre(s, reference.mhc_pre), post(s, reference.mhc_post))
                                           for s in sets])
    row["speedup"] = row["torch_pair_graph_us"] / row["pair_graph_us"]
    if tokens > DECODE_TOKENS:
        row.update(kernel_times(sets, nbytes(tokens, fn_dtype), kernel_gbs))
    return row


def kernel_times(sets: list, moved: dict, kernel_gbs: float) -> dict:
    """Kernel time a call and its share of the copy kernel's GB/s, by minimal bytes and by traffic."""
    times = {"pre": kernel_ms([lambda s=s: pre(s) for s in sets]) * 1e3,
             "post": kernel_ms([lambda s=s: post(s) for s in sets]) * 1e3}
    times["pair"] = times["pre"] + times["post"]
    row = {f"{key}_kernel_us": us for key, us in times.items()}
    for key in ("pre", "pre_traffic", "post", "pair", "pair_traffic"):
        row[f"{key}_copy_pct"] = 100 * moved[key] / times[key.removesuffix("_traffic")] / 1e3 / kernel_gbs
    return row


COLUMNS = {"case": "case", "pre_graph_us": "pre us", "post_graph_us": "post us", "pair_graph_us": "pre + post us",
           "torch_pair_graph_us": "torch reference us", "speedup": "speedup vs torch"}
PREFILL_COLUMNS = {"pre_kernel_us": "pre kernel us", "post_kernel_us": "post kernel us",
                   "pair_kernel_us": "pre + post kernel us", "pre_copy_pct": "pre % of copy",
                   "pre_traffic_copy_pct": "pre traffic % of copy", "post_copy_pct": "post % of copy",
                   "pair_copy_pct": "pre + post % of copy", "pair_traffic_copy_pct": "pre + post traffic % of copy"}


def tables(decode: list, prefill: list) -> dict:
    return {
        "decode": {"title": "mHC at decode sizes (HC 4, D 4096, bf16 streams), graph replay per call",
                   "columns": COLUMNS, "rows": decode,
                   "plot": {"x": "case", "y": ["pre_graph_us", "post_graph_us", "pair_graph_us"],
                            "ylabel": "us per call", "hlines": [[10, "10 us target"]]}},
        "prefill": {"title": "mHC at 8192 tokens (HC 4, D 4096, bf16 streams)", "rows": prefill,
                    "columns": {**COLUMNS, **PREFILL_COLUMNS},
                    "plot": {"x": "case", "y": ["pre_copy_pct", "post_copy_pct", "pair_copy_pct"],
                             "ylabel": "% of the copy kernel's GB/s", "hlines": [[80, "80% target"], [100, "copy"]]}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    ceilings = {"copy_gbs": copy_gbs(), "copy_kernel_gbs": copy_kernel_gbs()}
    decode, prefill = [], []
    cases = [(t, torch.bfloat16) for t in (1, 8, 16, 64)] + [(64, torch.float32), (8192, torch.bfloat16),
                                                            (8192, torch.float32)]
    for tokens, fn_dtype in cases:
        rows = decode if tokens <= DECODE_TOKENS else prefill
        measure = functools.partial(case, tokens, fn_dtype, ceilings["copy_kernel_gbs"])
        attempt(rows, f"T{tokens} fn {fn_dtype}", measure)
    path = write_result(args.out, "mhc", tables(decode, prefill), ceilings=ceilings, peer="torch reference (eager ops)")
    print_tables(path)


if __name__ == "__main__":
    main()
