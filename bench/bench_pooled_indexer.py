"""The indexer over pooled keys (GLM-5.3-Flash: a key a pool of 16 tokens) against the unpooled one over the same
context: `pooled_index_topk_paged` vs `index_topk_paged`, and the pooled decode write.

    python -m bench.bench_pooled_indexer [--out DIR]

Decode: B64 sequences with 32K / 128K cached tokens, one query token each, HI 32, DI 128, top-2048 (128 pools of 16,
plus the unfinished pool), shuffled pages; MXFP8 caches (the query quantized as the model does) or BF16 ones. Bytes:
the cache bytes a sequence's keys take (pooled: one key a pool) + q, w, the picks and the block table. Timed as
CUDA-graph replays. Every pooled case is checked against the reference on the first and last sequence (by score: the
FP8 dot may swap near-ties). Then the decode write of the pools (B64, 1 and 4 tokens a row) into an MXFP8 cache.
"""

from __future__ import annotations

import torch
import triton

from bench.bench_indexer import E4M3_NAN_CODES
from bench.common import attempt, copy_gbs, graph_replay_ms, parser, print_tables, write_result
from dayzero.plugins.indexer import (
    index_topk_paged,
    pooled_index_topk_paged,
    pooled_reference,
    reference,
    write_pooled_index_keys_decode,
)
from dayzero.plugins.paged_cache.formats import index_cache_shape, load_index_rows, pooled_row, pooled_rows_per_page
from dayzero.plugins.quant.op import mxfp8_quantize
from dayzero.plugins.quant.reference import mxfp8_dequantize

DI, TOPK, KPOOL, HEADS, BATCH = 128, 2048, 16, 32, 64
CASES = [(cache, keys) for cache in ("mxfp8", "bf16") for keys in (32768, 131072)]
FP8_DOT_SCORE_GAP = 1e-3


def random_cache(num_pages: int, kpool: int, quantized: bool) -> torch.Tensor:
    """bf16 normal keys, or MXFP8 with random e4m3 codes (no NaN) and scales near 2^0; `kpool` rows a pool."""
    shape = index_cache_shape(num_pages, DI, quantized, kpool)
    if not quantized:
        return torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    cache = torch.randint(0, 256, shape, device="cuda", dtype=torch.uint8)
    rows = pooled_rows_per_page(kpool)
    values = cache[:, : rows * DI]
    for code in E4M3_NAN_CODES:
        values[values == code] -= 1
    cache[:, rows * DI :] = torch.randint(118, 128, (num_pages, rows * DI // 32), device="cuda", dtype=torch.uint8)
    return cache


def inputs(keys: int, kpool: int, quantized: bool) -> dict:
    pages = triton.cdiv(keys, 64)
    table = torch.randperm(BATCH * pages, device="cuda").int().view(BATCH, pages)
    q = torch.randn(BATCH, HEADS, DI, device="cuda", dtype=torch.bfloat16)
    case = dict(q=q, w=torch.randn(BATCH, HEADS, device="cuda") * HEADS**-0.5,
                index_cache=random_cache(BATCH * pages, kpool, quantized), block_table=table,
                cu_seqlens=torch.arange(BATCH + 1, device="cuda").int(),
                positions=torch.full((BATCH,), keys - 1, device="cuda"), q_scales=None)
    if quantized:
        case["q"], case["q_scales"] = mxfp8_quantize(q)
    return case


def run_pooled(case: dict) -> torch.Tensor:
    return pooled_index_topk_paged(case["q"], case["w"], case["index_cache"], case["block_table"], case["cu_seqlens"],
                                   case["positions"], TOPK, KPOOL, None, case["q_scales"])


def run_plain(case: dict) -> torch.Tensor:
    return index_topk_paged(case["q"], case["w"], case["index_cache"], case["block_table"], case["cu_seqlens"],
                            case["positions"], TOPK, None, case["q_scales"])


def check_pooled(got: torch.Tensor, case: dict, seq: int) -> None:
    """Sequence `seq`'s picks against the reference's: the same tail and padding, the same picked pool scores."""
    per_row = ("q", "w", "positions", "q_scales", "block_table")
    one = {k: v[seq : seq + 1] if k in per_row and v is not None else v for k, v in case.items()}
    one["cu_seqlens"] = torch.tensor([0, 1], device=got.device, dtype=torch.int32)
    expected = pooled_reference.pooled_index_topk_paged(**{k: v for k, v in one.items() if k != "q_scales"},
                                                        topk=TOPK, kpool=KPOOL, q_scales=one["q_scales"])[0]
    picked = got[seq]
    if not torch.equal(picked < 0, expected < 0) or not torch.equal(picked[TOPK:], expected[TOPK:]):
        raise AssertionError(f"sequence {seq}: the padding or the unfinished pool differs from the reference")
    complete = (int(one["positions"][0]) + 1) // KPOOL
    ends = torch.arange(complete, device=got.device) * KPOOL + KPOOL - 1
    rows = pooled_row(one["block_table"][0].long()[ends // 64], ends, KPOOL)
    pool_keys = load_index_rows(one["index_cache"], rows, DI, pooled_rows_per_page(KPOOL))
    q = one["q"] if one["q_scales"] is None else mxfp8_dequantize(one["q"], one["q_scales"])
    scores = reference.index_scores(q, pool_keys, one["w"])[0]
    a = scores[picked[:TOPK:KPOOL].long() // KPOOL].sort().values
    b = scores[expected[:TOPK:KPOOL].long() // KPOOL].sort().values
    tolerance = 1e-5 if one["q_scales"] is None else FP8_DOT_SCORE_GAP
    if float((a - b).abs().max() / scores.abs().max()) > tolerance:
        raise AssertionError(f"sequence {seq}: picked pool scores differ from the reference's")


def io_bytes(case: dict, picks: torch.Tensor) -> int:
    q_bytes = case["q"].numel() * case["q"].element_size()
    return q_bytes + case["w"].numel() * 4 + picks.numel() * 4 + case["block_table"].numel() * 4


def select_row(cache: str, keys: int, copy: float) -> dict:
    quantized = cache == "mxfp8"
    pooled, plain = inputs(keys, KPOOL, quantized), inputs(keys, 1, quantized)
    picks = run_pooled(pooled)
    check_pooled(picks, pooled, 0)
    check_pooled(picks, pooled, BATCH - 1)
    row_bytes = DI + DI // 32 if quantized else 2 * DI
    pooled_bytes = BATCH * (keys // KPOOL) * row_bytes + io_bytes(pooled, picks)
    plain_bytes = BATCH * keys * row_bytes + io_bytes(plain, run_plain(plain))
    row = {"case": f"B{BATCH} {cache.upper()} HI{HEADS} {keys // 1024}K", "pooled_mb": pooled_bytes / 1e6,
           "plain_mb": plain_bytes / 1e6, "pooled_ms": graph_replay_ms([lambda: run_pooled(pooled)]),
           "plain_ms": graph_replay_ms([lambda: run_plain(plain)])}
    row["pooled_copy_pct"] = 100 * pooled_bytes / row["pooled_ms"] / 1e6 / copy
    row["speedup"] = row["plain_ms"] / row["pooled_ms"]
    return row


def write_row(tokens: int, copy: float) -> dict:
    """B64 rows of `tokens` at positions that complete a pool, MXFP8 pooled cache."""
    pages = triton.cdiv(32768, 64)
    cache = random_cache(BATCH * pages, KPOOL, True)
    window = torch.randn(BATCH * tokens, KPOOL - 1, 2 * DI, device="cuda", dtype=torch.bfloat16)
    positions = (32768 - tokens + torch.arange(tokens, device="cuda")).expand(BATCH, tokens).contiguous()
    slot_mapping = torch.arange(BATCH, device="cuda")[:, None] * pages * 64 + positions
    rows = torch.randn(BATCH, tokens, 2 * DI, device="cuda", dtype=torch.bfloat16)
    ape = torch.randn(KPOOL, DI, device="cuda", dtype=torch.bfloat16)
    state_slots = torch.arange(BATCH * tokens, device="cuda").int().view(BATCH, tokens)
    accepted = torch.ones(BATCH, device="cuda", dtype=torch.int32)
    ms = graph_replay_ms([lambda: write_pooled_index_keys_decode(cache, window, rows, ape, slot_mapping, positions,
                                                                 state_slots, accepted)])
    # a row's window read once and written after each token, its rows read, its pool written
    window_bytes = BATCH * (KPOOL - 1) * 2 * DI * 2
    nbytes = window_bytes * (1 + tokens) + rows.numel() * 2 + BATCH * (DI + DI // 32)
    return {"case": f"B{BATCH} L{tokens}", "us": 1e3 * ms, "copy_pct": 100 * nbytes / ms / 1e6 / copy}


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    copy = copy_gbs()
    select, writes = [], []
    with torch.inference_mode():
        for cache, keys in CASES:
            attempt(select, f"{cache} {keys}", lambda c=cache, k=keys: select_row(c, k, copy))
        for tokens in (1, 4):
            attempt(writes, f"write L{tokens}", lambda t=tokens: write_row(t, copy))
    tables = {
        "select": {"title": f"Pooled indexer decode (pools of {KPOOL}) vs unpooled, B64, DI 128, top-2048",
                   "rows": select,
                   "columns": {"case": "case", "pooled_mb": "pooled MB", "plain_mb": "unpooled MB",
                               "pooled_ms": "pooled ms", "plain_ms": "unpooled ms", "speedup": "speedup",
                               "pooled_copy_pct": "pooled % of copy"},
                   "plot": {"x": "case", "y": ["pooled_ms", "plain_ms"], "ylabel": "ms a call"}},
        "write": {"title": f"Pooled key decode write (pools of {KPOOL}, MXFP8), B64", "rows": writes,
                  "columns": {"case": "case", "us": "us", "copy_pct": "% of copy"}},
    }
    path = write_result(args.out, "pooled_indexer", tables, ceilings={"copy_gbs": copy})
    print_tables(path)


if __name__ == "__main__":
    main()
