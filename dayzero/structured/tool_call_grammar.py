"""Tool calls held to the tools offered, under `tool_choice` "auto" and "required": once the model opens a call
section, each call's id names one of the offered functions (`functions.NAME:IDX`), its arguments follow that
function's parameters schema (any JSON object where dayzero cannot hold the schema), and the markers come in
Kimi's order (tool_calls.py):

    text | SECTION_BEGIN (CALL_BEGIN id ARGUMENTS_BEGIN arguments CALL_END)+ SECTION_END

Under "auto" the model writes freely (any token but the five markers) until it opens a section; under "required"
the prompt already opened the section and the first call's id up to `functions.`. The turn ends with the section;
without `parallel_tool_calls` the section holds one call. A call of a named function is held by its JSON answer alone
(chat_turn.py): its prompt opens the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from dayzero.structured.json_answer import json_value, sequence, structural_tag, token
from dayzero.structured.tool_calls import FUNCTION_ID_PREFIX, MARKERS

# a call's index (IDX counts the conversation's calls): up to four digits, without leading zeros
INDEX_PATTERN = r"(0|[1-9][0-9]{0,3})"


@dataclass(frozen=True)
class ToolCallRules:
    """How an answer's tool calls are held: plain values, sent with the request to the engine."""

    markers: tuple[int, ...]  # the token ids of MARKERS, in their order
    functions: tuple[tuple[str, str | None], ...]  # (name, its parameters schema as checked JSON text; None: any)
    opened: bool  # the prompt opened the section and the first call's id ("required")
    parallel: bool  # more than one call in the section

    @property
    def section_end(self) -> int:
        return self.markers[1]


def tool_call_grammar(rules: ToolCallRules) -> dict:
    """The structural tag of a turn whose calls are held to `rules`."""
    section_begin, section_end, call_begin, _, call_end = rules.markers
    call = sequence([token(call_begin), _call_body(rules, FUNCTION_ID_PREFIX), token(call_end)])
    more = [{"type": "star", "content": call}] if rules.parallel else []
    if rules.opened:
        return structural_tag(sequence([_call_body(rules, ""), token(call_end), *more, token(section_end)]))
    section = sequence([token(section_begin), call, *more, token(section_end)])
    text = {"type": "any_tokens", "exclude_tokens": list(rules.markers)}
    return structural_tag(sequence([text, {"type": "optional", "content": section}]))


def _call_body(rules: ToolCallRules, id_prefix: str) -> dict:
    """A call's id from `id_prefix` on, the arguments marker and the arguments, for any offered function."""
    arguments_begin = rules.markers[3]
    bodies = [sequence([{"type": "const_string", "value": f"{id_prefix}{name}:"},
                        {"type": "regex", "pattern": INDEX_PATTERN}, token(arguments_begin), json_value(schema)])
              for name, schema in rules.functions]
    return bodies[0] if len(bodies) == 1 else {"type": "or", "elements": bodies}


def marker_token_ids(markers: dict[int, str]) -> tuple[int, ...]:
    """{token id: marker text} (tool_calls.marker_ids) -> the ids in MARKERS' order."""
    ids = {text: token for token, text in markers.items()}
    return tuple(ids[marker] for marker in MARKERS)
