"""What the two-stream indexer input preparation saves (issue 4, item 4), on the H200, eager bf16.

    PYTHONPATH=. python bench/bench_indexer_streams.py --out DIR

One DSA indexer at h200-slice size (hidden 7168, q_lora 1536, 32 heads x 128, top-2048, MXFP8 index cache) runs its
whole forward (query projection, key projection + LayerNorm + cache write, head weights, fused Top-K) over T new
tokens after C cached ones, with the key path and head weights on a side stream or all on one stream.
Times: CUDA-event medians (bench.common.median_ms) of the eager forward; decode sizes also as a CUDA-graph replay.
"""

from __future__ import annotations

import argparse
import math

import torch

from bench.common import graph_replay_ms, median_ms, table, write_results
from dayzero.model.config import IndexerConfig
from dayzero.model.indexer import Indexer, use_indexer_streams
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE, formats

HIDDEN, Q_LORA, CFG = 7168, 1536, IndexerConfig(num_heads=32, head_dim=128, topk=2048)
CASES = [(64, 1, 8192), (1, 64, 32768), (8192, 1, 0)]  # (sequences, new tokens each, cached context)


def run_case(indexer: Indexer, num_seqs: int, new: int, context: int) -> dict:
    pages = math.ceil((context + new) / PAGE_SIZE)
    cache = torch.randint(0, 120, formats.index_cache_shape(num_seqs * pages, CFG.head_dim, True), dtype=torch.uint8,
                          device="cuda")
    meta = contiguous_meta([context] * num_seqs, [new] * num_seqs, pages, device="cuda")
    x = torch.randn(num_seqs * new, HIDDEN, device="cuda", dtype=torch.bfloat16)
    c_q = torch.randn(num_seqs * new, Q_LORA, device="cuda", dtype=torch.bfloat16)
    row = {"case": f"N{num_seqs} new{new} ctx{context}"}
    for enabled in (False, True):
        use_indexer_streams(indexer, enabled)
        name = "two_streams" if enabled else "one_stream"
        with torch.inference_mode():
            row[f"{name}_us"] = median_ms(lambda: indexer(x, c_q, meta, cache), warmup=5, iters=30) * 1e3
            if num_seqs * new <= 64:
                row[f"{name}_graph_us"] = graph_replay_ms([lambda: indexer(x, c_q, meta, cache)]) * 1e3
    row["saved_us"] = row["one_stream_us"] - row["two_streams_us"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    indexer = Indexer(HIDDEN, Q_LORA, CFG).cuda().to(torch.bfloat16)
    for p in indexer.parameters():
        p.data.normal_(0, 0.02)
    rows = [run_case(indexer, *case) for case in CASES]
    write_results(args.out, "bench_indexer_streams", {"rows": rows})
    print(table(rows, ["case", "one_stream_us", "two_streams_us", "saved_us", "one_stream_graph_us",
                       "two_streams_graph_us"]))


if __name__ == "__main__":
    main()
