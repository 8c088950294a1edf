"""Prefix caching's effect on the time to first token, through the runtime (LLMEngine over the eager engine): a
prompt cold, the same prompt again, and one sharing all but its last `--new-tokens`, with and without
--prefix-caching, one request at a time after a warm-up request.

    python -m bench.bench_prefix_cache [--out DIR]          # the h200-slice cut to 4 layers, bf16, 16384 tokens
    python -m bench.bench_prefix_cache --device cpu --config tiny-hybrid --dtype float32 --prompt-tokens 3000
"""

from __future__ import annotations

import time

import torch

from bench.common import h200_slice_config, parser, print_tables, write_result
from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import EagerEngine, eager_manifest
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
    p = parser(__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--config", default="h200-slice")
    p.add_argument("--num-layers", type=int, default=4, help="h200-slice only")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--prompt-tokens", type=int, default=16384)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--memory-mb", type=int, default=8192)
    args = p.parse_args()
    torch.manual_seed(0)
    model = build_model(args.config, args.num_layers, getattr(torch, args.dtype), args.device)
    prompt = torch.randint(0, model.config.vocab_size, (args.prompt_tokens,)).tolist()
    rows = [measure(model, prompt, args.new_tokens, caching, args.memory_mb << 20) for caching in (False, True)]
    for row in rows:
        row["case"] = "with prefix caching" if row["prefix_caching"] else "without"
    tables = {"ttft": {"title": f"Time to first token, {args.config} ({args.num_layers} layers), "
                                f"{args.prompt_tokens}-token prompt", "rows": rows,
                       "columns": {"case": "", "cold_ms": "cold ms", "same_prompt_ms": "the same prompt again ms",
                                   "shared_but_last_ms": f"all but the last {args.new_tokens} tokens shared ms",
                                   "hit_tokens": "tokens reused"},
                       "plot": {"x": "case", "y": ["cold_ms", "same_prompt_ms", "shared_but_last_ms"],
                                "ylabel": "ms to the first token"}}}
    print_tables(write_result(args.out, "prefix_cache", tables, config=args.config, dtype=args.dtype))


if __name__ == "__main__":
    main()
