"""What answers held to a JSON schema cost the host per decode step: each sequence's logits row masked to the tokens
its answer allows, then its answer moved on by the chosen token, at batch 1 and 64, over a real vocabulary's size.

    python -m bench.bench_structured_host [--vocab 163840] [--tiktoken PATH] [--out DIR]

Every sequence writes the same schema-following answer (tokenized by longest match over the vocabulary), the batch's
sequences at staggered places in it, a finished one starting anew. "first walk" is a grammar's first pass over the
answer (nothing kept from before), "again" a second pass. Without --tiktoken the vocabulary is synthetic: the 256
bytes, then the most common words, numbers, punctuation runs and their space-led forms of the Python sources next to
this interpreter (a stand-in for a BPE vocabulary with the same mix of pieces), up to --vocab entries; with
--tiktoken (Kimi's tiktoken.model) it is the real one. Runs on the CPU (the host's work). The results keep each
engine's table (the engine measured, and those measured at other commits), each with its commit.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import sysconfig
import time
from pathlib import Path

import torch

from bench.common import commit, parser, print_tables, write_result

BATCHES = (1, 64)
SCHEMA = {
    "type": "object", "title": "Order",
    "properties": {
        "id": {"type": "integer", "minimum": 0}, "customer": {"type": "string", "maxLength": 40},
        "status": {"enum": ["open", "paid", "shipped"]},
        "items": {"type": "array", "maxItems": 8, "items": {"$ref": "#/$defs/Item"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "rush": {"type": "boolean"}},
    "required": ["id", "customer", "status", "items"],
    "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                                                       "price": {"type": "number"}},
                       "required": ["sku", "qty", "price"]}}}
ANSWER = json.dumps({"id": 1042, "customer": "Ada Lovelace, London", "status": "paid",
                     "items": [{"sku": "KIMI-K3-1", "qty": 2, "price": 19.5},
                               {"sku": "attention residuals", "qty": 1, "price": 0.125}],
                     "note": "leave it with the neighbour, please \u00e9", "rush": False}, indent=1,
                    ensure_ascii=False)


def synthetic_vocabulary(size: int) -> list[bytes]:
    counts = collections.Counter()
    pattern = re.compile(rb" ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]{1,3}|\s+")
    for path in Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"):
        counts.update(pattern.findall(path.read_bytes()))
    pieces = [bytes([b]) for b in range(256)]
    seen = set(pieces)
    for piece, _ in counts.most_common():
        if len(pieces) >= size:
            break
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)
    return pieces


def tiktoken_vocabulary(path: str) -> list[bytes]:
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(path)
    return [piece for piece, _ in sorted(ranks.items(), key=lambda item: item[1])]


def longest_match_tokens(text: bytes, pieces: list[bytes]) -> list[int]:
    ids = {piece: token for token, piece in enumerate(pieces)}
    longest = max(map(len, pieces))
    tokens, at = [], 0
    while at < len(text):
        size = next(n for n in range(min(longest, len(text) - at), 0, -1) if text[at:at + n] in ids)
        tokens.append(ids[text[at:at + size]])
        at += size
    return tokens


class HandwrittenEngine:
    """The hand-written grammar engine (dayzero/structured/ json_grammar + token_grammar)."""

    name = "handwritten"

    def __init__(self, pieces: list[bytes]):
        from dayzero.structured.token_grammar import TokenTable

        self.table = TokenTable(lambda t: pieces[t] if t < len(pieces) else None, len(pieces))

    def compile(self, schema: dict):
        from dayzero.structured.json_schema import compile_schema

        # a grammar and vocabulary with nothing kept from an earlier walk
        self.table._masks.clear()
        self.table._unsafe_walks.clear()
        return compile_schema(schema)

    def answer(self, grammar):
        from dayzero.structured.token_grammar import JsonAnswer

        return JsonAnswer(self.table, grammar)


ENGINE = HandwrittenEngine


def step_ms(engine, grammar, tokens: list[int], batch: int, logits: torch.Tensor) -> float:
    """Mean host ms of one decode step over len(tokens) steps: every sequence's row masked, then its answer moved."""
    answers = [engine.answer(grammar) for _ in range(batch)]
    places = [(i * 7) % len(tokens) for i in range(batch)]
    for answer, place in zip(answers, places):
        for token in tokens[:place]:
            answer.advance(token)
    start = time.perf_counter()
    for _ in range(len(tokens)):
        for index in range(batch):
            answers[index].mask(logits[index:index + 1])
            answers[index].advance(tokens[places[index]])
            places[index] += 1
            if answers[index].done:
                answers[index], places[index] = engine.answer(grammar), 0
    return 1e3 * (time.perf_counter() - start) / len(tokens)


def measure(engine_type, pieces: list[bytes]) -> dict:
    tokens = longest_match_tokens(ANSWER.encode(), pieces)
    start = time.perf_counter()
    engine = engine_type(pieces)
    vocabulary_s = time.perf_counter() - start
    rows = []
    for batch in BATCHES:
        logits = torch.randn(batch, len(pieces))
        start = time.perf_counter()
        grammar = engine.compile(SCHEMA)
        compile_ms = 1e3 * (time.perf_counter() - start)
        first = step_ms(engine, grammar, tokens, batch, logits)
        again = step_ms(engine, grammar, tokens, batch, logits)
        rows.append({"batch": batch, "first_ms": first, "again_ms": again, "again_us_per_seq": 1e3 * again / batch,
                     "compile_ms": compile_ms})
    title = (f"{engine.name}: a step's masks and moves, {len(tokens)}-token answer, {len(pieces)}-entry vocabulary "
             f"(vocabulary prepared once in {vocabulary_s:.2f} s)")
    return {"title": title, "commit": commit(), "vocabulary_s": vocabulary_s, "rows": rows,
            "columns": {"batch": "batch", "compile_ms": "schema compile ms", "first_ms": "first walk, ms a step",
                        "again_ms": "again, ms a step", "again_us_per_seq": "again, us a sequence"}}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--vocab", type=int, default=163840)
    p.add_argument("--tiktoken", default=None)
    args = p.parse_args()
    pieces = tiktoken_vocabulary(args.tiktoken) if args.tiktoken else synthetic_vocabulary(args.vocab)
    torch.manual_seed(0)
    previous = args.out / "structured_host.json"
    tables = json.loads(previous.read_text())["tables"] if previous.is_file() else {}
    tables[ENGINE.name] = measure(ENGINE, pieces)
    print_tables(write_result(args.out, "structured_host", tables, software={"python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
