"""What answers held to a JSON schema cost the host per decode step, at batch 1 and 64 over a real vocabulary's size:
the grammar's work for each sequence (the mask of the tokens its answer allows next, then its answer moved on by the
chosen token) and, apart, applying the masks to the logits rows (on the CPU here; on a GPU that runs on the device).

    python -m bench.bench_structured_host [--vocab 163840] [--tiktoken PATH] [--out DIR]

Every sequence writes the same schema-following answer (tokenized by longest match over the vocabulary), the batch's
sequences at staggered places in it, a finished one starting anew; each figure is the mean over the answer's length
in steps, of a grammar's first pass over the answer (nothing kept from before) and of a second pass. Without
--tiktoken the vocabulary is synthetic: the 256 bytes, then the most common words, numbers, punctuation runs and their
space-led forms of the Python sources next to this interpreter (a stand-in for a BPE vocabulary with the same mix of
pieces), up to --vocab entries; with --tiktoken (Kimi's tiktoken.model) it is the real one. torch runs on one thread
(the host's masks are small tensor ops). The results keep each engine's table (the engine measured, and those
measured at other commits), each with its commit.
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
from dayzero.structured.held_answer import HeldAnswer, fill_rows, refused_tokens
from dayzero.structured.json_answer import json_answer
from dayzero.structured.json_schema import checked_schema
from dayzero.structured.vocabulary import Vocabulary

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


class XgrammarEngine:
    """dayzero/structured/ on xgrammar: a compiled vocabulary, a grammar compiled a schema, a matcher an answer; the
    batch's masks filled at once into one bitmask (xgrammar's threads), as a batched sampler takes them."""

    name = "xgrammar"

    def __init__(self, pieces: list[bytes]):
        self.vocabulary = Vocabulary(lambda t: pieces[t] if t < len(pieces) else None, len(pieces), ())
        self.bitmask = torch.empty(max(BATCHES), (len(pieces) + 31) // 32, dtype=torch.int32)

    def compile(self, schema: dict):
        # nothing kept from an earlier compile
        self.vocabulary.compiler.clear_cache()
        return self.vocabulary.compile(json_answer(checked_schema(schema)))

    @staticmethod
    def answer(grammar) -> HeldAnswer:
        return HeldAnswer(grammar)

    def masks(self, answers: list[HeldAnswer]) -> torch.Tensor:
        if len(answers) == 1:
            answers[0].fill(self.bitmask)
        else:
            fill_rows(answers, self.bitmask)
        return self.bitmask[:len(answers)]

    @staticmethod
    def apply(bitmask: torch.Tensor, logits: torch.Tensor) -> None:
        logits.masked_fill(refused_tokens(bitmask, logits.shape[-1], logits.device), float("-inf"))

    @staticmethod
    def advance(answer: HeldAnswer, token: int) -> None:
        answer.advance(token)

    @staticmethod
    def done(answer: HeldAnswer) -> bool:
        return answer.done


ENGINE = XgrammarEngine


def walk(engine, grammar, tokens: list[int], batch: int, logits: torch.Tensor) -> tuple[float, float]:
    """Mean host ms a step over len(tokens) steps -> (the grammar's: masks and moves; applying the masks)."""
    answers = [engine.answer(grammar) for _ in range(batch)]
    places = [(i * 7) % len(tokens) for i in range(batch)]
    for answer, place in zip(answers, places):
        for token in tokens[:place]:
            engine.advance(answer, token)
    grammar_s = apply_s = 0.0
    for _ in range(len(tokens)):
        start = time.perf_counter()
        masks = engine.masks(answers)
        middle = time.perf_counter()
        engine.apply(masks, logits)
        end = time.perf_counter()
        for index in range(batch):
            engine.advance(answers[index], tokens[places[index]])
            places[index] += 1
            if engine.done(answers[index]):
                answers[index], places[index] = engine.answer(grammar), 0
        grammar_s += middle - start + time.perf_counter() - end
        apply_s += end - middle
    return 1e3 * grammar_s / len(tokens), 1e3 * apply_s / len(tokens)


def measure(engine, pieces: list[bytes], vocabulary_s: float) -> dict:
    tokens = longest_match_tokens(ANSWER.encode(), pieces)
    rows = []
    for batch in BATCHES:
        logits = torch.randn(batch, len(pieces))
        start = time.perf_counter()
        grammar = engine.compile(SCHEMA)
        compile_ms = 1e3 * (time.perf_counter() - start)
        first, first_apply = walk(engine, grammar, tokens, batch, logits)
        again, again_apply = walk(engine, grammar, tokens, batch, logits)
        rows.append({"batch": batch, "compile_ms": compile_ms, "first_ms": first, "again_ms": again,
                     "again_us_per_seq": 1e3 * again / batch, "apply_ms": again_apply})
    title = (f"{engine.name}: the host's structured work a decode step, {len(tokens)}-token answer, "
             f"{len(pieces)}-entry vocabulary (vocabulary prepared once in {vocabulary_s:.2f} s)")
    return {"title": title, "commit": commit(), "vocabulary_s": vocabulary_s, "rows": rows,
            "columns": {"batch": "batch", "compile_ms": "schema compile ms", "first_ms": "masks + moves, first, ms",
                        "again_ms": "masks + moves, again, ms", "again_us_per_seq": "again, us a sequence",
                        "apply_ms": "masks onto logits, ms"}}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--vocab", type=int, default=163840)
    p.add_argument("--tiktoken", default=None)
    args = p.parse_args()
    pieces = tiktoken_vocabulary(args.tiktoken) if args.tiktoken else synthetic_vocabulary(args.vocab)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    start = time.perf_counter()
    engine = ENGINE(pieces)
    vocabulary_s = time.perf_counter() - start
    previous = args.out / "structured_host.json"
    tables = json.loads(previous.read_text())["tables"] if previous.is_file() else {}
    tables[engine.name] = measure(engine, pieces, vocabulary_s)
    print_tables(write_result(args.out, "structured_host", tables, software={"python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
