"""The runtime's decode rate with CUDA graphs against without, and the time to first token, on the h200-slice.

    python -m bench.bench_runtime [--out DIR] [--num-layers N] [--decode-steps 32] [--ttft-tokens 8192,32768]

The h200-slice (8 layers: 6 KDA + 2 DSA-MLA at K3.1 width, 64 experts top-16, random bf16 weights built on the GPU)
behind the eager engine in the runtime (`LLMEngine`: scheduler, 64-token pages, state slots, sampling), FP8 latent +
MXFP8 index caches. Decode rate = generated tokens / wall time of the decode steps only, after 128-token prompts;
the graph run captures one graph per batch bucket during its first decode step (not timed). Time to first token:
one prompt, chunked prefill with an 8192-token budget, after a warm-up prompt that compiled the prefill kernels.
Target: >= 3x from CUDA graphs at batch 1.
"""

from __future__ import annotations

import gc
import time

import torch

from bench.common import h200_slice_model, parser, print_tables, write_result
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
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


def tables(decode: list, ttft: list) -> dict:
    return {
        "decode": {"title": "h200-slice decode through the runtime", "rows": decode,
                   "columns": {"batch": "batch", "eager_tokens_per_s": "eager tokens/s",
                               "eager_step_ms": "eager step ms", "graph_tokens_per_s": "graphs tokens/s",
                               "graph_step_ms": "graphs step ms",
                               "speedup": "speedup"},
                   "plot": {"x": "batch", "y": ["eager_tokens_per_s", "graph_tokens_per_s"], "ylabel": "tokens/s",
                            "log": True}},
        "ttft": {"title": "h200-slice time to first token (8192-token prefill budget)", "rows": ttft,
                 "columns": {"prompt_tokens": "prompt tokens", "ttft_s": "s", "steps": "prefill steps"}},
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--num-layers", type=int, default=None)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--ttft-tokens", default="8192,32768", help="comma-separated prompt lengths")
    args = p.parse_args()
    torch.manual_seed(0)
    model = h200_slice_model(args.num_layers)
    decode = []
    for batch in (1, 16, 64):
        eager, graphs = (decode_rate(model, batch, graphs, args.decode_steps) for graphs in (False, True))
        decode.append({"batch": batch, "eager_tokens_per_s": eager["tokens_per_s"], "eager_step_ms": eager["step_ms"],
                       "graph_tokens_per_s": graphs["tokens_per_s"], "graph_step_ms": graphs["step_ms"],
                       "speedup": graphs["tokens_per_s"] / eager["tokens_per_s"],
                       "capture_failed": graphs["capture_failed"]})
        print(decode[-1], flush=True)
    ttft = [time_to_first_token(model, int(length)) for length in args.ttft_tokens.split(",")]
    print_tables(write_result(args.out, "runtime", tables(decode, ttft), layers=list(model.config.layer_kinds)))


if __name__ == "__main__":
    main()
