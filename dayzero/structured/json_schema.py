"""JSON schemas (OpenAI's `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`, a tool's
`parameters`) checked before xgrammar holds answers to them, so that an answer never claims a schema it does not
follow.

Taken: type (one or a list), properties + required (keys in the schema's order, each at most once, an optional one
may be left out; other keys only where additionalProperties gives them a schema), items + minItems / maxItems,
minLength / maxLength of strings (in characters), pattern (matched whole, as if anchored; no lookaround,
backreference or word boundary; not beside a length bound, which xgrammar would drop), minimum / maximum /
exclusiveMinimum / exclusiveMaximum, enum and const of strings, numbers, booleans and null, anyOf (any members),
oneOf whose members are of different types (so that exactly one holds), and local `$ref`s to the root or to `$defs` /
`definitions`, recursion included. A string held to a length or a pattern is written without escapes, a bounded
number without an exponent and to at most 6 decimals. Annotations are left to the answer: title, description,
default, examples, and format, which JSON Schema 2020-12 counts among them (held, an email or a date would trap a
model that does not write one in its string). Keywords that constrain values in ways not held (multipleOf, allOf,
not, uniqueItems, ...) are refused by name. A schema is refused past MAX_SCHEMA_BYTES of JSON and schemas nested
MAX_SCHEMA_DEPTH deep.
"""

from __future__ import annotations

import functools
import json
import math
import re

import xgrammar as xgr

from dayzero.errors import DayzeroError

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict", "contentMediaType",
                         "contentEncoding"})
HANDLED = frozenset({"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
                     "const", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern", "minimum", "maximum",
                     "exclusiveMinimum", "exclusiveMaximum"})
# definitions are passed at the root alone; format is an annotation
NOT_PASSED = frozenset({"$defs", "definitions", "format"})
TYPES = {"object": "object", "array": "array", "string": "string", "number": "number", "integer": "number",
         "boolean": "boolean", "null": "null"}
ALL_KINDS = frozenset(TYPES.values())
MAX_SCHEMA_BYTES = 64 << 10
# schema texts kept checked (an engine checks each request's, a server sends the same ones again and again)
CACHED_SCHEMAS = 64
MAX_SCHEMA_DEPTH = 64
# whitespace between an answer's tokens comes in runs of at most this many characters, so a model cannot stall in
# blank space
MAX_WHITESPACE = 32
LOOKAROUND = re.compile(r"\(\?<?[=!]")
# xgrammar's messages begin with the time and its source file
XGRAMMAR_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


class SchemaError(DayzeroError):
    """A schema dayzero cannot hold an answer to."""


def checked_schema(schema) -> str:
    """A JSON schema whose root is an object -> the JSON text answers are held to (SchemaError: what is wrong or
    not supported)."""
    if not isinstance(schema, dict):
        raise SchemaError("the JSON schema must be an object")
    try:
        size = len(json.dumps(schema))
    except (RecursionError, ValueError):
        raise SchemaError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} schemas; flatten it") from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the JSON schema is over {MAX_SCHEMA_BYTES} bytes")
    checked = _Checker(schema).check(schema, "#", 0)
    for name in ("$defs", "definitions"):
        if isinstance(schema.get(name), dict):
            checked[name] = {key: _Checker(schema).check(sub, f"#/{name}/{key}", 1) for key, sub in
                             schema[name].items()}
    if _kinds(schema, schema, set()) != {"object"}:
        raise SchemaError("the JSON schema's root must be an object (\"type\": \"object\")")
    text = json.dumps(checked)
    _compiles(text)
    return text


@functools.lru_cache(maxsize=CACHED_SCHEMAS)
def checked_schema_text(schema: str) -> str:
    """checked_schema of a schema given as JSON text."""
    try:
        value = json.loads(schema)
    except (json.JSONDecodeError, RecursionError) as err:
        raise SchemaError(f"the JSON schema is not JSON text ({err})") from None
    return checked_schema(value)


def _compiles(text: str) -> None:
    """xgrammar's own refusals (a pattern feature it lacks, bounds no value meets) as SchemaErrors."""
    try:
        xgr.Grammar.from_json_schema(text, max_whitespace_cnt=MAX_WHITESPACE)
    except (RuntimeError, ValueError) as err:
        message = XGRAMMAR_PREFIX.sub("", str(err).strip())
        raise SchemaError(f"the JSON schema cannot be held: {message}") from None


class _Checker:
    def __init__(self, root: dict):
        self.root = root

    def check(self, schema, where: str, depth: int):
        """The schema as xgrammar takes it (bounded arrays get their items' schema), and every schema inside it."""
        if depth >= MAX_SCHEMA_DEPTH:
            raise SchemaError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} schemas; flatten it")
        if schema is True or schema == {}:
            return schema
        if not isinstance(schema, dict):
            raise SchemaError(f"{where}: a schema must be an object or true")
        unknown = set(schema) - ANNOTATIONS - HANDLED
        if unknown:
            raise SchemaError(f"{where}: {', '.join(sorted(unknown))} cannot be enforced by dayzero; remove it from "
                              "the schema (or check it after the answer)")
        checked = {key: value for key, value in schema.items() if key not in NOT_PASSED}
        _check_values(schema, where)
        _check_counts(schema, where)
        if "$ref" in schema:
            self._check_ref(schema["$ref"], where)
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                checked[keyword] = self._members(schema, keyword, where, depth)
        if "properties" in schema or "required" in schema:
            checked["properties"] = self._properties(schema, where, depth)
        if "items" in schema:
            checked["items"] = self.check(schema["items"], f"{where}/items", depth + 1)
        elif "minItems" in schema or "maxItems" in schema:
            # xgrammar's strict mode reads a bounded array without items as one without additional items
            checked["items"] = True
        if isinstance(schema.get("additionalProperties"), dict):
            checked["additionalProperties"] = self.check(schema["additionalProperties"],
                                                         f"{where}/additionalProperties", depth + 1)
        if "type" in schema:
            _check_types(schema["type"], where)
        return checked

    def _members(self, schema: dict, keyword: str, where: str, depth: int) -> list:
        members = schema[keyword]
        if not isinstance(members, list) or not members:
            raise SchemaError(f"{where}: anyOf / oneOf must be a non-empty list")
        checked = [self.check(m, f"{where}/{keyword}/{i}", depth + 1) for i, m in enumerate(members)]
        if keyword == "oneOf":
            seen: set[str] = set()
            for member in members:
                kinds = _kinds(member, self.root, set())
                if kinds & seen:
                    raise SchemaError(f"{where}: the alternatives of oneOf must be of different types (an object, an "
                                      "array, a string, a number, true / false, null: at most one of each); anyOf "
                                      "takes any")
                seen |= kinds
        return checked

    def _properties(self, schema: dict, where: str, depth: int) -> dict:
        properties, required = schema.get("properties", {}), schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list) or not all(
                isinstance(name, str) for name in required):
            raise SchemaError(f"{where}: properties must be an object and required a list of names")
        missing = set(required) - set(properties)
        if missing:
            raise SchemaError(f"{where}: required names {sorted(missing)}, which properties does not define")
        return {name: self.check(sub, f"{where}/properties/{name}", depth + 1) for name, sub in properties.items()}

    def _check_ref(self, ref, where: str) -> None:
        if _target(ref, self.root) is None:
            parts = ref.split("/") if isinstance(ref, str) else []
            if ref != "#" and (len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions")):
                raise SchemaError(f"{where}: only local references (# or #/$defs/NAME) are supported, got {ref!r}")
            raise SchemaError(f"{where}: {ref} names no definition")


def _target(ref, root: dict):
    """The schema a local reference names (None: it names none)."""
    if ref == "#":
        return root
    parts = ref.split("/") if isinstance(ref, str) else []
    if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
        return None
    definitions = root.get(parts[1])
    return definitions.get(parts[2]) if isinstance(definitions, dict) else None


def _kinds(schema, root: dict, seen: set) -> frozenset[str]:
    """The JSON types a value following `schema` may have (all where it cannot tell)."""
    if not isinstance(schema, dict):
        return ALL_KINDS
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or ref in seen:
            return ALL_KINDS
        return _kinds(_target(ref, root), root, seen | {ref})
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return frozenset(_kind_of(v) for v in values)
    if "anyOf" in schema or "oneOf" in schema:
        members = schema.get("anyOf", schema.get("oneOf"))
        return frozenset().union(*(_kinds(m, root, seen) for m in members))
    types = schema.get("type", "object" if "properties" in schema else None)
    if types is None:
        return ALL_KINDS
    return frozenset(TYPES[t] for t in (types if isinstance(types, list) else [types]))


def _kind_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, (int, float)) else "string"


def _check_types(types, where: str) -> None:
    for kind in types if isinstance(types, list) else [types]:
        if not isinstance(kind, str) or kind not in TYPES:
            raise SchemaError(f"{where}: unknown type {kind!r}")


def _check_values(schema: dict, where: str) -> None:
    """enum / const values, a pattern's kind and its lookaround."""
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{where}: enum must be a non-empty list")
        if any(isinstance(v, (dict, list)) or not _finite_or_not_number(v) for v in values):
            raise SchemaError(f"{where}: enum / const values must be strings, numbers, booleans or null")
    pattern = schema.get("pattern")
    if "pattern" in schema and not isinstance(pattern, str):
        raise SchemaError(f"{where}: pattern must be a string (an ECMA-262 regular expression)")
    if pattern is not None and ("minLength" in schema or "maxLength" in schema):
        raise SchemaError(f"{where}: a pattern with minLength / maxLength cannot be held together (xgrammar holds the "
                          "pattern alone); bound the length in the pattern ({{m,n}}) or leave one out")
    if isinstance(pattern, str) and LOOKAROUND.search(pattern):
        raise SchemaError(f"{where}: pattern {pattern!r} holds a lookaround, which dayzero cannot enforce; leave "
                          "pattern out (or check it after the answer)")


def _check_counts(schema: dict, where: str) -> None:
    """minLength / maxLength, minItems / maxItems and the numbers' bounds."""
    for low_name, high_name in (("minLength", "maxLength"), ("minItems", "maxItems")):
        low, high = schema.get(low_name, 0), schema.get(high_name)
        if not _count(low) or (high is not None and (not _count(high) or high < low)):
            raise SchemaError(f"{where}: {low_name} / {high_name} must be integers >= 0, {low_name} <= {high_name}")
    for name in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        value = schema.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            raise SchemaError(f"{where}: minimum / maximum and their exclusive forms must be finite numbers")


def _finite(value: float) -> bool:
    """Finite as a double (an integer past 1.8e308 is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _finite_or_not_number(value) -> bool:
    return not isinstance(value, (int, float)) or isinstance(value, bool) or _finite(value)


def _count(value) -> bool:
    """A count a schema may give (minItems, maxLength, ...): an integer >= 0, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
