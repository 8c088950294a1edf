"""A JSON string whose characters are checked as they are written (json_grammar.py): a length bound (minLength /
maxLength, in code points, as JSON Schema counts) and a pattern (json_pattern.py).

Its text must be valid UTF-8 (no overlong forms, no surrogates), so that what is counted and matched is the decoded
string's characters; an escape is one character and an escaped surrogate pair (\\ud83d\\ude00) one (a lone
surrogate is refused). Each byte must leave a way to a character the string takes: a lead byte or a \\u escape's
digits are refused where no character they can begin matches the pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from dayzero.structured.json_pattern import Pattern

_ANY_CONTINUATION = (0x80, 0xBF)
# UTF-8 lead byte -> the ranges its continuation bytes must fall in (no overlong forms, no surrogates, <= U+10FFFF)
UTF8_CONTINUATIONS = {
    **{lead: (_ANY_CONTINUATION,) for lead in range(0xC2, 0xE0)},
    0xE0: ((0xA0, 0xBF), _ANY_CONTINUATION), 0xED: ((0x80, 0x9F), _ANY_CONTINUATION),
    **{lead: (_ANY_CONTINUATION,) * 2 for lead in (*range(0xE1, 0xED), 0xEE, 0xEF)},
    0xF0: ((0x90, 0xBF), _ANY_CONTINUATION, _ANY_CONTINUATION),
    0xF4: ((0x80, 0x8F), _ANY_CONTINUATION, _ANY_CONTINUATION),
    **{lead: (_ANY_CONTINUATION,) * 3 for lead in range(0xF1, 0xF4)},
}
# the room of a string counted for its minLength only
UNBOUNDED_ROOM = 1 << 30
HIGH_SURROGATES, LOW_SURROGATES = range(0xD800, 0xDC00), range(0xDC00, 0xE000)


@dataclass(frozen=True)
class StringRules:
    min_length: int = 0
    max_length: int | None = None
    pattern: Pattern | None = None

    @property
    def counts(self) -> bool:
        return self.min_length > 0 or self.max_length is not None


class CheckedString(NamedTuple):
    """A place in a checked string (part of a grammar state: immutable, hashable)."""

    node: int
    count: int = 0  # characters so far (left at 0 without a length bound, so that states recur)
    continuations: tuple = ()  # the continuation byte ranges the character being written still needs
    code: int = 0  # that character's bits so far; or an escaped high surrogate waiting for its pair
    matcher: frozenset | None = None  # the pattern's automaton states

    @property
    def plain(self) -> bool:
        """At a character's start with no pattern: what follows is checked by counting alone."""
        return self.matcher is None and not self.continuations and not self.code


def begin(node: int, rules: StringRules) -> CheckedString:
    return CheckedString(node, matcher=None if rules.pattern is None else rules.pattern.start())


def room(string: CheckedString, rules: StringRules) -> int:
    """The characters the string may still take."""
    return UNBOUNDED_ROOM if rules.max_length is None else rules.max_length - string.count


def equivalent_count(string: CheckedString, rules: StringRules, span: int) -> int:
    """A count that takes any `span` more characters as string.count does: the same ones fit the maxLength room
    (room beyond span is all alike) and the same ones reach the minLength (a shortfall beyond span likewise)."""
    count = string.count
    roomy = rules.max_length is None or rules.max_length - count > span
    if not roomy:
        return count
    ceiling = math.inf if rules.max_length is None else rules.max_length - span - 1
    if count >= rules.min_length and rules.min_length <= ceiling:
        return rules.min_length
    if count < rules.min_length - span and 0 <= ceiling:
        return 0
    return count


def take_byte(string: CheckedString, rules: StringRules, byte: int) -> CheckedString | None:
    """A byte of the string's text (not a quote, backslash or control byte) -> the place after it (None: refused)."""
    if string.code and not string.continuations:  # an escaped high surrogate: only its low one's escape may follow
        return None
    if string.continuations:
        low, high = string.continuations[0]
        if not low <= byte <= high:
            return None
        code, rest = (string.code << 6) | (byte & 0x3F), string.continuations[1:]
        if rest:
            return string._replace(continuations=rest, code=code) if _may_match(string, rules, code, rest) else None
        return _counted(string._replace(continuations=(), code=0), rules, code)
    if byte < 0x80:
        return _counted(string, rules, byte)
    continuations = UTF8_CONTINUATIONS.get(byte)
    if continuations is None or room(string, rules) < 1:
        return None
    code = byte & (0x3F >> len(continuations))
    if not _may_match(string, rules, code, continuations):
        return None
    return string._replace(continuations=continuations, code=code)


def take_escaped(string: CheckedString, rules: StringRules, code: int) -> CheckedString | None:
    """An escape's character (\\n, \\uXXXX, ...) -> the place after it (None: refused). An escaped high surrogate waits
    for its low one (a lone surrogate is refused: no character to count or match)."""
    if code in HIGH_SURROGATES:
        return string._replace(code=code) if not string.code and room(string, rules) >= 1 else None
    if code in LOW_SURROGATES:
        if not string.code:
            return None
        code = 0x10000 + ((string.code - 0xD800) << 10) + (code - 0xDC00)
        string = string._replace(code=0)
    elif string.code:
        return None
    return _counted(string, rules, code)


def may_take_digits(string: CheckedString, rules: StringRules, digits: bytes) -> bool:
    """Whether a \\u escape begun with these hex digits can still end in a character the string takes, so that no
    digit leads where no digit goes on."""
    spread = 16 ** (4 - len(digits))
    low = int(digits, 16) * spread if digits else 0
    high = low + spread - 1
    if string.code:  # the pair of the pending high surrogate: a supplementary character
        low, high = max(low, LOW_SURROGATES.start), min(high, LOW_SURROGATES.stop - 1)
        base = 0x10000 + ((string.code - 0xD800) << 10) - 0xDC00
        return low <= high and _may_match_range(string, rules, base + low, base + high)
    if room(string, rules) < 1:
        return False
    spans = [(low, min(high, 0xD7FF)), (max(low, 0xE000), high)]
    highs = (max(low, HIGH_SURROGATES.start), min(high, HIGH_SURROGATES.stop - 1))
    if highs[0] <= highs[1]:  # a high surrogate begins a supplementary character
        spans.append((0x10000 + ((highs[0] - 0xD800) << 10), 0x10000 + ((highs[1] - 0xD800) << 10) + 0x3FF))
    return any(a <= b and _may_match_range(string, rules, a, b) for a, b in spans)


def may_escape(string: CheckedString, rules: StringRules) -> bool:
    """A backslash: only where some escape can give a character the string takes (\\uXXXX can give any)."""
    return not string.continuations and may_take_digits(string, rules, b"")


def may_close(string: CheckedString, rules: StringRules) -> bool:
    if string.continuations or string.code or string.count < rules.min_length:
        return False
    return string.matcher is None or rules.pattern.accepts(string.matcher)


def _may_match(string: CheckedString, rules: StringRules, code: int, continuations: tuple) -> bool:
    """Whether the character begun (its bits so far, the continuation bytes still to come) can be one the pattern
    takes next: a character cut between tokens must not lead where no token goes on."""
    low = high = code
    for first, last in continuations:  # the byte ranges still to come bound the character (no overlong forms)
        low, high = (low << 6) | (first & 0x3F), (high << 6) | (last & 0x3F)
    return _may_match_range(string, rules, low, high)


def _may_match_range(string: CheckedString, rules: StringRules, low: int, high: int) -> bool:
    """Whether a character in [low, high] can come next: the pattern takes it with its match still in reach."""
    if string.matcher is None:
        return True
    within = math.inf if rules.max_length is None else room(string, rules) - 1
    return rules.pattern.may_step(string.matcher, low, high, within)


def _counted(string: CheckedString, rules: StringRules, code: int) -> CheckedString | None:
    if rules.counts:
        if room(string, rules) < 1:
            return None
        string = string._replace(count=string.count + 1)
    if string.matcher is not None:
        matcher = rules.pattern.step(string.matcher, code)
        # a match must stay within reach: the fewest characters it still needs fit the room
        if not matcher or (rules.max_length is not None and rules.pattern.shortest_rest(matcher) > room(string, rules)):
            return None
        string = string._replace(matcher=matcher)
    return string
