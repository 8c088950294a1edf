"""Tensor parallelism on GPUs (NCCL): greedy generation through one rank and through `--tp 2`, on the same random
checkpoint, per backend; records whether the tokens agree and the decode rate. Needs 2 GPUs.

    python -m bench.bench_tp [--out DIR] [--config tiny-hybrid] [--backends eager aoti]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from bench.common import parser, print_tables, write_result
from dayzero.export.options import ExportOptions
from dayzero.llm.api import LLM
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.paths import bundled_config
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.runtime.sampling import SamplingParams

PROMPTS = ["The hybrid model reads a long document", "tensor parallel decoding", "one two three four", "a b c d e"]


def generate(checkpoint: Path, backend: str, tp: int, max_tokens: int) -> dict:
    options = ExportOptions(backend=backend, device="cuda", dtype="bfloat16", tp=tp, max_batch=8)
    started = time.perf_counter()
    with LLM(checkpoint, options, RuntimeOptions(memory_bytes=2 << 30)) as llm:
        loaded = time.perf_counter() - started
        llm.generate(PROMPTS[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
        start = time.perf_counter()
        outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        elapsed = time.perf_counter() - start
    tokens = [o.token_ids for o in outputs]
    return {"backend": backend, "tp": tp, "load_s": loaded, "generate_s": elapsed,
            "tokens_per_s": sum(map(len, tokens)) / elapsed, "tokens": tokens}


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of positions up to each sequence's first disagreement (bf16 near-ties may flip a token)."""
    total = agree = 0
    for x, y in zip(a, b):
        total += len(x)
        agree += next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x))
    return agree / total


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--config", default="tiny-hybrid")
    p.add_argument("--backends", nargs="+", default=["eager", "aoti"])
    p.add_argument("--max-tokens", type=int, default=32)
    args = p.parse_args()
    print(f"GPUs: {torch.cuda.device_count()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_random_checkpoint(bundled_config(args.config), Path(tmp) / "ckpt", torch.bfloat16)
        for backend in args.backends:
            one, two = (generate(checkpoint, backend, tp, args.max_tokens) for tp in (1, 2))
            two["agreement_with_tp1"] = agreement(one["tokens"], two["tokens"])
            rows += [one, two]
    for row in rows:
        row["case"] = f"{row['backend']}, tp {row['tp']}"
        row.pop("tokens")
    tables = {"generate": {"title": f"Greedy generation, {args.config}, one rank against two", "rows": rows,
                           "columns": {"case": "engine", "load_s": "load s", "tokens_per_s": "tokens/s",
                                       "agreement_with_tp1": "tokens agreeing with one rank"},
                           "plot": {"x": "case", "y": ["tokens_per_s"], "ylabel": "tokens/s"}}}
    print_tables(write_result(args.out, "tp", tables, config=args.config))


if __name__ == "__main__":
    main()
