"""DSA indexer over the paged index cache: dayzero's `index_topk_paged` op (decode: split kernel + merge; prefill)
against the copy and bf16 matmul ceilings.

    python -m bench.bench_indexer [--out DIR]

Decode: B64 sequences with 8K / 32K / 128K cached keys, one query token each, HI 32 or 64 heads, DI 128, top-2048,
shuffled pages; an MXFP8 cache (132 B a key, the query quantized to MXFP8 as the model does) or a BF16 one (256 B).
Bytes: every cached key byte once + q, w, the indices and the block table. Timed as CUDA-graph replays (one call a
graph, and 64 calls a graph over input sets that outgrow the L2, as a decode step runs them), with the split and
merge kernels' times from the profiler. Then small batches (B1 / B8, HI 64) and speculative verify rows (2 and 4
query tokens a sequence), and prefill (FLOPs: the causal dots, 2 * HI * DI * new * (cached + new / 2)). Every case
is checked against the reference's picks (compared by score: the FP8 dot may swap near-ties) on two sequences first.
Target: decode >= 60% of copy.
"""

from __future__ import annotations

import math

import torch
import triton

from bench.common import (
    L2_BYTES,
    attempt,
    bench_ms,
    copy_gbs,
    graph_replay_ms,
    kernel_breakdown_us,
    long_graph_ms,
    matmul_tflops,
    parser,
    print_tables,
    write_result,
)
from dayzero.plugins.indexer import index_topk_paged, reference
from dayzero.plugins.paged_cache.formats import gather_index_keys, index_cache_shape
from dayzero.plugins.quant.op import mxfp8_quantize
from dayzero.plugins.quant.reference import mxfp8_dequantize

DI, TOPK = 128, 2048
E4M3_NAN_CODES = (0x7F, 0xFF)
# worst score gap (relative to the row's largest score) between the kernel's and the reference's picks: the FP8 dot
# sums a block's 32 products in the tensor core at reduced precision
FP8_DOT_SCORE_GAP = 1e-3
B64_CASES = [(cache, heads, keys) for cache in ("mxfp8", "bf16") for heads in (32, 64)
             for keys in (8192, 32768, 131072)]
# (batch, keys, query tokens a sequence), MXFP8, HI 64
SMALL_CASES = [(1, 32768, 1), (1, 131072, 1), (8, 32768, 1), (8, 131072, 1), (64, 32768, 2), (64, 32768, 4)]
# (new tokens, cached tokens, heads), MXFP8
PREFILL_CASES = [(32768, 0, 32), (32768, 0, 64), (16384, 16384, 64)]


def random_cache(num_pages: int, quantized: bool) -> torch.Tensor:
    """Random index cache: bf16 normal keys, or MXFP8 with random e4m3 codes (no NaN) and scales near 2^0."""
    if not quantized:
        return torch.randn(index_cache_shape(num_pages, DI, False), device="cuda", dtype=torch.bfloat16)
    cache = torch.randint(0, 256, index_cache_shape(num_pages, DI, True), device="cuda", dtype=torch.uint8)
    values = cache[:, : 64 * DI]
    for code in E4M3_NAN_CODES:
        values[values == code] -= 1
    cache[:, 64 * DI :] = torch.randint(118, 128, (num_pages, 64 * DI // 32), device="cuda", dtype=torch.uint8)
    return cache


def paged_inputs(contexts: list[int], new: list[int], heads: int, quantized: bool) -> dict:
    """Sequences with `contexts` cached keys (the last `new` of them the query tokens), shuffled pages; over an MXFP8
    cache the query is MXFP8 too."""
    pages_per_seq = [triton.cdiv(c, 64) for c in contexts]
    perm = torch.randperm(sum(pages_per_seq), device="cuda").int()
    table = torch.zeros(len(contexts), max(pages_per_seq), dtype=torch.int32, device="cuda")
    start = 0
    for n, count in enumerate(pages_per_seq):
        table[n, :count] = perm[start : start + count]
        start += count
    case = dict(q=torch.randn(sum(new), heads, DI, device="cuda", dtype=torch.bfloat16),
                w=torch.randn(sum(new), heads, device="cuda") * heads**-0.5,
                index_cache=random_cache(sum(pages_per_seq), quantized), block_table=table,
                cu_seqlens=torch.tensor([0, *new], device="cuda").cumsum(0).int(),
                positions=torch.cat([torch.arange(c - m, c, device="cuda") for c, m in zip(contexts, new)]),
                q_scales=None)
    if quantized:
        case["q"], case["q_scales"] = mxfp8_quantize(case["q"])
    return case


def run(case: dict) -> torch.Tensor:
    return index_topk_paged(case["q"], case["w"], case["index_cache"], case["block_table"], case["cu_seqlens"],
                            case["positions"], TOPK, None, case["q_scales"])


def check_rows(got: torch.Tensor, case: dict, seq: int) -> None:
    """The kernel's rows of sequence `seq` against the reference: the same padding, the same picked scores."""
    cu = case["cu_seqlens"]
    rows = torch.arange(int(cu[seq]), int(cu[seq + 1]), device="cuda")
    q, w, pos = case["q"][rows], case["w"][rows], case["positions"][rows]
    q_scales = case["q_scales"][rows] if case["q_scales"] is not None else None
    table = case["block_table"][seq : seq + 1]
    expected = reference.index_topk_paged(q, w, case["index_cache"], table,
                                          torch.tensor([0, rows.numel()], device="cuda", dtype=torch.int32), pos,
                                          topk=TOPK, q_scales=q_scales)
    keys = gather_index_keys(case["index_cache"], table[0], torch.arange(int(pos.max()) + 1, device="cuda"), DI)
    scores = reference.index_scores(q if q_scales is None else mxfp8_dequantize(q, q_scales), keys, w)
    picked = got[rows]
    if not torch.equal(picked < 0, expected < 0):
        raise AssertionError(f"sequence {seq}: the padding differs from the reference")
    tolerance = 1e-5 if q_scales is None else FP8_DOT_SCORE_GAP
    for r in range(rows.numel()):
        valid = expected[r] >= 0
        a = scores[r, picked[r][valid].long()].sort().values
        b = scores[r, expected[r][valid].long()].sort().values
        if float((a - b).abs().max() / scores[r].abs().max()) > tolerance:
            raise AssertionError(f"sequence {seq}: picked scores differ from the reference's")


def decode_row(batch: int, keys: int, tokens: int, heads: int, cache: str, copy: float) -> dict:
    quantized = cache == "mxfp8"
    make = lambda: paged_inputs([keys] * batch, [tokens] * batch, heads, quantized)  # noqa: E731
    case = make()
    got = run(case)
    check_rows(got, case, 0)
    check_rows(got, case, batch - 1)
    key_bytes = batch * keys * (DI + DI // 32 if quantized else 2 * DI)
    io_bytes = case["q"].numel() * 2 + case["w"].numel() * 4 + got.numel() * 4 + case["block_table"].numel() * 4
    nbytes = key_bytes + io_bytes
    sets = [case] + [make() for _ in range(min(3, math.ceil(3 * L2_BYTES / key_bytes)) - 1)]
    kernels = kernel_breakdown_us(lambda: run(case))
    row = {"case": f"B{batch} {cache.upper()} HI{heads} {keys // 1024}K" + (f" L{tokens}" if tokens > 1 else ""),
           "batch": batch, "cache": cache, "heads": heads, "keys": keys, "tokens": tokens,
           "graph_ms": graph_replay_ms([lambda: run(case)]),
           "long_graph_ms": long_graph_ms([lambda c=c: run(c) for c in sets]),
           "split_us": sum(us for name, us in kernels.items() if "merge" not in name),
           "merge_us": sum(us for name, us in kernels.items() if "merge" in name)}
    for key in ("graph", "long_graph"):
        row[f"{key}_copy_pct"] = 100 * nbytes / row[f"{key}_ms"] / 1e6 / copy
    return row


def prefill_row(new: int, cached: int, heads: int, matmul: float) -> dict:
    case = paged_inputs([cached + new], [new], heads, True)
    got = run(case)
    check_rows(got[: min(new, 64)], {**case, "cu_seqlens": torch.tensor([0, min(new, 64)], device="cuda").int()}, 0)
    ms = bench_ms(lambda: run(case), rep_ms=250)
    tflops = 2 * heads * DI * (new * cached + new * new / 2) / ms / 1e9
    return {"case": f"T{new} after {cached} HI{heads}", "ms": ms, "tflops": tflops, "matmul_pct": 100 * tflops / matmul}



DECODE_COLUMNS = {"case": "case", "graph_ms": "graph ms", "graph_copy_pct": "% of copy",
                  "long_graph_ms": "64-call graph ms", "long_graph_copy_pct": "% of copy, 64-call graph",
                  "split_us": "split us", "merge_us": "merge us"}


def tables(b64: list, small: list, prefill: list) -> dict:
    return {
        "decode": {"title": "Indexer decode, B64, DI 128, top-2048", "rows": b64, "columns": DECODE_COLUMNS,
                   "plot": {"x": "case", "y": ["graph_copy_pct", "long_graph_copy_pct"], "ylabel": "% of copy GB/s",
                            "hlines": [[60, "60% target"]]}},
        "small": {"title": "Indexer decode, small batches and verify rows (MXFP8, HI 64)", "rows": small,
                  "columns": DECODE_COLUMNS},
        "prefill": {"title": "Indexer prefill, MXFP8", "rows": prefill,
                    "columns": {"case": "case", "ms": "ms", "tflops": "TFLOP/s", "matmul_pct": "% of matmul"}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    ceilings = {"copy_gbs": copy_gbs(), "bf16_matmul_tflops": matmul_tflops()}
    b64, small, prefill = [], [], []
    with torch.inference_mode():
        for cache, heads, keys in B64_CASES:
            attempt(b64, f"B64 {cache} HI{heads} {keys}", lambda c=cache, h=heads, k=keys: decode_row(
                64, k, 1, h, c, ceilings["copy_gbs"]))
        for batch, keys, tokens in SMALL_CASES:
            attempt(small, f"B{batch} {keys} L{tokens}", lambda b=batch, k=keys, t=tokens: decode_row(
                b, k, t, 64, "mxfp8", ceilings["copy_gbs"]))
        for new, cached, heads in PREFILL_CASES:
            attempt(prefill, f"T{new} after {cached} HI{heads}", lambda n=new, c=cached, h=heads: prefill_row(
                n, c, h, ceilings["bf16_matmul_tflops"]))
    path = write_result(args.out, "indexer", tables(b64, small, prefill), ceilings=ceilings)
    print_tables(path)


if __name__ == "__main__":
    main()
