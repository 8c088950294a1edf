"""RMSNorm: dayzero's `rms_norm` / `gated_rms_norm` / `add_rms_norm` ops (one Triton launch) against the same math
as torch ops (eager) and as one torch.compile'd function, and the copy ceiling.

    python -m bench.bench_norm [--out DIR]

Cases: `rms_norm` over T rows of D 2304 (Kimi-Linear's hidden size; a decoder input norm) and 7168; `gated_rms_norm`
(sigmoid, the KDA output norm) over [T, 32, 128] heads; `add_rms_norm` (the plain residual add with the next norm)
over T rows of D 2304 and 7168, also against the two launches it replaces (`x + delta`, then the `rms_norm` op); T
{1, 16, 64} (decode) and 8192 (prefill); bf16 inputs and weight, fp32 math. Every case is checked against the fp32
reference first. Times: CUDA-graph replay per call of calls rotating over enough input sets to exceed the L2 (how a
decode step replays them), for the op, the torch expression (reference.py, eager ops: the model's norms before the
op) and torch.compile of it (Inductor, one compile per shape); at 8192 rows also the kernels' own duration in a graph
of 64 calls (the profiler's) against a 1 GiB copy kernel timed the same way. Bytes, what a call must move: x (and the
gate or delta) read, y (and the sum) written, the weight read.
Targets: at decode sizes no slower than torch.compile and several times faster than eager, `add_rms_norm` faster
than the add and the norm op; >= 80% of copy at 8192.
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


# the second input of a case: none (rms), the gate (gated) or the delta added to x (add)
RMS, GATED, ADD = "rms", "gated", "add"
# what each kind's call moves, in x-sized tensors: x, y and the gate, or x, delta, the sum and y
TENSORS = {RMS: 2, GATED: 3, ADD: 4}


def make_sets(shape: tuple[int, ...], kind: str) -> list[tuple[torch.Tensor, ...]]:
    """(x, the gate or delta or None, weight) sets of one call each, enough to touch three L2s a cycle."""
    set_bytes = math.prod(shape) * 2 * TENSORS[kind]
    copies = max(1, min(512, math.ceil(3 * L2_BYTES / set_bytes)))
    sets = []
    for _ in range(copies):
        x = (torch.randn(shape, device="cuda") * 3 + 0.5).to(DTYPE)
        other = None if kind == RMS else torch.randn(shape, device="cuda", dtype=DTYPE)
        sets.append((x, other, (torch.rand(shape[-1], device="cuda") + 0.5).to(DTYPE)))
    return sets


def add_then_norm(x, delta, weight, eps, zero_centered):
    """The two launches add_rms_norm replaces: the residual add, then the rms_norm op."""
    total = x + delta
    return total, norm.rms_norm(total, weight, eps, zero_centered)


IMPLS = {
    RMS: {"op": norm.rms_norm, "torch": reference.rms_norm},
    GATED: {"op": norm.gated_rms_norm, "torch": reference.gated_rms_norm},
    ADD: {"op": norm.add_rms_norm, "torch": reference.add_rms_norm, "add_op": add_then_norm},
}


def call(s: tuple[torch.Tensor, ...], kind: str, impl: str):
    x, other, weight = s
    fn = compiled(IMPLS[kind]["torch"]) if impl == "compile" else IMPLS[kind][impl]
    if kind == RMS:
        return fn(x, weight, EPS, False)
    if kind == GATED:
        return fn(x, other, weight, EPS, "sigmoid")
    return fn(x, other, weight, EPS, False)


def error(got, expected) -> float:
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    return max(rel_err(a, b) for a, b in pairs)


def nbytes(shape: tuple[int, ...], kind: str) -> int:
    return math.prod(shape) * 2 * TENSORS[kind] + shape[-1] * 2


def graph_us(calls) -> float:
    return graph_replay_ms(calls) * 1e3


def case(name: str, shape: tuple[int, ...], kind: str, kernel_gbs: float) -> dict:
    sets = make_sets(shape, kind)
    impls = ["op", *(["add_op"] if kind == ADD else []), "torch", "compile"]
    expected = call(sets[0], kind, "torch")
    worst = max(error(call(sets[0], kind, impl), expected) for impl in impls if impl != "torch")
    if worst > 1e-2:
        raise AssertionError(f"{name}: the op or the compiled expression differs from the reference: {worst}")
    row = {"case": name, "tokens": shape[0], "rel_err": worst}
    for impl in impls:
        row[f"{impl}_graph_us"] = graph_us([lambda s=s, impl=impl: call(s, kind, impl) for s in sets])
    for impl in impls[1:]:
        row[f"vs_{impl}"] = row[f"{impl}_graph_us"] / row["op_graph_us"]
    if shape[0] > DECODE_TOKENS:
        for impl in ("op", "compile"):
            row[f"{impl}_kernel_us"] = kernel_ms([lambda s=s, impl=impl: call(s, kind, impl) for s in sets[:64]]) * 1e3
            row[f"{impl}_copy_pct"] = 100 * nbytes(shape, kind) / row[f"{impl}_kernel_us"] / 1e3 / kernel_gbs
    return row


COLUMNS = {"case": "case", "op_graph_us": "op us", "torch_graph_us": "torch eager us",
           "compile_graph_us": "torch.compile us", "vs_torch": "vs eager", "vs_compile": "vs compile"}
ADD_COLUMNS = {"case": "case", "op_graph_us": "add_rms_norm us", "add_op_graph_us": "add, then rms_norm op us",
               "torch_graph_us": "torch eager us", "compile_graph_us": "torch.compile us",
               "vs_add_op": "vs add + op", "vs_torch": "vs eager", "vs_compile": "vs compile"}
KERNEL_COLUMNS = {"op_kernel_us": "op kernel us", "op_copy_pct": "op % of copy", "compile_kernel_us":
                  "compile kernel us", "compile_copy_pct": "compile % of copy"}


def _decode_table(title: str, columns: dict, rows: list, bars: list[str]) -> dict:
    return {"title": title, "columns": columns, "rows": rows,
            "plot": {"x": "case", "y": bars, "ylabel": "us per call"}}


def _prefill_table(title: str, columns: dict, rows: list) -> dict:
    return {"title": title, "rows": rows, "columns": {**columns, **KERNEL_COLUMNS},
            "plot": {"x": "case", "y": ["op_copy_pct", "compile_copy_pct"],
                     "ylabel": "% of the copy kernel's GB/s", "hlines": [[80, "80% target"], [100, "copy"]]}}


def tables(rows: dict[tuple[str, bool], list]) -> dict:
    """rows by (fused add or not, decode or not)."""
    plain_bars = ["op_graph_us", "torch_graph_us", "compile_graph_us"]
    return {
        "decode": _decode_table("RMSNorm at decode sizes (bf16), graph replay per call", COLUMNS,
                                rows[False, True], plain_bars),
        "prefill": _prefill_table("RMSNorm at 8192 tokens (bf16)", COLUMNS, rows[False, False]),
        "add_decode": _decode_table("Residual add + RMSNorm at decode sizes (bf16), graph replay per call",
                                    ADD_COLUMNS, rows[True, True], ["op_graph_us", "add_op_graph_us", *plain_bars[1:]]),
        "add_prefill": _prefill_table("Residual add + RMSNorm at 8192 tokens (bf16)", ADD_COLUMNS, rows[True, False]),
    }


def cases() -> list[tuple[str, tuple[int, ...], str]]:
    plain = [(f"rms T{t} D{d}", (t, d), RMS) for d in (2304, 7168) for t in (1, 16, 64, 8192)]
    gated = [(f"gated T{t} [{HEADS}, {HEAD_DIM}]", (t, HEADS, HEAD_DIM), GATED) for t in (1, 16, 64, 8192)]
    added = [(f"add T{t} D{d}", (t, d), ADD) for d in (2304, 7168) for t in (1, 16, 64, 8192)]
    return plain + gated + added


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    ceilings = {"copy_gbs": copy_gbs(), "copy_kernel_gbs": copy_kernel_gbs()}
    rows = {(fused, decode): [] for fused in (False, True) for decode in (True, False)}
    for name, shape, kind in cases():
        table = rows[kind == ADD, shape[0] <= DECODE_TOKENS]
        attempt(table, name, functools.partial(case, name, shape, kind, ceilings["copy_kernel_gbs"]))
    path = write_result(args.out, "norm", tables(rows), ceilings=ceilings,
                        peer="the torch expression, eager and torch.compile'd; for add_rms_norm also the add then "
                             "the rms_norm op")
    print_tables(path)


if __name__ == "__main__":
    main()
