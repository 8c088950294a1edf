"""Runtime on the H200: decode tokens/s at batch 1, 16, 64 with CUDA graphs vs without, and the time to first token
of a 32K-token prompt, on an h200-slice model (random bf16 weights built on the GPU, eager engine, FP8 latent +
MXFP8 index caches).

    PYTHONPATH=. python bench/bench_runtime.py --out DIR [--num-layers N] [--decode-steps 32]

Decode rate = generated tokens / wall time of the decode steps only (prompts of 128 tokens prefilled first); the
graph run captures one graph per batch bucket during its first step (not timed).
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

from bench.common import table, write_results
from bench.h200_model import h200_slice_model
from dayzero.export.engine import EagerEngine, eager_manifest
from dayzero.model.caches import CacheFormat
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams

PROMPT = 128
TOKEN_BUDGET = 8192  # prefill tokens per step


def runtime(model, graphs: bool, max_batch: int, max_len: int, memory_fraction: float = 0.5) -> LLMEngine:
    # the previous engine's caches and graph pool go back first: each engine takes half of the free memory
    gc.collect()
    torch.cuda.empty_cache()
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=max_batch, max_len=max_len)
    options = RuntimeOptions(cuda_graphs=graphs, token_budget=TOKEN_BUDGET, gpu_memory_fraction=memory_fraction)
    return LLMEngine(EagerEngine(model, manifest), options)


def decode_rate(model, batch: int, graphs: bool, steps: int) -> dict:
    engine = runtime(model, graphs, max_batch=max(batch, 1), max_len=PROMPT + steps + 8)
    for _ in range(batch):
        engine.add_request(torch.randint(0, 1000, (PROMPT,)).tolist(), SamplingParams(max_tokens=steps + 2,
                                                                                      ignore_eos=True))
    while engine.stats.decode_tokens == 0:
        engine.step()  # prefills, then the first decode step (captures the graph)
    torch.cuda.synchronize()
    start, done = time.perf_counter(), engine.stats.decode_tokens
    for _ in range(steps):
        engine.step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    failed = getattr(engine.decode, "failed", {})
    return {"batch": batch, "graphs": graphs, "tokens_per_s": (engine.stats.decode_tokens - done) / elapsed,
            "step_ms": elapsed / steps * 1e3, "capture_failed": failed or None}


def time_to_first_token(model, length: int, warmup_tokens: int = TOKEN_BUDGET) -> dict:
    """TTFT of one `length`-token prompt, after a `warmup_tokens` prompt has compiled the prefill kernels (Triton
    compiles on first use; a server warms up once, not per request)."""
    engine = runtime(model, graphs=False, max_batch=1, max_len=length + 8, memory_fraction=0.2)
    warmup = engine.add_request(torch.randint(0, 1000, (warmup_tokens,)).tolist(), SamplingParams(max_tokens=1))
    start = time.perf_counter()
    while not warmup.output_ids:
        engine.step()
    torch.cuda.synchronize()
    warmup_s, steps = time.perf_counter() - start, engine.stats.steps
    start = time.perf_counter()
    seq = engine.add_request(torch.randint(0, 1000, (length,)).tolist(), SamplingParams(max_tokens=1))
    while not seq.output_ids:
        engine.step()
    torch.cuda.synchronize()
    return {"prompt_tokens": length, "ttft_s": time.perf_counter() - start, "steps": engine.stats.steps - steps,
            "token_budget": TOKEN_BUDGET, "first_call_with_compile_s": warmup_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--ttft-tokens", type=int, default=32768)
    parser.add_argument("--ttft-only", action="store_true", help="skip the decode rates (results: bench_runtime_ttft)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = h200_slice_model(args.num_layers)
    report = {"layers": list(model.config.layer_kinds), "decode": [], "ttft": None}
    for batch in () if args.ttft_only else (1, 16, 64):
        for graphs in (False, True):
            report["decode"].append(decode_rate(model, batch, graphs, args.decode_steps))
            print(report["decode"][-1], flush=True)
    for row in report["decode"]:
        if row["graphs"]:
            eager = next(r for r in report["decode"] if r["batch"] == row["batch"] and not r["graphs"])
            row["speedup"] = row["tokens_per_s"] / eager["tokens_per_s"]
    report["ttft"] = time_to_first_token(model, args.ttft_tokens)
    write_results(args.out, "bench_runtime_ttft" if args.ttft_only else "bench_runtime", report)
    if report["decode"]:
        print(table(report["decode"], ["batch", "graphs", "tokens_per_s", "step_ms", "speedup", "capture_failed"]))
    print(report["ttft"])


if __name__ == "__main__":
    main()
