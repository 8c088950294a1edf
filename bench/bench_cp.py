"""Context parallelism on GPUs (NCCL): one long prompt's time to first token through one rank and through --cp 2
(eager engines, bf16 by default, the whole prompt in one prefill step), on a random checkpoint of a cut-down
h200-slice (full width; fewer layers and experts, so that each rank loads it in seconds), and whether the greedy
tokens agree (bf16 near-ties of random weights may flip one). Needs 2 GPUs.

    python -m bench.bench_cp [--out DIR] [--prompt-tokens 32768 131072] [--layers 4] [--experts 8]
    python -m bench.bench_cp --out /tmp/cp --device cpu --config tiny-hybrid --prompt-tokens 500 --layers 3
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from bench.bench_server import TokenIds
from bench.bench_tp import agreement
from bench.common import parser, print_tables, write_result
from dayzero.export.options import ExportOptions
from dayzero.llm.api import LLM
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.paths import bundled_config
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.runtime.sampling import SamplingParams


def cut_down_config(name: str, layers: int, experts: int) -> dict:
    """A bundled config with `layers` - 1 KDA layers and then one MLA layer, `experts` routed experts."""
    data = json.loads(bundled_config(name).read_text())
    text = data.get("text_config", data)
    text["num_hidden_layers"] = layers
    text["linear_attn_config"]["kda_layers"] = list(range(1, layers))
    text["linear_attn_config"]["full_attn_layers"] = [layers]
    text["num_experts"] = experts
    text["num_experts_per_token"] = min(text["num_experts_per_token"], experts)
    for key in ("layer_types", "mlp_layer_types"):
        text.pop(key, None)
    return data


def _text(ids: list[int]) -> str:
    return " ".join(map(str, ids))


def first_token(checkpoint: Path, cp: int, prompts: list[list[int]], max_tokens: int, device: str,
                dtype: str) -> dict:
    longest = max(map(len, prompts))
    options = ExportOptions(backend="eager", device=device, dtype=dtype, cp=cp, max_batch=4,
                            max_len=longest + max_tokens + 64)
    started = time.perf_counter()
    runtime = RuntimeOptions(memory_bytes=8 << 30, token_budget=longest, cuda_graphs=False)
    with LLM(checkpoint, options, runtime, tokenizer=TokenIds()) as llm:
        loaded = time.perf_counter() - started
        llm.generate([_text(prompts[0][:1024])], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up
        rows = []
        for prompt in prompts:
            start = time.perf_counter()
            out = llm.generate([_text(prompt)], SamplingParams(max_tokens=1, ignore_eos=True))[0]
            ttft = time.perf_counter() - start
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            tokens = llm.generate([_text(prompt)], params)[0].token_ids
            rows.append({"prompt_tokens": len(prompt), "ttft_s": ttft, "first": out.token_ids, "tokens": tokens})
    return {"cp": cp, "load_s": loaded, "rows": rows}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--prompt-tokens", type=int, nargs="+", default=[32768, 131072])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--config", default="h200-slice")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (with --config tiny-hybrid)")
    args = p.parse_args()
    print(f"GPUs: {torch.cuda.device_count()}", flush=True)
    config_data = cut_down_config(args.config, args.layers, args.experts)
    vocab = config_data.get("text_config", config_data)["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in args.prompt_tokens]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(config_data))
        checkpoint = write_random_checkpoint(config, Path(tmp) / "ckpt", torch.bfloat16)
        one, two = (first_token(checkpoint, cp, prompts, args.max_tokens, args.device, args.dtype) for cp in (1, 2))
    rows = [{"case": f"{a['prompt_tokens']} tokens", "prompt_tokens": a["prompt_tokens"], "cp1_ttft_s": a["ttft_s"],
             "cp2_ttft_s": b["ttft_s"], "speedup": a["ttft_s"] / b["ttft_s"],
             "agreement": agreement([a["tokens"]], [b["tokens"]])} for a, b in zip(one["rows"], two["rows"])]
    tables = {"ttft": {"title": f"Time to first token, {args.config} cut to {args.layers} layers, one rank against two",
                       "rows": rows, "columns": {"case": "prompt", "cp1_ttft_s": "one rank s", "cp2_ttft_s": "--cp 2 s",
                                                 "speedup": "speedup", "agreement": "tokens agreeing"},
                       "plot": {"x": "case", "y": ["cp1_ttft_s", "cp2_ttft_s"], "ylabel": "s to the first token"}}}
    print_tables(write_result(args.out, "cp", tables, config=args.config, load_s=[one["load_s"], two["load_s"]]))


if __name__ == "__main__":
    main()
