"""What answers held to JSON cost on the host per step, at a real vocabulary's size: building the vocabulary's
trie once, and the mask of each state along a JSON answer, cold (searched) and cached; then the states inside values
held to a schema (a length bound, a pattern, number bounds), which the plain string's fast path does not cover.

    python -m bench.bench_json_masks [--vocab 163840] [--tiktoken PATH] [--out DIR]

Without --tiktoken the vocabulary is synthetic: the 256 bytes, then the most common words, numbers, punctuation runs
and their space-led forms from the Python sources next to this interpreter (a stand-in for a BPE vocabulary with
the same mix of pieces), up to --vocab entries. With --tiktoken (Kimi's tiktoken.model) it is the real one. Runs on
the CPU (the host's work); the card column of its results says so.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import sysconfig
import time
from pathlib import Path

from bench.common import parser, print_tables, write_result
from dayzero.structured.json_grammar import JSON_OBJECT
from dayzero.structured.json_schema import compile_schema
from dayzero.structured.token_grammar import TokenTable

# values held to schemas: inside each, the states a string's text or a number's digits pass through
HELD_VALUES = {
    "string": ({"type": "string"}, "hello world, said the model"),
    "string maxLength 40": ({"type": "string", "maxLength": 40}, "hello world, said the model"),
    "pattern ^[a-z ,]+$": ({"type": "string", "pattern": "^[a-z ,]+$"}, "hello world, said the model"),
    "pattern (a date)": ({"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}, "1999-12-31"),
    "integer 0..150": ({"type": "integer", "minimum": 0, "maximum": 150}, 123),
}
ANSWER = json.dumps({"name": "Kimi K3.1", "layers": [1, 2, 3], "ratio": -0.125, "ok": True, "none": None,
                     "nested": {"text": "a \"quoted\" word\n and \u00e9", "empty": []}}, indent=2,
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


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--vocab", type=int, default=163840)
    p.add_argument("--tiktoken", default=None)
    args = p.parse_args()
    pieces = tiktoken_vocabulary(args.tiktoken) if args.tiktoken else synthetic_vocabulary(args.vocab)
    start = time.perf_counter()
    table_ = TokenTable(lambda t: pieces[t] if t < len(pieces) else None, len(pieces))
    build_s = time.perf_counter() - start
    states = [JSON_OBJECT.start()]
    for byte in ANSWER.encode():
        states.append(JSON_OBJECT.advance(states[-1], byte))
    cold, warm, kinds = [], [], collections.defaultdict(list)
    for state in states[:-1]:
        start = time.perf_counter()
        table_.mask(JSON_OBJECT, state)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        table_.mask(JSON_OBJECT, state)
        warm.append(time.perf_counter() - start)
        kinds[state[1]].append(cold[-1])
    rows = [{"states": kind, "count": len(times), "first_mask_ms_max": 1e3 * max(times),
             "first_mask_ms_mean": 1e3 * sum(times) / len(times)} for kind, times in sorted(kinds.items())]
    summary = {"vocab": len(pieces), "trie_build_s": build_s, "answer_bytes": len(ANSWER),
               "masks_searched": len(set(states[:-1])), "cold_ms_total": 1e3 * sum(cold),
               "cached_ms_mean": 1e3 * sum(warm) / len(warm)}
    held = [held_value_row(table_, name, schema, value) for name, (schema, value) in HELD_VALUES.items()]
    tables = {
        "answer": {"title": f"A {len(ANSWER)}-byte JSON answer, {len(pieces)}-entry vocabulary", "rows": [summary],
                   "columns": {"trie_build_s": "trie build s", "masks_searched": "distinct states",
                               "cold_ms_total": "first masks, all ms", "cached_ms_mean": "a kept mask ms"}},
        "states": {"title": "First masks by the answer's state kinds", "rows": rows,
                   "columns": {"states": "state", "count": "states", "first_mask_ms_mean": "mean ms",
                               "first_mask_ms_max": "max ms"}},
        "held": {"title": "Values held to a schema's keywords", "rows": held,
                 "columns": {"value": "value", "states": "states", "distinct": "distinct",
                             "first_masks_ms": "first masks, all ms", "first_mask_ms_mean": "a state, mean ms",
                             "again_ms": "again, all ms"}},
    }
    print_tables(write_result(args.out, "json_masks", tables, software={"python": sys.version.split()[0]}))


def held_value_row(table_: TokenTable, name: str, schema: dict, value) -> dict:
    """The masks of the states inside one held value (a string's text, a number's digits), cold then kept."""
    grammar = compile_schema({"type": "object", "properties": {"v": schema}, "required": ["v"]})
    states = [grammar.start()]
    for byte in json.dumps({"v": value}).encode():
        states.append(grammar.advance(states[-1], byte))
    inside = states[len(b'{"v": '):-2]
    start = time.perf_counter()
    for state in inside:
        table_.mask(grammar, state)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for state in inside:
        table_.mask(grammar, state)
    again = time.perf_counter() - start
    return {"value": name, "states": len(inside), "distinct": len(set(inside)), "first_masks_ms": 1e3 * cold,
            "first_mask_ms_mean": 1e3 * cold / len(inside), "again_ms": 1e3 * again}


if __name__ == "__main__":
    main()
