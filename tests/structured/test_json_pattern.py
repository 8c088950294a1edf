"""A schema's `pattern` as an automaton over characters: it accepts what Python's `re` finds (ECMA-262's ASCII \\d
and \\w, search unless anchored) on random strings, and refuses what it cannot hold, saying so."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.structured.json_pattern import SPACE, CharSet, Pattern, PatternError

PATTERNS = [r"^\d{4}-\d{2}-\d{2}$", r"^[a-z]+$", r"ab|cd", r"^(ab)*c?$", r"^[^0-9]{2,3}$", r"x", r"^a.c$",
            r"^(?:a|b)+\.txt$", r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", r"^\w+@\w+\.\w{2,}$", r"^[\d\-]+$", r"^a{0,2}b{2,}$",
            r"^$", r"^\$\d+(\.\d\d)?$", r"[\s]", r"^(a|)$", r"^[\W_]?\S+?$", r"^\u0041\x42$", r"(a|b)*c{1,}"]
ALPHABET = "abcdxAB09-. @$_\t\u00e9\u20ac\U0001f600"


def matches(pattern: Pattern, text: str) -> bool:
    states = pattern.start()
    for char in text:
        states = pattern.step(states, ord(char))
        if not states:
            return False
    return pattern.accepts(states)


def python_finds(source: str, text: str) -> bool:
    # Python's $ also matches before a final newline; ECMA-262's does not
    if source.endswith("$") and not source.endswith("\\$"):
        source = source[:-1] + r"\Z"
    return re.search(source, text, re.ASCII) is not None


@pytest.mark.parametrize("source", PATTERNS)
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=9))
def test_the_automaton_accepts_what_python_finds(source, text):
    assert matches(Pattern(source), text) == python_finds(source, text)


def dialects_differ(char: str) -> bool:
    """A character ECMA-262 and Python's ASCII mode read differently: a space to ECMA's \\s only (no-break space,
    BOM, ...), or a line end that ECMA's `.` leaves out and Python's takes (\\r, U+2028, U+2029)."""
    return (ord(char) > 0x7F and any(low <= ord(char) <= high for low, high in SPACE)) or char in "\r\u2028\u2029"


@pytest.mark.parametrize("source", PATTERNS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_strings_made_to_match_are_accepted(source, data):
    # where the two dialects differ on a character (\s beyond ASCII), the string is left out
    text = data.draw(st.from_regex(re.compile(source, re.ASCII), fullmatch=False).filter(
        lambda t: python_finds(source, t) and not any(dialects_differ(c) for c in t)))
    assert matches(Pattern(source), text)


@pytest.mark.parametrize("source, says", [
    ("(?=a)b", "lookaround"), (r"(a)\1", "backreference"), (r"a\bb", "word boundary"), ("(a", "ends too soon"),
    ("a{3,1}", "bounds reversed"), ("*a", "nothing to repeat"), ("^a|b$", "anchors around a top-level |"),
    ("a^b", "only at its start and end"), (r"\q", "not an escape"), (r"\u12zz", "not a hex escape"),
])
def test_what_it_cannot_hold_is_refused_by_what_is_wrong(source, says):
    with pytest.raises(PatternError, match=says):
        Pattern(source)


def test_a_character_range_meets_a_set_where_they_overlap():
    digits, not_digits = CharSet(((0x30, 0x39),)), CharSet(((0x30, 0x39),), negated=True)
    assert digits.meets(0x00, 0x30) and not digits.meets(0x3A, 0x7F)
    assert not not_digits.meets(0x30, 0x39) and not_digits.meets(0x30, 0x3A)
    pattern = Pattern("^[a-z]$")
    assert pattern.may_step(pattern.start(), 0x60, 0x61) and not pattern.may_step(pattern.start(), 0x80, 0x7FF)
