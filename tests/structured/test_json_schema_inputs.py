"""Any JSON value given as a schema compiles or is refused with SchemaError (what the server answers 400 with), never
another exception: schema keywords with values of every type, references, bounds past a double, deep nesting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.structured.json_schema import SchemaError, checked_schema

KEYWORDS = ["type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
            "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "$defs", "definitions", "title", "a"]
WORDS = st.sampled_from(["object", "array", "string", "number", "integer", "boolean", "null", "#", "#/$defs/a",
                         "#/definitions/a", "#/$defs", "a", "^a+$", "(", "\\d{2,3}", ""])
scalars = (st.none() | st.booleans() | st.integers(-3, 5) | st.sampled_from([10**400, -(10**400), 2**63])
           | st.floats() | WORDS)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYWORDS) | WORDS, inner, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(schema=st.dictionaries(st.sampled_from(KEYWORDS), values, max_size=5))
def test_any_schema_compiles_or_is_refused_with_a_schema_error(schema):
    try:
        checked_schema(schema)
    except SchemaError:
        pass
