"""Fused cache writes (quantize + scatter by slot_mapping) and the standalone FP8 block quantizers on the H200.

Cache writes: T = 1, 64, 8192 new tokens into the FP8 latent cache (bf16 rows [T, 576] -> 656 B records), the MXFP8
index cache (bf16 keys [T, 128] -> 132 B, page-major) and, for comparison, the plain bf16 latent cache. Slots are
distinct random rows over many pages, one in seven is -1 (padding). Bytes counted: rows read + slot_mapping read +
cache bytes written, against the device-to-device copy ceiling (read + written). Every kernel is first checked
byte for byte against formats.py's reference write on the same inputs; inputs rotate over enough sets to miss L2.
time_us is the GPU time per write (calls captured in a CUDA graph and replayed, as the engine runs them); launch_us
one eager call including Triton's Python launch; eager_reference_us the torch reference write.
Run on the H200: `PYTHONPATH=. python bench/bench_quant.py --out DIR`.
"""

from __future__ import annotations

import argparse
import itertools
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from bench.common import copy_bandwidth_gbs, graph_replay_ms, median_ms, table, write_results
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
    row = {"case": f"write {name}", "shape": f"T{tokens}", "dtype": "bf16 rows"}
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
    row["of_copy"] = round(row["GBps"] / copy_gbs, 3)
    return row


def bench_quantize(fmt: str, shape: tuple[int, int], copy_gbs: float) -> dict:
    block, scale_dtype, quantize = (Q.MX_BLOCK, torch.uint8, Q.mxfp8_quantize) if fmt == "mxfp8" else (
        Q.FP8_TILE, torch.float32, Q.fp8_block_quantize)
    row = {"case": f"{fmt} quantize+dequantize", "shape": "x".join(map(str, shape)), "dtype": "bf16"}
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
    row["of_copy"] = round(row["GBps"] / copy_gbs, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth_gbs()
    rows = []
    cases = [(bench_write, (name, tokens)) for name in WRITES for tokens in TOKENS]
    cases += [(bench_quantize, (fmt, (8192, 7168))) for fmt in ("mxfp8", "fp8_block")]
    for fn, case in cases:
        try:
            rows.append(fn(*case, copy_gbs))
        except Exception as exc:
            traceback.print_exc()
            rows.append({"case": f"{fn.__name__} {case}", "error": f"{type(exc).__name__}: {exc}"})
        torch.cuda.empty_cache()
    path = write_results(args.out, "bench_quant", {"copy_GBps": round(copy_gbs, 1), "cases": rows})
    print(f"results: {path}; copy ceiling {copy_gbs:.0f} GB/s (read + written)")
    columns = ["case", "shape", "dtype", "bit_exact", "time_us", "GBps", "of_copy", "launch_us", "eager_reference_us",
               "dequantize_us", "error"]
    print(table(rows, columns))


if __name__ == "__main__":
    main()
