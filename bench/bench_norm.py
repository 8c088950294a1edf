"""RMSNorm: dayzero's `rms_norm` / `gated_rms_norm` ops (one Triton launch) against the same math as torch ops
(eager) and as one torch.compile'd function, and the copy ceiling.

    python -m bench.bench_norm [--out DIR]

Cases: `rms_norm` over T rows of D 2304 (Kimi-Linear's hidden size; a decoder input norm) and 7168; `gated_rms_norm`
(sigmoid, the KDA output norm) over [T, 32, 128] heads; T {1, 16, 64} (decode) and 8192 (prefill); bf16 inputs and
weight, fp32 math. Every case is checked against the fp32 reference first. Times: CUDA-graph replay per call of calls
rotating over enough input sets to exceed the L2 (how a decode step replays them), for the op, the torch expression
(reference.py, eager ops: the model's norms before the op) and torch.compile of it (Inductor, one compile per shape);
at 8192 rows also the kernels' own duration in a graph of 64 calls (the profiler's) against a 1 GiB copy kernel timed
the same way. Bytes, what a call must move: x (and the gate) read, y written, the weight read.
Targets: at decode sizes no slower than torch.compile and several times faster than eager; >= 80% of copy at 8192.
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
from dayzero.plugins import norm
from dayzero.plugins.norm import reference

DTYPE = torch.bfloat16
EPS = 1e-6
HEADS, HEAD_DIM = 32, 128
DECODE_TOKENS = 64
# one compiled function serves every case's shape (dynamic=False: a kernel specialized per shape)
RECOMPILE_LIMIT = 64


@functools.cache
def compiled(fn):
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, dynamic=False)


def make_sets(shape: tuple[int, ...], gated: bool) -> list[tuple[torch.Tensor, ...]]:
    """(x, gate or None, weight) sets of one call each, enough to touch three L2s a cycle."""
    set_bytes = math.prod(shape) * 2 * (3 if gated else 2)
    copies = max(1, min(512, math.ceil(3 * L2_BYTES / set_bytes)))
    sets = []
    for _ in range(copies):
        x = (torch.randn(shape, device="cuda") * 3 + 0.5).to(DTYPE)
        gate = torch.randn(shape, device="cuda", dtype=DTYPE) if gated else None
        sets.append((x, gate, (torch.rand(shape[-1], device="cuda") + 0.5).to(DTYPE)))
    return sets


def call(s: tuple[torch.Tensor, ...], impl: str):
    x, gate, weight = s
    if gate is None:
        fn = {"op": norm.rms_norm, "torch": reference.rms_norm, "compile": compiled(reference.rms_norm)}[impl]
        return fn(x, weight, EPS, False)
    fn = {"op": norm.gated_rms_norm, "torch": reference.gated_rms_norm,
          "compile": compiled(reference.gated_rms_norm)}[impl]
    return fn(x, gate, weight, EPS, "sigmoid")


def nbytes(shape: tuple[int, ...], gated: bool) -> int:
    return math.prod(shape) * 2 * (3 if gated else 2) + shape[-1] * 2


def graph_us(calls) -> float:
    return graph_replay_ms(calls) * 1e3


def case(name: str, shape: tuple[int, ...], gated: bool, kernel_gbs: float) -> dict:
    sets = make_sets(shape, gated)
    expected = call(sets[0], "torch")
    error = max(rel_err(call(sets[0], impl), expected) for impl in ("op", "compile"))
    if error > 1e-2:
        raise AssertionError(f"{name}: the op or the compiled expression differs from the reference: {error}")
    row = {"case": name, "tokens": shape[0], "rel_err": error}
    for impl in ("op", "torch", "compile"):
        row[f"{impl}_graph_us"] = graph_us([lambda s=s, impl=impl: call(s, impl) for s in sets])
    row["vs_torch"] = row["torch_graph_us"] / row["op_graph_us"]
    row["vs_compile"] = row["compile_graph_us"] / row["op_graph_us"]
    if shape[0] > DECODE_TOKENS:
        for impl in ("op", "compile"):
            row[f"{impl}_kernel_us"] = kernel_ms([lambda s=s, impl=impl: call(s, impl) for s in sets[:64]]) * 1e3
            row[f"{impl}_copy_pct"] = 100 * nbytes(shape, gated) / row[f"{impl}_kernel_us"] / 1e3 / kernel_gbs
    return row


COLUMNS = {"case": "case", "op_graph_us": "op us", "torch_graph_us": "torch eager us",
           "compile_graph_us": "torch.compile us", "vs_torch": "vs eager", "vs_compile": "vs compile"}


def tables(decode: list, prefill: list) -> dict:
    return {
        "decode": {"title": "RMSNorm at decode sizes (bf16), graph replay per call", "columns": COLUMNS,
                   "rows": decode,
                   "plot": {"x": "case", "y": ["op_graph_us", "torch_graph_us", "compile_graph_us"],
                            "ylabel": "us per call"}},
        "prefill": {"title": "RMSNorm at 8192 tokens (bf16)", "rows": prefill,
                    "columns": {**COLUMNS, "op_kernel_us": "op kernel us", "op_copy_pct": "op % of copy",
                                "compile_kernel_us": "compile kernel us", "compile_copy_pct": "compile % of copy"},
                    "plot": {"x": "case", "y": ["op_copy_pct", "compile_copy_pct"],
                             "ylabel": "% of the copy kernel's GB/s", "hlines": [[80, "80% target"], [100, "copy"]]}},
    }


def cases() -> list[tuple[str, tuple[int, ...], bool]]:
    plain = [(f"rms T{t} D{d}", (t, d), False) for d in (2304, 7168) for t in (1, 16, 64, 8192)]
    gated = [(f"gated T{t} [{HEADS}, {HEAD_DIM}]", (t, HEADS, HEAD_DIM), True) for t in (1, 16, 64, 8192)]
    return plain + gated


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    ceilings = {"copy_gbs": copy_gbs(), "copy_kernel_gbs": copy_kernel_gbs()}
    decode, prefill = [], []
    for name, shape, gated in cases():
        rows = decode if shape[0] <= DECODE_TOKENS else prefill
        attempt(rows, name, functools.partial(case, name, shape, gated, ceilings["copy_kernel_gbs"]))
    path = write_result(args.out, "norm", tables(decode, prefill), ceilings=ceilings,
                        peer="the torch expression, eager and torch.compile'd")
    print_tables(path)


if __name__ == "__main__":
    main()
