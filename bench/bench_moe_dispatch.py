"""MoE dispatch at Kimi-Linear's shape (D 2304, 256 experts, top-8, bf16): the permutation's two paths and the
un-permutation with the shared experts' output added in its sum or by a separate add.

    python -m bench.bench_moe_dispatch [--out DIR]

Permute: the batch path (one launch; the launcher takes it up to 512 assignments, 64 tokens) against the
block-count path (three launches and two memsets; all larger batches), both checked against the reference.
Unpermute: `shared` passed to the kernel against the kernel and then `+ shared`, checked against each other.
Columns: kernels a call launches (the profiler's, memsets included), eager us (do_bench: the Python launch path
included, as the eager engine pays it) and graph us (a CUDA graph's replay: the GPU side alone).
"""

from __future__ import annotations

from unittest import mock

import torch

from bench.common import attempt, bench_ms, graph_replay_ms, parser, print_tables, rel_err, write_result
from dayzero.plugins.moe import permute_kernel, reference
from dayzero.plugins.moe.permute_kernel import permute_launcher, unpermute_launcher

DIM, EXPERTS, TOP_K = 2304, 256, 8
TOKENS = (1, 4, 16, 64, 256, 8192)


def launches(fn) -> int:
    """Kernels (and memsets) one call of fn puts on the GPU."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.device_type == DeviceType.CUDA for e in prof.events())


def timings(prefix: str, fn) -> dict:
    return {f"{prefix}_launches": launches(fn), f"{prefix}_eager_us": 1e3 * bench_ms(fn),
            f"{prefix}_graph_us": 1e3 * graph_replay_ms([fn])}


def block_count_path():
    plan = permute_kernel._permute_config
    return mock.patch.object(permute_kernel, "_permute_config", lambda *a: {**plan(*a), "BATCH_ASSIGNMENTS": 0})


def permute_row(tokens: int) -> dict:
    x = torch.randn(tokens, DIM, device="cuda", dtype=torch.bfloat16)
    ids = torch.rand(tokens, EXPERTS, device="cuda").topk(TOP_K, dim=-1).indices
    expected = reference.permute(x, ids, EXPERTS)
    row = {"case": f"T{tokens}", "tokens": tokens}
    if tokens * TOP_K <= permute_kernel._permute_config(TOP_K, DIM, x.device)["BATCH_ASSIGNMENTS"]:
        if not all(torch.equal(a, b) for a, b in zip(permute_launcher(x, ids, EXPERTS), expected)):
            raise AssertionError(f"T{tokens}: the batch permutation differs from the reference")
        row.update(timings("batch", lambda: permute_launcher(x, ids, EXPERTS)))
    with block_count_path():
        if not all(torch.equal(a, b) for a, b in zip(permute_launcher(x, ids, EXPERTS), expected)):
            raise AssertionError(f"T{tokens}: the block-count permutation differs from the reference")
        row.update(timings("blocks", lambda: permute_launcher(x, ids, EXPERTS)))
    return row


def unpermute_row(tokens: int) -> dict:
    weights = torch.rand(tokens, TOP_K, device="cuda")
    ids = torch.rand(tokens, EXPERTS, device="cuda").topk(TOP_K, dim=-1).indices
    positions = reference.permute(torch.randn(tokens, 1, device="cuda"), ids, EXPERTS)[2]
    y_sorted = torch.randn(tokens * TOP_K, DIM, device="cuda", dtype=torch.bfloat16)
    shared = torch.randn(tokens, DIM, device="cuda", dtype=torch.bfloat16)
    fused = lambda: unpermute_launcher(y_sorted, weights, positions, shared)
    separate = lambda: unpermute_launcher(y_sorted, weights, positions) + shared
    error = rel_err(fused(), separate())
    if error > 1e-2:
        raise AssertionError(f"T{tokens}: the fused sum differs from the separate add by {error}")
    return {"case": f"T{tokens}", "tokens": tokens, "rel_err": error, **timings("fused", fused),
            **timings("separate", separate)}


def tables(permutes: list, unpermutes: list) -> dict:
    def columns(a: str, b: str) -> dict:
        return {"case": "case", **{f"{p}_{k}": f"{p} {k.replace('_', ' ')}" for p in (a, b)
                                   for k in ("launches", "eager_us", "graph_us")}}

    return {
        "permute": {"title": f"Permute, D {DIM}, {EXPERTS} experts, top-{TOP_K}", "rows": permutes,
                    "columns": columns("batch", "blocks"),
                    "plot": {"x": "case", "y": ["batch_eager_us", "blocks_eager_us", "batch_graph_us",
                                                "blocks_graph_us"], "ylabel": "us", "log": True}},
        "unpermute": {"title": f"Unpermute with the shared output, D {DIM}, top-{TOP_K}", "rows": unpermutes,
                      "columns": columns("fused", "separate"),
                      "plot": {"x": "case", "y": ["fused_eager_us", "separate_eager_us", "fused_graph_us",
                                                  "separate_graph_us"], "ylabel": "us", "log": True}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    permutes, unpermutes = [], []
    with torch.inference_mode():
        for tokens in TOKENS:
            attempt(permutes, f"T{tokens}", lambda t=tokens: permute_row(t))
            attempt(unpermutes, f"T{tokens}", lambda t=tokens: unpermute_row(t))
    print_tables(write_result(args.out, "moe_dispatch", tables(permutes, unpermutes)))


if __name__ == "__main__":
    main()
