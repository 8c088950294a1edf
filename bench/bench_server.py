"""What the HTTP layer costs: the same greedy requests through the engine directly and through `dayzero serve`'s
OpenAI API (uvicorn on a local port, streamed, all requests at once), on the embedded model or a checkpoint.

    python -m bench.bench_server [--checkpoint DIR] [--device cpu|cuda] [--requests 16,64] [--prompt-tokens 64]
                                 [--max-tokens 32] [--out DIR]
    python -m bench.bench_server --h200-slice --prompt-tokens 512 --max-tokens 128   (random bf16 weights built on
        the GPU, FP8 latent + MXFP8 index caches, CUDA-graph decode; prompts and text as token ids)

Three passes over the same greedy requests (EOS ignored): the engine alone, the server with its HTTP
thread in the engine's process (`run_server`), and the server as `dayzero serve` serves, HTTP in a process of its
own (`serve`, http_process.py). Reported: wall time, generated tokens/s, and for the served runs the time to each
request's first streamed text (p50 / max) and the mean gap between its pieces. The engine stays on the main thread in
all; the clients are a process of their own. Texts are compared with the engine's: the engine promises no
batch-invariant kernels, so a request prefilled in another batch mix may round a greedy near-tie otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import torch

from bench.common import parser, print_tables, write_result
from dayzero.export.options import ExportOptions
from dayzero.llm.api import LLM
from dayzero.runtime.sampling import SamplingParams
from dayzero.server.http_host import leave_a_core_for_http, serve
from dayzero.server.listener import serve_in_thread, wait_healthy
from dayzero.server.server import OpenAIServer, ServerOptions


def decoded(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> list:
    """The engine's sequences of `prompts`, stepped until all are done."""
    seqs = [llm.engine.add_request(p, params) for p in prompts]
    while llm.engine.has_work:
        llm.engine.step()
    return seqs


def direct(llm: LLM, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[list[int]]]:
    start = time.perf_counter()
    seqs = decoded(llm, prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    wall = time.perf_counter() - start
    tokens = sum(len(s.output_ids) for s in seqs)
    return {"mode": "engine", "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall}, [
        s.output_ids for s in seqs]


async def streamed(http: httpx.AsyncClient, prompt: list[int], max_tokens: int, start: float) -> dict:
    request = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}}
    arrivals, text, usage = [], "", None
    async with http.stream("POST", "/v1/completions", json=request) as reply:
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            body = json.loads(line.removeprefix("data: "))
            if body["choices"] and body["choices"][0]["text"]:
                arrivals.append(time.perf_counter() - start)
                text += body["choices"][0]["text"]
            usage = body.get("usage", usage)
    return {"arrivals": arrivals, "text": text, "tokens": usage["completion_tokens"]}


async def served_all(base: str, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[str]]:
    limits = httpx.Limits(max_connections=len(prompts))
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:
        start = time.perf_counter()
        results = await asyncio.gather(*(streamed(http, p, max_tokens, start) for p in prompts))
        wall = time.perf_counter() - start
    firsts = [r["arrivals"][0] for r in results if r["arrivals"]]
    gaps = [b - a for r in results for a, b in zip(r["arrivals"], r["arrivals"][1:])]
    tokens = sum(r["tokens"] for r in results)
    row = {"mode": "http (streamed)", "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
           "first_text_p50_s": statistics.median(firsts), "first_text_max_s": max(firsts),
           "piece_gap_mean_ms": 1e3 * statistics.fmean(gaps) if gaps else None,
           "first_text_s": [round(r["arrivals"][0], 3) if r["arrivals"] else None for r in results]}
    return row, [r["text"] for r in results]


def first_difference(got: list[str], want: list[str]) -> int | None:
    """The index of the first word where two word lists differ (the shorter one's length if one is a prefix of the
    other), None where they are equal."""
    if got == want:
        return None
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def agreement(texts: list[str], expected: list[str]) -> dict:
    """How served texts compare with the engine's (TokenIds text: one word a token): all the same; how many differ;
    the earliest token at which one differs (a near tie flipped by another batch mix shows late and in few texts; a
    lost or reordered update early, or as a short text)."""
    firsts = [i for got, want in zip(texts, expected) if (i := first_difference(got.split(), want.split())) is not None]
    return {"same_text_as_engine": not firsts and len(texts) == len(expected), "texts_differing": len(firsts),
            "first_differing_token": min(firsts) if firsts else None}


class TokenIds:
    """A stand-in tokenizer for a model without tokenizer files: text is the token ids, space-separated."""

    eos_token_id = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids: list[int]) -> str:
        return "".join(f" {i}" for i in ids)


def h200_slice_llm(num_layers: int | None, max_batch: int, max_len: int, num_draft: int = 0) -> LLM:
    from bench.common import h200_slice_model
    from dayzero.model.caches import CacheFormat
    from dayzero.model.eager_engine import EagerEngine, eager_manifest
    from dayzero.runtime.llm_engine import RuntimeOptions

    model = h200_slice_model(num_layers)
    fmt = CacheFormat(kv_fp8=True, index_mxfp8=True)
    engine = EagerEngine(model, eager_manifest(model, fmt, max_batch=max_batch, max_len=max_len, num_draft=num_draft))
    return LLM("h200-slice", runtime=RuntimeOptions(gpu_memory_fraction=0.5), engine=engine, tokenizer=TokenIds())


def served_run(llm: LLM, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[str]]:
    """As `run_server` runs: the engine on the main thread (on a CPU with a core left for HTTP), the HTTP server on
    another; the clients in a process of their own, as remote clients would be (in this process they took GIL time
    from the engine: 1.36 against 1.17-1.22 s on the 2-core CPU)."""
    leave_a_core_for_http(llm.engine.manifest.device)
    server = OpenAIServer(llm, ServerOptions(), engine_thread=False)
    base, stop = serve_in_thread(server.app)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as request_file:
        json.dump({"base": base, "prompts": prompts, "max_tokens": max_tokens}, request_file)
        request_file.flush()
        clients = subprocess.Popen([sys.executable, "-m", "bench.bench_server", "--clients", request_file.name],
                                   stdout=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: (clients.wait(), server.loop.stop()), daemon=True).start()
        server.loop.run()
        answer = json.loads(clients.stdout.read())
    stop()
    return answer["row"], answer["texts"]


def served_process_run(llm: LLM, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[str]]:
    """As `dayzero serve` runs: the engine on the main thread, the HTTP server in a process of its own; the clients
    wait for /health, and SIGTERM (a drain with nothing open) ends serve() once they are done."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as request_file:
        json.dump({"base": f"http://127.0.0.1:{port}", "prompts": prompts, "max_tokens": max_tokens,
                   "wait_healthy": True}, request_file)
        request_file.flush()
        clients = subprocess.Popen([sys.executable, "-m", "bench.bench_server", "--clients", request_file.name],
                                   stdout=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: (clients.wait(), os.kill(os.getpid(), signal.SIGTERM)), daemon=True).start()
        serve(llm, ServerOptions(port=port, warm_up=False))
        answer = json.loads(clients.stdout.read())
    return {**answer["row"], "mode": "http process (streamed)"}, answer["texts"]


def clients_main(request_file: str) -> None:
    """The clients' process: the requests in request_file, streamed all at once -> JSON on stdout."""
    request = json.loads(Path(request_file).read_text())
    if request.get("wait_healthy") and not wait_healthy(request["base"], 120):
        raise SystemExit(f"{request['base']} did not become healthy in 120 s")
    row, texts = asyncio.run(served_all(request["base"], request["prompts"], request["max_tokens"]))
    print(json.dumps({"row": row, "texts": texts}))


def modes(llm: LLM, requests: int, prompt_tokens: int, max_tokens: int) -> list[dict]:
    """The engine alone, HTTP on a thread of its process, HTTP in a process of its own: one row each."""
    vocab = min(llm.engine.manifest.vocab_size, 256)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (prompt_tokens,), generator=gen).tolist() for _ in range(requests)]
    direct(llm, prompts, 2)  # warm-up: first-call allocations, Triton compiles, the batch's decode graph
    engine_row, engine_tokens = direct(llm, prompts, max_tokens)
    expected = [llm.tokenizer.decode(t) for t in engine_tokens]
    threads = torch.get_num_threads()
    http_row, texts = served_run(llm, prompts, max_tokens)
    torch.set_num_threads(threads)  # each served run leaves a core for HTTP from the same count
    process_row, process_texts = served_process_run(llm, prompts, max_tokens)
    rows = [engine_row, {**http_row, **agreement(texts, expected)},
            {**process_row, **agreement(process_texts, expected)}]
    return [{"case": f"{requests} requests, {row['mode']}", "requests": requests, **row} for row in rows]


COLUMNS = {"case": "requests, mode", "wall_s": "wall s", "tokens_per_s": "tokens/s",
           "first_text_p50_s": "first text p50 s", "first_text_max_s": "first text max s",
           "piece_gap_mean_ms": "gap between pieces ms", "texts_differing": "texts unlike the engine's"}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--requests", default="16", help="comma-separated request counts")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--h200-slice", action="store_true", help="the h200-slice model built on the GPU")
    p.add_argument("--num-layers", type=int, default=None, help="with --h200-slice: its first N layers")
    p.add_argument("--clients", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.clients:
        return clients_main(args.clients)
    counts = [int(n) for n in args.requests.split(",")]
    if args.h200_slice:
        llm = h200_slice_llm(args.num_layers, max(counts), args.prompt_tokens + args.max_tokens + 8)
    else:
        llm = LLM(args.checkpoint, ExportOptions(backend="eager", device=args.device, dtype=args.dtype,
                                                 max_batch=max(counts)))
    rows = [row for n in counts for row in modes(llm, n, args.prompt_tokens, args.max_tokens)]
    model = "h200-slice" if args.h200_slice else args.checkpoint or "the embedded model"
    tables = {"server": {"title": f"HTTP's cost, {model}, {args.prompt_tokens} tokens in, {args.max_tokens} out",
                         "columns": COLUMNS, "rows": rows,
                         "plot": {"x": "case", "y": ["tokens_per_s"], "ylabel": "generated tokens/s"}}}
    print_tables(write_result(args.out, "server", tables))


if __name__ == "__main__":
    main()
