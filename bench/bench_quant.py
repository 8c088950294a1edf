"""Fused cache writes (quantize + scatter by slot_mapping) and the standalone FP8 block quantizers against the torch
reference writes and the copy ceiling.

    python -m bench.bench_quant [--out DIR]

Cache writes: T = 1, 64, 8192 new tokens into the FP8 latent cache (bf16 rows [T, 576] -> 656 B records), the MXFP8
index cache (bf16 keys [T, 128] -> 132 B, page-major) and, for comparison, the plain bf16 latent cache. Slots are
distinct random rows over many pages, one in seven is -1 (padding). Bytes counted: rows read + slot_mapping read +
cache bytes written, against the device-to-device copy ceiling (read + written). Every kernel is first checked
byte for byte against formats.py's reference write on the same inputs; inputs rotate over enough sets to miss L2.
time_us is the GPU time per write (calls captured in a CUDA graph and replayed, as the engine runs them); launch_us
one eager call including Triton's Python launch; eager_reference_us the torch reference write (formats.py), the
peer of that eager call.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from bench.common import copy_gbs, graph_replay_ms, median_ms, parser, print_tables, write_result
from dayzero.plugins.paged_cache import formats
from dayzero.plugins.paged_cache.kernel import (
    write_fp8_latent_launcher,
    write_mxfp8_index_launcher,
    write_rows_launcher,
)
from dayzero.plugins.quant import reference as Q
from dayzero.plugins.quant.kernel import dequantize_launcher, quantize_launcher

DEVICE = "cuda"
TOKENS = (1, 64, 8192)
L2_BYTES = 60 << 20


@dataclass(frozen=True)
class Write:
    width: int  # row width of the new tokens
    token_bytes: int  # cache bytes written per token
    cache_shape: Callable  # pages -> cache shape
    cache_dtype: torch.dtype
    reference: Callable  # (cache, rows, slot_mapping) -> None, formats.py
    launcher: Callable  # (cache, rows, slot_mapping) -> None, the kernel


WRITES = {
    "latent-fp8": Write(576, 656, lambda p: formats.latent_cache_shape(p, 512, 64, True), torch.uint8,
                        partial(formats.write_latent, rope_dim=64), partial(write_fp8_latent_launcher, rope_dim=64)),
    "index-mxfp8": Write(128, 132, lambda p: formats.index_cache_shape(p, 128, True), torch.uint8,
                         formats.write_index_keys, write_mxfp8_index_launcher),
    "latent-bf16": Write(576, 1152, lambda p: formats.latent_cache_shape(p, 512, 64, False), torch.bfloat16,
                         partial(formats.write_latent, rope_dim=64), write_rows_launcher),
}


def make_write_inputs(write: Write, tokens: int):
    pages = max(64, 4 * tokens // 64)
    rows = torch.randn(tokens, write.width, device=DEVICE).to(torch.bfloat16)
    slots = torch.randperm(pages * 64, device=DEVICE)[:tokens]
    slots[::7] = -1
    if write.cache_dtype == torch.uint8:
        cache = torch.randint(0, 256, write.cache_shape(pages), dtype=torch.uint8, device=DEVICE)
    else:
        cache = torch.randn(write.cache_shape(pages), device=DEVICE).to(write.cache_dtype)
    return cache, rows, slots


def input_sets(make, set_bytes: int) -> list:
    """Enough input sets (from make()) to touch 4x the L2 per round (at least 8, at most 64)."""
    return [make() for _ in range(max(8, min(64, -(-4 * L2_BYTES // max(set_bytes, 1)))))]


def graph_us(calls: list[Callable]) -> float:
    """GPU time per call: the calls captured in one CUDA graph and replayed (no Python launch overhead)."""
    return graph_replay_ms(calls) * 1e3


def bench_write(name: str, tokens: int, copy_gbs: float) -> dict:
    write = WRITES[name]
    row = {"case": f"{name} T{tokens}", "write": name, "tokens": tokens}
    cache, rows, slots = make_write_inputs(write, tokens)
    expected = cache.clone()
    write.reference(expected, rows, slots)
    write.launcher(cache, rows, slots)
    row["bit_exact"] = bool(torch.equal(cache.view(torch.uint8), expected.view(torch.uint8)))
    nbytes = rows.numel() * rows.element_size() + slots.numel() * 8 + int((slots >= 0).sum()) * write.token_bytes
    sets = input_sets(lambda: make_write_inputs(write, tokens), nbytes)
    kernel_us = graph_us([partial(write.launcher, *inputs) for inputs in sets])
    cycle = itertools.cycle(sets)
    launch_us = median_ms(lambda: write.launcher(*next(cycle)), warmup=5, iters=30) * 1e3
    eager_us = median_ms(lambda: write.reference(*next(cycle)), warmup=2, iters=10) * 1e3
    row.update(bytes=nbytes, time_us=round(kernel_us, 2), launch_us=round(launch_us, 1),
               eager_reference_us=round(eager_us, 1), GBps=round(nbytes / kernel_us / 1e3, 1))
    row["copy_pct"] = 100 * row["GBps"] / copy_gbs
    if not row["bit_exact"]:
        raise AssertionError(f"{name} T{tokens} differs from the reference write")
    return row


def bench_quantize(fmt: str, shape: tuple[int, int], copy_gbs: float) -> dict:
    block, scale_dtype, quantize = (Q.MX_BLOCK, torch.uint8, Q.mxfp8_quantize) if fmt == "mxfp8" else (
        Q.FP8_TILE, torch.float32, Q.fp8_block_quantize)
    row = {"case": f"{fmt} {'x'.join(map(str, shape))}"}
    x = torch.randn(shape, device=DEVICE).to(torch.bfloat16)
    q = torch.empty(shape, dtype=torch.float8_e4m3fn, device=DEVICE)
    scales = torch.empty(shape[0], shape[1] // block, dtype=scale_dtype, device=DEVICE)
    out = torch.empty(shape, dtype=torch.bfloat16, device=DEVICE)
    quantize_launcher(x, q, scales)
    expected_q, expected_scales = quantize(x, block)
    row["bit_exact"] = bool(torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8))
                            and torch.equal(scales, expected_scales))
    scale_bytes = scales.numel() * scales.element_size()
    nbytes = x.numel() * 2 + x.numel() + scale_bytes
    quantize_ms = median_ms(lambda: quantize_launcher(x, q, scales), warmup=5, iters=30)
    dequantize_ms = median_ms(lambda: dequantize_launcher(q, scales, out), warmup=5, iters=30)
    row.update(bytes=nbytes, time_us=round(quantize_ms * 1e3, 2), dequantize_us=round(dequantize_ms * 1e3, 2),
               GBps=round(nbytes / quantize_ms / 1e6, 1), dequantize_GBps=round(nbytes / dequantize_ms / 1e6, 1))
    row["copy_pct"] = 100 * row["GBps"] / copy_gbs
    if not row["bit_exact"]:
        raise AssertionError(f"{fmt} quantize differs from the reference")
    return row


def tables(writes: list, quantizers: list) -> dict:
    return {
        "writes": {"title": "Cache writes (bf16 rows scattered into paged caches)", "rows": writes,
                   "columns": {"case": "write", "time_us": "graph us", "GBps": "GB/s", "copy_pct": "% of copy",
                               "launch_us": "eager call us", "eager_reference_us": "torch reference us"},
                   "plot": {"x": "case", "y": ["launch_us", "eager_reference_us"], "ylabel": "us (one eager call)",
                            "log": True}},
        "quantizers": {"title": "FP8 block quantizers, bf16 8192 x 7168", "rows": quantizers,
                       "columns": {"case": "format", "time_us": "quantize us", "GBps": "GB/s", "copy_pct": "% of copy",
                                   "dequantize_us": "dequantize us"}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    copy = copy_gbs()
    writes, quantizers = [], []
    cases = [(writes, bench_write, (name, tokens)) for name in WRITES for tokens in TOKENS]
    cases += [(quantizers, bench_quantize, (fmt, (8192, 7168))) for fmt in ("mxfp8", "fp8_block")]
    for rows, fn, case in cases:
        try:
            rows.append(fn(*case, copy))
        except Exception as exc:  # noqa: BLE001 - one failing case must not stop the others
            traceback.print_exc()
            rows.append({"case": " ".join(map(str, case)), "error": f"{type(exc).__name__}: {exc}"})
        torch.cuda.empty_cache()
    print_tables(write_result(args.out, "quant", tables(writes, quantizers), ceilings={"copy_gbs": copy}))


if __name__ == "__main__":
    main()
