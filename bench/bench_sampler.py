"""What a decode step's token choice costs at batch 64 over a 163,840-token vocabulary: top-p 0.9, temperature 0.7,
repetition (1.1) and presence (0.5) penalties and 5 log probabilities a request, each request seeded, its 512-token
prompt and 256-token answer so far counted by the penalties. The batched sampler (runtime/batch_sampler.py) against
the per-row path of a checkout given by --before (`git worktree add /tmp/before 87d8135`: one Python call a row with a
full-vocabulary sort and a host copy each), measured in a child process that imports that checkout's dayzero.

    python -m bench.bench_sampler [--device cuda] [--before PATH] [--steps 5] [--out DIR]

Logits are Gaussian: std 4 (peaked, top-p keeps tens of tokens) and std 1 (flat, thousands: more than the CPU's
top-p candidates, so those rows are sorted whole). Each step appends the chosen tokens to the answers, as decoding
does; a step's time ends with its tokens and log probabilities on the host. Before timing, the batched tokens are
checked to lie in the support of the per-row reference (penalties.penalized, sampling.filtered_logits).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.common import parser, print_tables, write_result

BATCH, VOCAB, PROMPT, ANSWER = 64, 163840, 512, 256
SCALES = {"peaked (std 4)": 4.0, "flat (std 1)": 1.0}


def requests():
    from dayzero.runtime.sampling import SamplingParams
    from dayzero.runtime.sequence import Sequence

    generator = torch.Generator().manual_seed(0)
    seqs = []
    for seed in range(BATCH):
        params = SamplingParams(max_tokens=4096, temperature=0.7, top_p=0.9, repetition_penalty=1.1,
                                presence_penalty=0.5, logprobs=5, seed=seed)
        seq = Sequence(torch.randint(0, VOCAB, (PROMPT,), generator=generator).tolist(), params)
        seq.output_ids = torch.randint(0, VOCAB, (ANSWER,), generator=generator).tolist()
        seqs.append(seq)
    return seqs


def batched(device: str):
    from dayzero.runtime.batch_sampler import BatchSampler

    sampler = BatchSampler(VOCAB, frozenset(), device)
    return lambda logits, seqs: [out.tokens[0] for out in sampler(logits, seqs)]


def per_row(device: str):
    """The decode step of a checkout before the batched sampler: every row's argmax in one sync, then one call a row
    (penalties, the row's sort and host copy, a multinomial draw) and its log probabilities."""
    from dayzero.runtime.llm_engine import _adjusted
    from dayzero.runtime.logprobs import token_logprob
    from dayzero.runtime.spec_decode import accept

    def step(logits, seqs):
        tokens = []
        for seq, rows, _ in zip(seqs, logits, logits.argmax(-1).tolist()):
            token = accept(_adjusted(seq, rows[:1], [], frozenset()), [], seq.sampler)[0]
            token_logprob(rows[0], token, seq.params.logprobs)
            tokens.append(token)
        return tokens
    return step


def check_support(logits: torch.Tensor, seqs, tokens: list[int]) -> None:
    from dayzero.runtime.penalties import penalized
    from dayzero.runtime.sampling import filtered_logits

    for seq, rows, token in list(zip(seqs, logits, tokens))[:4]:
        row = penalized(rows[:1].cpu(), seq.prompt_ids, seq.output_ids, [], seq.params)[0]
        assert torch.isfinite(filtered_logits(row, seq.params)[token]), "a token outside the reference's support"


def step_ms(step, device: str, scale: float, steps: int, check: bool) -> float:
    generator = torch.Generator(device).manual_seed(1)
    logits = [torch.randn(BATCH, 1, VOCAB, device=device, generator=generator) * scale for _ in range(steps + 1)]
    seqs = requests()
    times = []
    for index, rows in enumerate(logits):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = step(rows, seqs)
        times.append(1e3 * (time.perf_counter() - start))
        if check and index == 0:
            check_support(rows, seqs, tokens)
        for seq, token in zip(seqs, tokens):
            seq.output_ids.append(token)
    # the first step builds what later ones reuse (the batched sampler's plan and count rows)
    return sorted(times[1:])[len(times[1:]) // 2]


@torch.inference_mode()
def measure(device: str, steps: int) -> dict:
    is_batched = importlib.util.find_spec("dayzero.runtime.batch_sampler") is not None
    step = (batched if is_batched else per_row)(device)
    return {"impl": "batched" if is_batched else "per-row",
            "ms": {case: step_ms(step, device, scale, steps, is_batched) for case, scale in SCALES.items()}}


def before(path: str, device: str, steps: int) -> dict:
    command = [sys.executable, "-m", "bench.bench_sampler", "--tree", path, "--device", device, "--steps", str(steps),
               "--print-json"]
    done = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--before", default=None, help="a checkout of the per-row sampler's commit")
    # the child process of --before: import dayzero from this checkout, print the measurement
    p.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    p.add_argument("--print-json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    if args.print_json:
        print(json.dumps(measure(args.device, args.steps)))
        return
    old = before(args.before, args.device, args.steps) if args.before else None
    new = measure(args.device, args.steps)
    rows = [{"case": case, "before_ms": old and old["ms"][case], "after_ms": ms,
             "speedup": old and old["ms"][case] / ms} for case, ms in new["ms"].items()]
    tables = {"step": {"title": f"Token choice of a decode step: batch {BATCH}, vocabulary {VOCAB}, top-p 0.9, "
                                f"temperature 0.7, repetition + presence penalties, 5 logprobs", "rows": rows,
                       "columns": {"case": "logits", "before_ms": "per-row ms", "after_ms": "batched ms",
                                   "speedup": "speedup"}}}
    print_tables(write_result(args.out, "sampler", tables, device=args.device,
                              before_commit=args.before and commit_of(args.before)))


def commit_of(path: str) -> str | None:
    done = subprocess.run(["git", "-C", path, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


if __name__ == "__main__":
    main()
