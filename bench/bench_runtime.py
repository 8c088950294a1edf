"""The runtime's decode rate eagerly, with CUDA graphs, and with graphs and the host overlapped with the device
(RuntimeOptions.overlap), and the time to first token, on the h200-slice.

    python -m bench.bench_runtime [--out DIR] [--num-layers N] [--decode-steps 32] [--ttft-tokens 8192,32768]

The h200-slice (8 layers: 6 KDA + 2 DSA-MLA at K3.1 width, 64 experts top-16, random bf16 weights built on the GPU)
behind the eager engine in the runtime (`LLMEngine`: scheduler, 64-token pages, state slots, sampling), FP8 latent +
MXFP8 index caches. Decode rate = generated tokens / wall time of the decode steps only, after 128-token prompts,
greedy and sampled (temperature 1, top-p 0.95, HTTP's defaults but top-p); the graph runs capture one graph per batch
bucket during their first decode step (not timed). A step's time is taken between the returns of `LLMEngine.step`,
each of which has waited for one step's tokens (with overlap, after launching the next step), so both modes are
timed over the same number of device steps. Host ms: the part of a step the host spends outside its wait for the
tokens. Time to first token: one prompt, chunked prefill with an 8192-token budget, after a warm-up prompt that
compiled the prefill kernels. Targets: >= 3x from CUDA graphs at batch 1; overlap: the step time of the device alone.
"""

from __future__ import annotations

import dataclasses
import gc
import time

import torch

from bench.common import h200_slice_model, parser, print_tables, write_result
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime import transfers
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams

PROMPT = 128
TOKEN_BUDGET = 8192  # prefill tokens per step


GREEDY = SamplingParams(ignore_eos=True)
SAMPLED = SamplingParams(ignore_eos=True, temperature=1.0, top_p=0.95)
# decode runs: (column prefix, CUDA graphs, overlap)
MODES = [("eager", False, False), ("graph", True, False), ("overlap", True, True)]


def runtime(model, graphs: bool, max_batch: int, max_len: int, memory_fraction: float = 0.5,
            overlap: bool = False) -> LLMEngine:
    # the previous engine's caches and graph pool go back first: each engine takes half of the free memory
    gc.collect()
    torch.cuda.empty_cache()
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=max_batch, max_len=max_len)
    options = RuntimeOptions(cuda_graphs=graphs, token_budget=TOKEN_BUDGET, gpu_memory_fraction=memory_fraction,
                             overlap=overlap)
    return LLMEngine(EagerEngine(model, manifest), options)


class WaitTimer:
    """Seconds the host spends waiting for tokens on their way from the device (transfers.Download.wait)."""

    def __init__(self):
        self.seconds, self._wait = 0.0, transfers.Download.wait

    def __enter__(self) -> WaitTimer:
        timer, wait = self, self._wait

        def timed(download):
            start = time.perf_counter()
            try:
                return wait(download)
            finally:
                timer.seconds += time.perf_counter() - start

        transfers.Download.wait = timed
        return self

    def __exit__(self, *exc) -> None:
        transfers.Download.wait = self._wait


def decode_rate(model, batch: int, graphs: bool, overlap: bool, steps: int, params: SamplingParams) -> dict:
    engine = runtime(model, graphs, max_batch=max(batch, 1), max_len=PROMPT + steps + 8, overlap=overlap)
    for _ in range(batch):
        engine.add_request(torch.randint(0, 1000, (PROMPT,)).tolist(), dataclasses.replace(params,
                                                                                           max_tokens=steps + 4))
    while engine.stats.decode_tokens == 0:
        engine.step()  # prefills, then the first decode step (captures the graph); with overlap the next is in flight
    start, done = time.perf_counter(), engine.stats.decode_tokens
    with WaitTimer() as waited:
        for _ in range(steps):
            engine.step()
    elapsed = time.perf_counter() - start
    failed = getattr(engine.decode, "failed", {})
    return {"tokens_per_s": (engine.stats.decode_tokens - done) / elapsed, "step_ms": elapsed / steps * 1e3,
            "host_ms": (elapsed - waited.seconds) / steps * 1e3, "overlapped": engine.stats.overlapped,
            "capture_failed": failed or None}


def decode_row(model, batch: int, steps: int, params: SamplingParams) -> dict:
    row = {"batch": batch}
    for name, graphs, overlap in MODES:
        run = decode_rate(model, batch, graphs, overlap, steps, params)
        row.update({f"{name}_tokens_per_s": run["tokens_per_s"], f"{name}_step_ms": run["step_ms"],
                    f"{name}_host_ms": run["host_ms"]})
        if run["capture_failed"]:
            row["capture_failed"] = run["capture_failed"]
    row["speedup"] = row["graph_tokens_per_s"] / row["eager_tokens_per_s"]
    row["overlap_speedup"] = row["overlap_tokens_per_s"] / row["graph_tokens_per_s"]
    return row


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


DECODE_COLUMNS = {"batch": "batch", "eager_step_ms": "eager step ms", "graph_tokens_per_s": "graphs tokens/s",
                  "graph_step_ms": "graphs step ms", "graph_host_ms": "graphs host ms",
                  "overlap_tokens_per_s": "graphs + overlap tokens/s", "overlap_step_ms": "graphs + overlap step ms",
                  "overlap_host_ms": "graphs + overlap host ms", "speedup": "graphs / eager",
                  "overlap_speedup": "overlap / graphs"}


def tables(decode: list, sampled: list, ttft: list) -> dict:
    plot = {"x": "batch", "y": ["eager_tokens_per_s", "graph_tokens_per_s", "overlap_tokens_per_s"],
            "ylabel": "tokens/s", "log": True}
    return {
        "decode": {"title": "h200-slice greedy decode through the runtime", "rows": decode, "columns": DECODE_COLUMNS,
                   "plot": plot},
        "sampled": {"title": "h200-slice sampled decode (temperature 1, top-p 0.95) through the runtime",
                    "rows": sampled, "columns": DECODE_COLUMNS},
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
    decode, sampled = [], []
    for rows, params in ((decode, GREEDY), (sampled, SAMPLED)):
        for batch in (1, 16, 64):
            rows.append(decode_row(model, batch, args.decode_steps, params))
            print(rows[-1], flush=True)
    ttft = [time_to_first_token(model, int(length)) for length in args.ttft_tokens.split(",")]
    print_tables(write_result(args.out, "runtime", tables(decode, sampled, ttft),
                              layers=list(model.config.layer_kinds)))


if __name__ == "__main__":
    main()
