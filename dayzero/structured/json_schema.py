"""JSON schemas (OpenAI's `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`) compiled into
the nodes of a JSON grammar (json_grammar.py), so that answers follow them as they are generated.

Enforced: type (one or a list), properties + required (keys in the schema's order; keys beyond `properties` are not
generated), items + minItems / maxItems, minLength / maxLength of strings (in characters: code points, an escape
counting one; such a string takes valid UTF-8 only), pattern (an ECMA-262 regular expression of the subset
json_pattern.py holds, matched anywhere unless anchored), minimum / maximum / exclusiveMinimum / exclusiveMaximum of
numbers and integers (a bounded number is written without an exponent, and every digit keeps a way into the bounds
open), enum and const of strings, numbers, booleans and null, anyOf / oneOf whose members start with different bytes
(the usual `anyOf: [X, {"type": "null"}]` of an optional field), and local `$ref`s to the root or to `$defs` /
`definitions` (recursion included, down to the grammar's depth cap). Annotations are ignored (title, description,
default, examples, format, which JSON Schema 2020-12 treats as an annotation, ...). Keywords that constrain values in
ways the grammar cannot hold (multipleOf, allOf, lookaround in a pattern, ...) are refused by name, so an answer
never claims a schema it does not follow. A schema is refused past MAX_NODES nodes, MAX_SCHEMA_BYTES of JSON, and
schemas nested MAX_SCHEMA_DEPTH deep.
"""

from __future__ import annotations

import json
import math

from dayzero.errors import DayzeroError
from dayzero.structured.json_grammar import ANY, BASE_NODES, MAX_DEPTH, Grammar, Node, first_bytes, json_text
from dayzero.structured.json_pattern import Pattern, PatternError

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict", "contentMediaType",
                         "contentEncoding"})
HANDLED = frozenset({"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
                     "const", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern", "minimum", "maximum",
                     "exclusiveMinimum", "exclusiveMaximum"})
MAX_NODES = 4096
MAX_SCHEMA_BYTES = 64 << 10
# schemas inside one another: an answer nests at most MAX_DEPTH containers, and an optional field's
# anyOf [X, null] wraps each in one more schema
MAX_SCHEMA_DEPTH = 2 * MAX_DEPTH


class SchemaError(DayzeroError):
    """A schema dayzero cannot hold an answer to."""


def compile_schema(schema) -> Grammar:
    """A JSON schema whose root is an object -> its grammar (SchemaError: what is wrong or not supported)."""
    if not isinstance(schema, dict):
        raise SchemaError("the JSON schema must be an object")
    try:
        key = json.dumps(schema, sort_keys=True)
    except RecursionError:
        raise SchemaError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} schemas; flatten it") from None
    if len(key) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the JSON schema is over {MAX_SCHEMA_BYTES} bytes")
    compiler = _Compiler(schema)
    root = compiler.node(schema, "#")
    if compiler.nodes[root].kind != "object":
        raise SchemaError("the JSON schema's root must be an object (\"type\": \"object\")")
    return Grammar(tuple(compiler.nodes), root, key)


class _Compiler:
    def __init__(self, root: dict):
        self.root = root
        self.nodes: list[Node] = list(BASE_NODES)
        self.refs: dict[str, int] = {}
        self.depth = 0

    def node(self, schema, where: str) -> int:
        """The node of `schema`, found at `where` (a JSON pointer into the root), and of every schema inside it."""
        if self.depth >= MAX_SCHEMA_DEPTH:
            raise SchemaError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} schemas (answers nest at most "
                              f"{MAX_DEPTH} objects and arrays); flatten it")
        self.depth += 1
        try:
            return self._node(schema, where)
        finally:
            self.depth -= 1

    def _node(self, schema, where: str) -> int:
        if schema is True or schema == {}:
            return ANY
        if not isinstance(schema, dict):
            raise SchemaError(f"{where}: a schema must be an object or true")
        unknown = set(schema) - ANNOTATIONS - HANDLED
        if unknown:
            raise SchemaError(f"{where}: {', '.join(sorted(unknown))} cannot be enforced by dayzero; remove it from "
                              "the schema (or check it after the answer)")
        if "$ref" in schema:
            return self._ref(schema["$ref"], where)
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaError(f"{where}: enum must be a non-empty list")
            if any(isinstance(v, (dict, list)) for v in values):
                raise SchemaError(f"{where}: enum / const values must be strings, numbers, booleans or null")
            return self._add(Node("choice", literals=tuple(json_text(v) for v in values)))
        if "anyOf" in schema or "oneOf" in schema:
            members = schema.get("anyOf", schema.get("oneOf"))
            if not isinstance(members, list) or not members:
                raise SchemaError(f"{where}: anyOf / oneOf must be a non-empty list")
            return self._union([self.node(m, f"{where}/anyOf/{i}") for i, m in enumerate(members)], where)
        types = schema.get("type", "object" if "properties" in schema else None)
        if types is None:
            return ANY
        if isinstance(types, list):
            return self._union([self._typed(schema, t, where) for t in types], where)
        return self._typed(schema, types, where)

    def _add(self, node: Node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise SchemaError(f"the JSON schema needs over {MAX_NODES} nodes; simplify it")
        self.nodes.append(node)
        return len(self.nodes) - 1

    def _ref(self, ref, where: str) -> int:
        parts = ref.split("/") if isinstance(ref, str) else []
        if ref != "#" and (len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions")):
            raise SchemaError(f"{where}: only local references (# or #/$defs/NAME) are supported, got {ref!r}")
        if ref in self.refs:
            return self.refs[ref]
        definitions = self.root.get(parts[1]) if ref != "#" else None
        target = self.root if ref == "#" else definitions.get(parts[2]) if isinstance(definitions, dict) else None
        if target is None:
            raise SchemaError(f"{where}: {ref} names no definition")
        # a placeholder first, so that a definition that refers to itself finds its own node
        index = self.refs[ref] = self._add(Node("any"))
        self.nodes[index] = self.nodes[self.node(target, ref)]
        return index

    def _union(self, members: list[int], where: str) -> int:
        if len(members) == 1:
            return members[0]
        seen: set[int] = set()
        for member in members:
            starts = first_bytes(tuple(self.nodes), member)
            if starts & seen:
                raise SchemaError(f"{where}: the alternatives of anyOf / oneOf / a type list must start differently "
                                  "(an object, an array, a string, a number, true / false, null: at most one of each)")
            seen |= starts
        return self._add(Node("union", members=tuple(members)))

    def _typed(self, schema: dict, kind, where: str) -> int:
        if kind == "object":
            return self._object(schema, where)
        if kind == "array":
            return self._array(schema, where)
        if kind == "string":
            return self._add(self._string(schema, where))
        if kind in ("number", "integer"):
            return self._add(Node(kind, minimum=_bound(schema, "minimum", where),
                                  maximum=_bound(schema, "maximum", where)))
        simple = {
                  "boolean": Node("choice", literals=(b"true", b"false")), "null": Node("choice", literals=(b"null",))}
        if not isinstance(kind, str) or kind not in simple:
            raise SchemaError(f"{where}: unknown type {kind!r}")
        return self._add(simple[kind])

    @staticmethod
    def _string(schema: dict, where: str) -> Node:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if not _count(low) or (high is not None and (not _count(high) or high < low)):
            raise SchemaError(f"{where}: minLength / maxLength must be integers >= 0, minLength <= maxLength")
        pattern = schema.get("pattern")
        if pattern is not None:
            try:
                Pattern(pattern)
            except PatternError as err:
                raise SchemaError(f"{where}: {err}; leave pattern out (or check it after the answer)") from None
        return Node("string", min_length=low, max_length=high, pattern=pattern)

    def _object(self, schema: dict, where: str) -> int:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list) or not all(
                isinstance(name, str) for name in required):
            raise SchemaError(f"{where}: properties must be an object and required a list of names")
        missing = set(required) - set(properties)
        if missing:
            raise SchemaError(f"{where}: required names {sorted(missing)}, which properties does not define")
        if not properties and schema.get("additionalProperties", True) is not False:
            return self._add(Node("object", open=True))
        index = self._add(Node("object"))
        props = tuple((json_text(name), self.node(sub, f"{where}/properties/{name}"), name in required)
                      for name, sub in properties.items())
        self.nodes[index] = Node("object", props=props)
        return index

    def _array(self, schema: dict, where: str) -> int:
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if not _count(low) or (high is not None and (not _count(high) or high < low)):
            raise SchemaError(f"{where}: minItems / maxItems must be integers, minItems <= maxItems")
        index = self._add(Node("array"))
        item = self.node(schema.get("items", {}), f"{where}/items")
        self.nodes[index] = Node("array", item=item, min_items=low, max_items=high)
        return index


def _bound(schema: dict, name: str, where: str) -> tuple[float, bool] | None:
    """minimum / maximum and their exclusive forms (2020-12: exclusiveMinimum a number) -> (value, exclusive); the
    tighter where a schema gives both."""
    exclusive_name = "exclusive" + name[0].upper() + name[1:]
    bounds = [(schema[name], False)] if name in schema else []
    if exclusive_name in schema:
        bounds.append((schema[exclusive_name], True))
    for value, _ in bounds:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            raise SchemaError(f"{where}: {name} / {exclusive_name} must be finite numbers")
    if not bounds:
        return None
    tighter = max if name == "minimum" else min
    return tighter(bounds, key=lambda b: (b[0], b[1]) if name == "minimum" else (b[0], not b[1]))


def _finite(value: float) -> bool:
    """Finite as a double (an integer past 1.8e308 is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _count(value) -> bool:
    """A count a schema may give (minItems, maxLength, ...): an integer >= 0, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
