"""The runtime's host time per decode step on the CPU, with and without overlap (RuntimeOptions.overlap).

    python -m bench.bench_step_host [--out DIR] [--steps 48] [--batches 1,16,64] [--repeats 3] [--max-len 1048576]

The tiny-hybrid model (6 layers, random float32 weights) behind the eager engine in `LLMEngine`, one intra-op thread:
per decode step (after 16-token prompts), the CPU time of the engine's thread in `LLMEngine.step`, the model's share
of it (the engine's decode calls) and the rest, the runtime's own work (scheduling, inputs, sampling, emitting).
Thread CPU time, not wall time: other processes on a shared machine then change the numbers little. On a CPU the
model runs on the host thread, so overlap hides nothing here: the run shows what its bookkeeping costs. The best of
`--repeats` runs per case. `--max-len`: the longest sequence the engine takes (default Kimi-Linear's 1M tokens, as an
engine served at a model's full context is built).
"""

from __future__ import annotations

import dataclasses
import json
import time

import torch

from bench.common import parser, print_tables, write_result
from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.random_init import init_random_
from dayzero.model.weights import build_empty
from dayzero.paths import bundled_config
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams

PROMPT = 16
PARAMS = {"greedy": SamplingParams(ignore_eos=True),
          "sampled": SamplingParams(ignore_eos=True, temperature=1.0, top_p=0.95, presence_penalty=0.5, logprobs=2)}


def tiny_model():
    model = build_empty(ModelConfig.from_dict(json.loads(bundled_config("tiny-hybrid").read_text())), torch.float32,
                        "cpu")
    init_random_(model, 0)
    return model.eval()


def step_times(model, batch: int, steps: int, overlap: bool, params: SamplingParams, max_len: int) -> dict:
    manifest = eager_manifest(model, CacheFormat(), max_batch=batch, max_len=max_len)
    engine = LLMEngine(EagerEngine(model, manifest), RuntimeOptions(memory_bytes=256 << 20, overlap=overlap))
    gen = torch.Generator().manual_seed(batch)
    for _ in range(batch):
        engine.add_request(torch.randint(0, 256, (PROMPT,), generator=gen).tolist(),
                           dataclasses.replace(params, max_tokens=steps + 4))
    while engine.stats.decode_tokens == 0:
        engine.step()
    decode, in_model = engine.decode, [0.0]

    def timed(input_ids, meta):
        start = time.thread_time()
        try:
            return decode(input_ids, meta)
        finally:
            in_model[0] += time.thread_time() - start

    engine.decode = timed
    start = time.thread_time()
    for _ in range(steps):
        engine.step()
    elapsed = time.thread_time() - start
    return {"step_ms": elapsed / steps * 1e3, "model_ms": in_model[0] / steps * 1e3,
            "host_ms": (elapsed - in_model[0]) / steps * 1e3}


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda run: run["host_ms"])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-len", type=int, default=1 << 20)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = tiny_model()
    rows = []
    for name, params in PARAMS.items():
        for batch in (int(b) for b in args.batches.split(",")):
            row = {"params": name, "batch": batch}
            for overlap in (False, True):
                run = best([step_times(model, batch, args.steps, overlap, params, args.max_len)
                            for _ in range(args.repeats)])
                key = "overlap" if overlap else "sync"
                row.update({f"{key}_{field}": value for field, value in run.items()})
            rows.append(row)
            print(rows[-1], flush=True)
    columns = {"params": "requests", "batch": "batch", "sync_step_ms": "step ms", "sync_model_ms": "model ms",
               "sync_host_ms": "host ms", "overlap_step_ms": "overlap: step ms", "overlap_model_ms": "model ms",
               "overlap_host_ms": "host ms"}
    table = {"title": f"tiny-hybrid decode step on the CPU (one thread, its CPU time), max_len {args.max_len}",
             "rows": rows,
             "columns": columns}
    print_tables(write_result(args.out, "step_host", {"step_host": table}))


if __name__ == "__main__":
    main()
