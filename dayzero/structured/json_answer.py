"""The grammar of an answer held to JSON (`response_format` json_object or json_schema): one JSON object, or one that
follows a checked schema (json_schema.py), as an xgrammar structural tag.

A thinking model's answer (its reasoning's begin and end marker tokens) reasons first, any tokens but the end marker
(and no end of sequence: the answer's JSON is still to come); the JSON starts after the end marker. Where the
template did not open the reasoning, the first token may open it or start the JSON at once.
"""

from __future__ import annotations

import functools
import json

import xgrammar as xgr

from dayzero.structured.json_schema import CACHED_SCHEMAS, MAX_WHITESPACE

ANY_OBJECT = {"type": "object"}
# a character of a length-bounded string as xgrammar's EBNF writes it, and as JSON takes it
BOUNDED_STRING_CHARACTER = r'(([^\"\\\r\n]))'
STRING_CHARACTER = r'(([^\0-\x1f\"\\]))'


def json_answer(schema: str | None, reasoning: tuple[int, int] | None = None, opened: bool = False) -> dict:
    """schema: JSON text from json_schema.checked_schema (None: any JSON object) -> the answer's structural tag."""
    answer = json_value(schema)
    if reasoning is None:
        return structural_tag(answer)
    begin, end = reasoning
    thought = [{"type": "any_tokens", "exclude_tokens": [end]}, token(end), answer]
    if opened:
        return structural_tag(sequence(thought))
    return structural_tag({"type": "or", "elements": [sequence([token(begin), *thought]), answer]})


def json_value(schema: str | None) -> dict:
    """A JSON value following `schema` (checked JSON text; None: any JSON object)."""
    return {"type": "grammar", "grammar": json_grammar(schema or json.dumps(ANY_OBJECT))}


@functools.lru_cache(maxsize=CACHED_SCHEMAS)
def json_grammar(schema: str) -> str:
    """xgrammar's EBNF of a checked schema, its length-bounded strings refusing raw control characters as JSON does
    (xgrammar's own refuse only CR and LF there)."""
    ebnf = str(xgr.Grammar.from_json_schema(schema, max_whitespace_cnt=MAX_WHITESPACE))
    return ebnf.replace(BOUNDED_STRING_CHARACTER, STRING_CHARACTER)


def structural_tag(grammar: dict) -> dict:
    return {"type": "structural_tag", "format": grammar}


def sequence(elements: list[dict]) -> dict:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


def token(token_id: int) -> dict:
    return {"type": "token", "token": token_id}
