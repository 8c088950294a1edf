"""Speculative decoding through the runtime (prompt-lookup drafts, greedy verification): the same requests decoded
with and without drafts, their tokens compared and their speed.

    python -m bench.bench_spec_decode --h200-slice [--num-layers N] [--requests 16] [--num-draft 3] [--margins]
    python -m bench.bench_spec_decode              (the embedded tiny model on the CPU)

Each prompt repeats a random phrase, so that the n-gram proposer finds matches. Reported per run: wall time,
generated tokens/s, engine steps, drafted and accepted tokens, and whether each request's tokens equal those of the
run without drafts (exact in arithmetic; on a GPU a verify step's batch of 1 + d rows a sequence may round a near-tie
otherwise, which the first differing token then shows).
"""

from __future__ import annotations

import torch

from bench.bench_server import decoded, direct, first_difference, h200_slice_llm
from bench.common import parser, print_tables, write_result
from dayzero.export.options import ExportOptions
from dayzero.llm.api import LLM
from dayzero.runtime.sampling import SamplingParams


def repetitive_prompts(requests: int, tokens: int, vocab: int, phrase: int = 24) -> list[list[int]]:
    """A random phrase of `phrase` tokens a request, repeated to `tokens`."""
    gen = torch.Generator().manual_seed(0)
    phrases = [torch.randint(0, vocab, (phrase,), generator=gen).tolist() for _ in range(requests)]
    return [(p * (tokens // phrase + 1))[:tokens] for p in phrases]


def decode_run(llm: LLM, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[list[int]]]:
    """bench_server's engine-alone run, with the engine steps, drafted and accepted tokens it took."""
    stats = llm.engine.stats
    before = (stats.steps, stats.drafted_tokens, stats.accepted_tokens)
    row, tokens = direct(llm, prompts, max_tokens)
    steps, drafted, accepted = (now - then for now, then in
                                zip((stats.steps, stats.drafted_tokens, stats.accepted_tokens), before))
    return {key: row[key] for key in ("wall_s", "tokens", "tokens_per_s")} | {
        "steps": steps, "drafted": drafted, "accepted": accepted}, tokens


def build(args, num_draft: int) -> LLM:
    if args.h200_slice:
        return h200_slice_llm(args.num_layers, args.requests, args.prompt_tokens + args.max_tokens + num_draft + 8,
                              num_draft)
    export = ExportOptions(backend="eager", device=args.device, dtype=args.dtype, max_batch=args.requests,
                           num_draft=num_draft)
    return LLM(args.checkpoint, export)


def measured(args, num_draft: int, prompts_of) -> tuple[dict, list[list[int]], list[list] | None]:
    """One engine with `num_draft` drafts: a warm-up run (compiles, the batch's decode graphs), then the timed run;
    with --margins one more, untimed, whose sequences keep each token's top-2 log-probabilities."""
    llm = build(args, num_draft)
    try:
        prompts = prompts_of(llm)
        decode_run(llm, prompts, 4)
        row, tokens = decode_run(llm, prompts, args.max_tokens)
        logprobs = None
        if args.margins:
            params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, logprobs=2)
            logprobs = [seq.logprobs for seq in decoded(llm, prompts, params)]
    finally:
        llm.close()
    return {"num_draft": num_draft, **row}, tokens, logprobs


def top2_gap(logprob) -> float:
    """How far the most likely token leads the second, in log-probability."""
    return logprob.top[0][1] - logprob.top[1][1]


def divergences(plain: list[list], drafted: list[list]) -> list[dict]:
    """Where a request's tokens first differ between the runs: the top-2 gap of each run there, and how far the two
    runs' log-probabilities of the same tokens drifted apart before it. A flipped near-tie has a gap about the drift;
    a wrong verify step shows a gap far above it."""
    rows = []
    for request, (want, got) in enumerate(zip(plain, drafted)):
        at = first_difference([p.token for p in got], [p.token for p in want])
        if at is None or at >= min(len(want), len(got)):
            continue
        drift = max((abs(w.logprob - g.logprob) for w, g in zip(want[:at], got[:at])), default=0.0)
        rows.append({"request": request, "token": at, "gap_plain": top2_gap(want[at]), "gap_drafted": top2_gap(got[at]),
                     "drift_before": drift})
    return rows


COLUMNS = {"case": "engine", "wall_s": "wall s", "tokens_per_s": "tokens/s", "steps": "steps", "drafted": "drafted",
           "accepted": "accepted", "requests_differing": "requests unlike the plain run",
           "first_differing_token": "first differing token"}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--h200-slice", action="store_true", help="the h200-slice model built on the GPU")
    p.add_argument("--num-layers", type=int, default=None, help="with --h200-slice: its first N layers")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--num-draft", type=int, default=3)
    p.add_argument("--margins", action="store_true",
                   help="also decode with top-2 log-probabilities and report where and by how much runs differ")
    args = p.parse_args()
    if args.h200_slice:
        args.device = "cuda"

    def prompts_of(llm: LLM) -> list[list[int]]:
        return repetitive_prompts(args.requests, args.prompt_tokens, min(llm.engine.manifest.vocab_size, 256))

    plain, plain_tokens, plain_logprobs = measured(args, 0, prompts_of)
    drafted, drafted_tokens, drafted_logprobs = measured(args, args.num_draft, prompts_of)
    firsts = [d for d in (first_difference(got, want) for got, want in zip(drafted_tokens, plain_tokens))
              if d is not None]
    drafted.update({"requests_differing": len(firsts), "first_differing_token": min(firsts) if firsts else None,
                    "speedup": plain["wall_s"] / drafted["wall_s"]})
    plain["case"], drafted["case"] = "plain", f"{args.num_draft} prompt-lookup drafts"
    model = f"h200-slice ({args.num_layers or 'all'} layers)" if args.h200_slice else "the embedded model"
    tables = {"decode": {"title": f"Speculative decoding, {model}, {args.requests} requests, greedy",
                         "columns": COLUMNS, "rows": [plain, drafted],
                         "plot": {"x": "case", "y": ["tokens_per_s"], "ylabel": "generated tokens/s"}}}
    if args.margins:
        tables["divergences"] = {"title": "Where the runs differ: top-2 log-probability gaps", "rows": divergences(
            plain_logprobs, drafted_logprobs), "columns": {"request": "request", "token": "token",
                                                           "gap_plain": "gap, plain", "gap_drafted": "gap, drafted",
                                                           "drift_before": "drift before"}}
    print_tables(write_result(args.out, "spec_decode", tables))


if __name__ == "__main__":
    main()
