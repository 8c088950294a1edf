"""Gated GQA attention over the paged K/V cache (Qwen3-Next-80B's full-attention shapes: 16 query heads, 2 KV heads,
head_dim 256): dayzero's decode against the copy ceiling, its prefill against torch SDPA's flash backend.

    python -m bench.bench_gqa_attention [--out DIR]

Decode: B64 over 32K cached tokens a sequence on shuffled pages, BF16 or FP8 K/V (e4m3 with a per-(token, head)
scale), one token a row or 1 + 3 drafts. Bytes: every K and V row of every sequence (+ q and o); kernel time (the
profiler's, in 64-call graphs, the split combine included) against a 1 GiB copy kernel timed the same way. The
`tiles` table times other key-block / stage / warp / split choices on the BF16 B64 shape, to keep the plan's choice
(dayzero/plugins/gqa/plan.py) honest. Prefill: T new tokens with no cached context (one sequence of 8192, four of
2048), causal; dayzero's gqa_prefill_paged reads K/V from the BF16 pages (the write timed separately), SDPA gets
contiguous [B, H, T, D] tensors (enable_gqa). FLOPs: 4 * Hq * D * T (T + 1) / 2 a sequence. Every kernel is checked
against the reference (decode on four of the sequences) or SDPA first.
"""

from __future__ import annotations

from unittest import mock

import torch

from bench.common import (
    attempt,
    bench_ms,
    copy_kernel_gbs,
    kernel_ms,
    matmul_tflops,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.gqa import plan
from dayzero.plugins.gqa import reference as R
from dayzero.plugins.gqa.cache_layout import kv_cache_shape
from dayzero.plugins.gqa.kernel import gqa_decode_launcher, gqa_prefill_launcher
from dayzero.plugins.gqa.write_kernel import write_kv_launcher
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

HQ, HKV, D = 16, 2, 256
SM_SCALE = D ** -0.5
BATCH, CONTEXT = 64, 32768
DECODE_CASES = [("bf16", 1), ("fp8", 1), ("bf16", 4)]
PREFILL_CASES = [(1, 8192), (4, 2048)]
# (block_n, num_stages, num_warps, splits or None for the plan's)
TILE_SWEEP = [(64, 2, 4, None), (64, 3, 4, None), (64, 2, 8, None), (32, 3, 4, None), (32, 4, 4, None),
              (128, 2, 8, None), (64, 2, 4, 1), (64, 2, 4, 8), (64, 2, 4, 16)]
CHECKED_SEQS = 4


def paged_cache(batch: int, context: int, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(cache, block_table [B, pages]): random K/V (never zeros) for every position, each sequence on shuffled pages."""
    pages_per_seq = context // PAGE_SIZE
    table = torch.randperm(batch * pages_per_seq, device="cuda").to(torch.int32).view(batch, pages_per_seq)
    shape = kv_cache_shape(batch * pages_per_seq, HKV, D, fp8=fmt == "fp8")
    if fmt == "bf16":
        return torch.randn(shape, device="cuda", dtype=torch.bfloat16), table
    cache = torch.empty(shape, device="cuda", dtype=torch.uint8)
    rows = torch.arange(batch * context, device="cuda")
    for start in range(0, rows.numel(), 1 << 20):
        slots = rows[start : start + (1 << 20)]
        k, v = (torch.randn(slots.numel(), HKV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        write_kv_launcher(cache, k, v, slots)
    return cache, table


def decode_inputs(context: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, width, Hq, D] bf16, positions [B, width]: the last `width` positions of each sequence's context."""
    q = torch.randn(BATCH, width, HQ, D, device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(context - width, context, device="cuda", dtype=torch.int32).expand(BATCH, width)
    return q, positions.contiguous()


def check_decode(q, cache, table, positions) -> None:
    n = CHECKED_SEQS
    got = gqa_decode_launcher(q[:n], cache, table[:n], positions[:n], SM_SCALE)
    expected = R.gqa_decode_paged(q[:n].float(), cache, table[:n], positions[:n], SM_SCALE)
    # a loose bound that catches wrong kernels, not rounding
    if rel_err(got.float(), expected) > 2e-2:
        raise AssertionError(f"decode does not match the reference: {rel_err(got.float(), expected)}")


def decode_bytes(fmt: str, width: int) -> int:
    per_token = 2 * HKV * (D + 1 if fmt == "fp8" else 2 * D)
    return BATCH * CONTEXT * per_token + 2 * BATCH * width * HQ * D * 2


def decode_row(fmt: str, width: int, copy: float) -> dict:
    cache, table = paged_cache(BATCH, CONTEXT, fmt)
    q, positions = decode_inputs(CONTEXT, width)
    check_decode(q, cache, table, positions)
    us = kernel_ms([lambda: gqa_decode_launcher(q, cache, table, positions, SM_SCALE)]) * 1e3
    nbytes = decode_bytes(fmt, width)
    splits = plan.num_splits(BATCH * HKV, table.shape[1] * PAGE_SIZE, 64, q.device)
    return {"case": f"B{BATCH} C{CONTEXT // 1024}K {fmt} L{width}", "kv": fmt, "width": width, "splits": splits,
            "kernel_us": us, "gbs": nbytes / us / 1e3, "copy_pct": 100 * nbytes / us / 1e3 / copy}


def tile_rows(copy: float) -> list[dict]:
    cache, table = paged_cache(BATCH, CONTEXT, "bf16")
    q, positions = decode_inputs(CONTEXT, 1)
    rows = []
    for block_n, stages, warps, splits in TILE_SWEEP:
        tiles = plan.TileConfig(tokens=1, block_n=block_n, num_warps=warps, num_stages=stages)
        label = f"n{block_n} s{stages} w{warps} splits {splits or 'plan'}"

        def row(tiles=tiles, splits=splits, label=label) -> dict:
            with mock.patch.object(plan, "decode_tiles", lambda *args: tiles):
                call = lambda: gqa_decode_launcher(q, cache, table, positions, SM_SCALE, num_splits=splits)  # noqa: E731
                check_decode(q, cache, table, positions)
                us = kernel_ms([call]) * 1e3
            return {"case": label, "kernel_us": us, "copy_pct": 100 * decode_bytes("bf16", 1) / us / 1e3 / copy}

        attempt(rows, label, row)
    return rows


def sdpa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA on the flash backend; K/V [B, Hkv, T, D] are shared by query-head groups (enable_gqa), or
    repeated per query head beforehand where that backend does not take GQA."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=SM_SCALE,
                                                                enable_gqa=k.shape[1] != q.shape[1])


def sdpa_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[list[torch.Tensor], str]:
    """[B, H, T, D] inputs the flash backend takes: GQA as given, else K/V repeated (-> how)."""
    args = [t.transpose(1, 2) for t in (q, k, v)]
    try:
        sdpa_flash(*args)
        return args, "enable_gqa"
    except RuntimeError:
        group = HQ // HKV
        return [args[0], *(t.repeat_interleave(group, dim=1) for t in args[1:])], "K/V repeated"


def prefill_row(seqs: int, tokens: int) -> dict:
    q, k, v = (torch.randn(seqs, tokens, h, D, device="cuda", dtype=torch.bfloat16) for h in (HQ, HKV, HKV))
    pages = tokens // PAGE_SIZE
    table = torch.randperm(seqs * pages, device="cuda").to(torch.int32).view(seqs, pages)
    cache = torch.empty(kv_cache_shape(seqs * pages, HKV, D, False), device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(tokens, device="cuda", dtype=torch.int32).repeat(seqs)
    slots = (table.long()[:, positions[:tokens].long() // PAGE_SIZE] * PAGE_SIZE + positions[:tokens] % PAGE_SIZE)
    slots = slots.flatten()
    cu_seqlens = torch.arange(seqs + 1, device="cuda", dtype=torch.int32) * tokens
    flat = [t.flatten(0, 1) for t in (q, k, v)]
    write_kv_launcher(cache, flat[1], flat[2], slots)
    ours = lambda: gqa_prefill_launcher(flat[0], cache, table, cu_seqlens, positions, SM_SCALE)  # noqa: E731
    sdpa_args, sdpa_gqa = sdpa_inputs(q, k, v)
    expected = sdpa_flash(*sdpa_args).transpose(1, 2).flatten(0, 1)
    if rel_err(ours().float(), expected.float()) > 2e-2:
        raise AssertionError(f"prefill does not match SDPA: {rel_err(ours().float(), expected.float())}")
    flops = seqs * 4 * HQ * D * tokens * (tokens + 1) / 2
    row = {"case": f"{seqs} x {tokens}", "sdpa_gqa": sdpa_gqa, "ours_ms": bench_ms(ours),
           "sdpa_ms": bench_ms(lambda: sdpa_flash(*sdpa_args)),
           "write_ms": bench_ms(lambda: write_kv_launcher(cache, flat[1], flat[2], slots))}
    row["ours_tflops"], row["sdpa_tflops"] = flops / row["ours_ms"] / 1e9, flops / row["sdpa_ms"] / 1e9
    row["vs_sdpa"] = row["sdpa_ms"] / row["ours_ms"]
    return row


def tables(decode: list, tiles: list, prefill: list) -> dict:
    return {
        "decode": {"title": f"GQA decode, Hq {HQ} Hkv {HKV} D {D}, kernel time in 64-call graphs", "rows": decode,
                   "columns": {"case": "case", "splits": "splits", "kernel_us": "kernel us", "gbs": "GB/s",
                               "copy_pct": "% of copy"},
                   "plot": {"x": "case", "y": ["copy_pct"], "ylabel": "% of the copy kernel's GB/s",
                            "hlines": [[100, "copy"]]}},
        "tiles": {"title": f"GQA decode tiles, B{BATCH} C{CONTEXT // 1024}K BF16", "rows": tiles,
                  "columns": {"case": "block_n, stages, warps, splits", "kernel_us": "kernel us",
                              "copy_pct": "% of copy"}},
        "prefill": {"title": f"GQA causal prefill, Hq {HQ} Hkv {HKV} D {D}, BF16", "rows": prefill,
                    "columns": {"case": "sequences x tokens", "ours_ms": "dayzero ms", "ours_tflops": "dayzero TFLOP/s",
                                "sdpa_ms": "SDPA flash ms", "sdpa_tflops": "SDPA TFLOP/s",
                                "vs_sdpa": "speed vs SDPA", "write_ms": "K/V write ms", "sdpa_gqa": "SDPA GQA"},
                    "plot": {"x": "case", "y": ["ours_tflops", "sdpa_tflops"], "ylabel": "TFLOP/s"}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    copy = copy_kernel_gbs()
    decode, prefill = [], []
    with torch.inference_mode():
        for fmt, width in DECODE_CASES:
            attempt(decode, f"{fmt} L{width}", lambda fmt=fmt, width=width: decode_row(fmt, width, copy))
        tiles = tile_rows(copy)
        for seqs, tokens in PREFILL_CASES:
            attempt(prefill, f"{seqs} x {tokens}", lambda seqs=seqs, tokens=tokens: prefill_row(seqs, tokens))
    path = write_result(args.out, "gqa_attention", tables(decode, tiles, prefill),
                        ceilings={"copy_kernel_gbs": copy, "matmul_tflops": matmul_tflops()},
                        peer=f"torch {torch.__version__} SDPA (flash backend)")
    print_tables(path)


if __name__ == "__main__":
    main()
