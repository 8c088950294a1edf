"""Prefix caching's effect on the time to first token, through the runtime (LLMEngine over the eager engine): a
prompt cold, the same prompt again, and one sharing all but its last `--new-tokens`, with and without
--prefix-caching, one request at a time after a warm-up request.

    PYTHONPATH=. python bench/bench_prefix_cache.py --out DIR                      # H200: h200-slice, 4 layers, bf16
    PYTHONPATH=. python bench/bench_prefix_cache.py --out DIR --device cpu --config tiny-hybrid --dtype float32 \\
        --prompt-tokens 3000
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import table, write_results
from bench.h200_model import h200_slice_config
from dayzero.export.engine import EagerEngine, eager_manifest
from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.random_init import init_random_
from dayzero.model.weights import build_empty
from dayzero.paths import bundled_config
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams


def build_model(config: str, num_layers: int | None, dtype: torch.dtype, device: str):
    cfg = h200_slice_config(num_layers) if config == "h200-slice" else ModelConfig.from_hf(bundled_config(config))
    model = build_empty(cfg, dtype, device)
    init_random_(model, 0)
    return model.eval()


def first_token_s(engine: LLMEngine, prompt: list[int]) -> float:
    start = time.perf_counter()
    seq = engine.add_request(prompt, SamplingParams(max_tokens=1))
    while not seq.output_ids:
        engine.step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(model, prompt: list[int], new_tokens: int, caching: bool, memory_bytes: int) -> dict:
    quantized = model.device.type == "cuda" and model.config.mla.kv_lora_rank % 128 == 0
    manifest = eager_manifest(model, CacheFormat(kv_fp8=quantized, index_mxfp8=quantized), max_batch=2,
                              max_len=len(prompt) + 8)
    engine = LLMEngine(EagerEngine(model, manifest),
                       RuntimeOptions(memory_bytes=memory_bytes, prefix_caching=caching, cuda_graphs=False))
    vocab = model.config.vocab_size
    first_token_s(engine, torch.randint(0, vocab, (len(prompt),)).tolist())  # warm-up (kernel compiles)
    cold = first_token_s(engine, prompt)
    again = first_token_s(engine, prompt)
    shared = first_token_s(engine, prompt[:-new_tokens] + torch.randint(0, vocab, (new_tokens,)).tolist())
    return {"prefix_caching": caching, "prompt_tokens": len(prompt), "cold_ms": 1e3 * cold,
            "same_prompt_ms": 1e3 * again, "shared_but_last_ms": 1e3 * shared,
            "hit_tokens": engine.prefix_cache.hit_tokens if caching else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--config", default="h200-slice")
    parser.add_argument("--num-layers", type=int, default=4, help="h200-slice only")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompt-tokens", type=int, default=16384)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--memory-mb", type=int, default=8192)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model(args.config, args.num_layers, getattr(torch, args.dtype), args.device)
    prompt = torch.randint(0, model.config.vocab_size, (args.prompt_tokens,)).tolist()
    rows = [measure(model, prompt, args.new_tokens, caching, args.memory_mb << 20) for caching in (False, True)]
    write_results(args.out, "bench_prefix_cache", {"config": args.config, "device": args.device, "dtype": args.dtype,
                                                  "new_tokens": args.new_tokens, "rows": rows})
    print(table(rows, ["prefix_caching", "prompt_tokens", "cold_ms", "same_prompt_ms", "shared_but_last_ms",
                       "hit_tokens"]))


if __name__ == "__main__":
    main()
