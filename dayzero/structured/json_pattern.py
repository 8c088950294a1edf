"""A JSON schema's `pattern` (an ECMA-262 regular expression, matched anywhere in the string unless anchored) as an
automaton over the string's characters, so that a string held to it is checked as it is written (json_grammar.py).

The subset held: literals and escapes (\\d \\w \\s and their negations, \\n \\t \\r \\f \\v \\0, \\uXXXX, \\xXX, escaped
punctuation), `.`, classes with ranges and negation, groups (capturing or `(?:`), alternation, the quantifiers
* + ? {n} {n,} {n,m} (lazy forms match the same strings), `^` first and `$` last. Backreferences, lookaround and word
boundaries are refused. \\d and \\w are ASCII as in ECMA-262.

The automaton is a Thompson NFA; a state of the walk is the frozenset of NFA states after the characters so far.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from dayzero.structured.kept_steps import KeptSteps

MAX_STATES = 4096
MAX_CODE_POINT = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]
DIGIT: Ranges = ((0x30, 0x39),)
WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                 (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
LINE_ENDS: Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
CLASS_ESCAPES = {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False), "W": (WORD, True), "s": (SPACE, False),
                 "S": (SPACE, True)}
CONTROL_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
REFUSED_ESCAPES = frozenset("bBkcpP123456789")


class PatternError(ValueError):
    """A pattern outside the subset dayzero holds."""


@dataclass(frozen=True)
class CharSet:
    ranges: Ranges
    negated: bool = False

    def __contains__(self, char: int) -> bool:
        inside = any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated

    def meets(self, low: int, high: int) -> bool:
        """Whether some character in [low, high] is in the set."""
        if not self.negated:
            return any(a <= high and low <= b for a, b in self.ranges)
        for a, b in sorted(self.ranges):  # negated: a character of [low, high] outside every range
            if a > low:
                return True
            low = max(low, b + 1)
            if low > high:
                return False
        return low <= high


ANY_BUT_LINE_ENDS = CharSet(LINE_ENDS, negated=True)
EVERY_CHAR = CharSet(((0, MAX_CODE_POINT),))


@dataclass
class _Nfa:
    edges: list[list[tuple[CharSet, int]]] = field(default_factory=list)  # state -> (chars, next state)
    empty: list[list[int]] = field(default_factory=list)  # state -> states reached without a character

    def state(self) -> int:
        if len(self.edges) >= MAX_STATES:
            raise PatternError(f"the pattern needs over {MAX_STATES} automaton states; simplify it")
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1


# a fragment of the automaton: (entry state, exit state)
Fragment = tuple[int, int]


class Pattern:
    """The automaton of one pattern: start(), step(states, char), accepts(states)."""

    def __init__(self, source: str):
        if not isinstance(source, str):
            raise PatternError("pattern must be a string")
        self.source = source
        self._nfa = _Nfa()
        body, anchored_start, anchored_end = _anchors(source)
        parser = _Parser(body, self._nfa)
        entry, exit_ = parser.parse()
        # unanchored ends match anywhere: any characters may come before and after the match
        if not anchored_start:
            entry = self._loop_before(entry)
        if not anchored_end:
            exit_ = self._loop_after(exit_)
        self._entry, self._accept = entry, exit_
        self._distances = self._distances_to_accept()
        self._steps = KeptSteps(self._step)

    def _distances_to_accept(self) -> list[float]:
        """Per NFA state: the fewest characters that lead from it to a match (0-1 breadth-first, backwards)."""
        back: list[list[tuple[int, int]]] = [[] for _ in self._nfa.edges]
        for state, (edges, empty) in enumerate(zip(self._nfa.edges, self._nfa.empty)):
            for _, target in edges:
                back[target].append((state, 1))
            for target in empty:
                back[target].append((state, 0))
        distances = [math.inf] * len(back)
        distances[self._accept] = 0
        queue = collections.deque([self._accept])
        while queue:
            state = queue.popleft()
            for source, cost in back[state]:
                if distances[state] + cost < distances[source]:
                    distances[source] = distances[state] + cost
                    (queue.appendleft if cost == 0 else queue.append)(source)
        return distances

    def _loop_before(self, entry: int) -> int:
        loop = self._nfa.state()
        self._nfa.edges[loop].append((EVERY_CHAR, loop))
        self._nfa.empty[loop].append(entry)
        return loop

    def _loop_after(self, exit_: int) -> int:
        loop = self._nfa.state()
        self._nfa.empty[exit_].append(loop)
        self._nfa.edges[loop].append((EVERY_CHAR, loop))
        return loop

    def start(self) -> frozenset[int]:
        return self._closure({self._entry})

    def step(self, states: frozenset[int], char: int) -> frozenset[int]:
        """The states after one more character (empty: no match can follow); kept, as a vocabulary search takes the
        same steps again and again."""
        return self._steps[states, char]

    def _step(self, states: frozenset[int], char: int) -> frozenset[int]:
        following = {target for state in states for chars, target in self._nfa.edges[state] if char in chars}
        return self._closure(following)

    def accepts(self, states: frozenset[int]) -> bool:
        return self._accept in states

    def shortest_rest(self, states: frozenset[int]) -> float:
        """The fewest more characters that make a match (inf: none can)."""
        return min((self._distances[state] for state in states), default=math.inf)

    def may_step(self, states: frozenset[int], low: int, high: int, within: float = math.inf) -> bool:
        """Whether some character in [low, high] moves the states on to where a match is at most `within` more
        characters away."""
        return any(chars.meets(low, high) and self.shortest_rest(self._closure({target})) <= within
                   for state in states for chars, target in self._nfa.edges[state])

    def _closure(self, states: set[int]) -> frozenset[int]:
        seen, todo = set(states), list(states)
        while todo:
            for target in self._nfa.empty[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return frozenset(seen)


def _anchors(source: str) -> tuple[str, bool, bool]:
    """-> (the pattern without its anchors, anchored at the start, at the end)."""
    anchored_start = source.startswith("^")
    body = source[1:] if anchored_start else source
    anchored_end = body.endswith("$") and not _escaped_at(body, len(body) - 1)
    body = body[:-1] if anchored_end else body
    if (anchored_start or anchored_end) and _alternates_at_top(body):
        # ECMA-262 binds ^ and $ to the first and last branch only ("^a|b$"): refused rather than misread
        raise PatternError(f"pattern {source!r}: anchors around a top-level | cannot be held; group the branches, "
                           "as ^(a|b)$")
    return body, anchored_start, anchored_end


def _escaped_at(text: str, index: int) -> bool:
    backslashes = len(text[:index]) - len(text[:index].rstrip("\\"))
    return backslashes % 2 == 1


def _alternates_at_top(body: str) -> bool:
    depth, in_class, index = 0, False, 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            return True
        index += 1
    return False


class _Parser:
    """Recursive descent over the pattern, building Thompson fragments."""

    def __init__(self, text: str, nfa: _Nfa):
        self.text, self.at, self.nfa = text, 0, nfa

    def parse(self) -> Fragment:
        fragment = self._alternation()
        if self.at < len(self.text):
            raise PatternError(f"pattern {self.text!r}: unexpected {self.text[self.at]!r} at {self.at}")
        return fragment

    def _peek(self) -> str | None:
        return self.text[self.at] if self.at < len(self.text) else None

    def _take(self) -> str:
        if self.at >= len(self.text):
            raise PatternError(f"pattern {self.text!r} ends too soon")
        self.at += 1
        return self.text[self.at - 1]

    def _alternation(self) -> Fragment:
        branches = [self._sequence()]
        while self._peek() == "|":
            self._take()
            branches.append(self._sequence())
        if len(branches) == 1:
            return branches[0]
        entry, exit_ = self.nfa.state(), self.nfa.state()
        for branch_entry, branch_exit in branches:
            self.nfa.empty[entry].append(branch_entry)
            self.nfa.empty[branch_exit].append(exit_)
        return entry, exit_

    def _sequence(self) -> Fragment:
        entry = exit_ = self.nfa.state()
        while self._peek() not in (None, "|", ")"):
            item_entry, item_exit = self._quantified()
            self.nfa.empty[exit_].append(item_entry)
            exit_ = item_exit
        return entry, exit_

    def _quantified(self) -> Fragment:
        start = self.at
        atom = self._atom()
        low, high = self._quantifier()
        if (low, high) == (1, 1):
            return atom
        if self._peek() == "?":  # lazy: the same strings match
            self._take()
        atom_text = self.text[start:self.at]
        return self._repeat(atom, atom_text, low, high)

    def _quantifier(self) -> tuple[int, int | None]:
        mark = self._peek()
        if mark in ("*", "+", "?"):
            self._take()
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[mark]
        if mark == "{" and self._counted_repeat_follows():
            self._take()
            body = ""
            while self._peek() != "}":
                body += self._take()
            self._take()
            low_text, comma, high_text = body.partition(",")
            low = int(low_text)
            high = low if not comma else (int(high_text) if high_text else None)
            if high is not None and high < low:
                raise PatternError(f"pattern {self.text!r}: {{{body}}} has its bounds reversed")
            return low, high
        return 1, 1

    def _counted_repeat_follows(self) -> bool:
        end = self.text.find("}", self.at)
        body = self.text[self.at + 1:end] if end > 0 else ""
        low, _, high = body.partition(",")
        return low.isdigit() and (high == "" or high.isdigit())

    def _repeat(self, atom: Fragment, atom_text: str, low: int, high: int | None) -> Fragment:
        """atom repeated low..high times (None: unbounded); copies re-parse the atom's text."""
        copies = [atom] + [self._copy(atom_text) for _ in range(max(low, 1 if high is None else high) - 1)]
        entry = exit_ = self.nfa.state()
        for index, (copy_entry, copy_exit) in enumerate(copies):
            self.nfa.empty[exit_].append(copy_entry)
            if index >= low:  # an optional copy may be skipped
                self.nfa.empty[exit_].append(copy_exit)
            exit_ = copy_exit
        if high is None:  # the last copy may come again
            last_entry, last_exit = copies[-1]
            self.nfa.empty[last_exit].append(last_entry)
            if low == 0:
                self.nfa.empty[entry].append(last_exit)
        return entry, exit_

    def _copy(self, atom_text: str) -> Fragment:
        parser = _Parser(atom_text, self.nfa)
        return parser._atom()

    def _atom(self) -> Fragment:
        char = self._take()
        if char == "(":
            if self.text.startswith("?:", self.at):
                self.at += 2
            elif self._peek() == "?":
                raise PatternError(f"pattern {self.text!r}: lookaround and named groups cannot be held")
            fragment = self._alternation()
            if self._take() != ")":
                raise PatternError(f"pattern {self.text!r}: a group is not closed")
            return fragment
        if char == "[":
            return self._edge(self._class())
        if char == ".":
            return self._edge(ANY_BUT_LINE_ENDS)
        if char == "\\":
            return self._edge(self._escape(in_class=False))
        if char in "^$":
            raise PatternError(f"pattern {self.text!r}: ^ and $ are held only at its start and end")
        if char in "*+?)" or (char == "{" and self._counted_repeat_follows_at(self.at - 1)):
            raise PatternError(f"pattern {self.text!r}: {char!r} at {self.at - 1} has nothing to repeat or close")
        return self._edge(CharSet(((ord(char), ord(char)),)))

    def _counted_repeat_follows_at(self, at: int) -> bool:
        saved, self.at = self.at, at
        try:
            return self._counted_repeat_follows()
        finally:
            self.at = saved

    def _edge(self, chars: CharSet) -> Fragment:
        entry, exit_ = self.nfa.state(), self.nfa.state()
        self.nfa.edges[entry].append((chars, exit_))
        return entry, exit_

    def _escape(self, in_class: bool) -> CharSet:
        char = self._take()
        if char in CLASS_ESCAPES:
            ranges, negated = CLASS_ESCAPES[char]
            return CharSet(ranges, negated)
        if char in REFUSED_ESCAPES and not (in_class and char == "b"):
            raise PatternError(f"pattern {self.text!r}: \\{char} (a backreference, word boundary or property) cannot "
                               "be held")
        code = self._escaped_code(char, in_class)
        return CharSet(((code, code),))

    def _escaped_code(self, char: str, in_class: bool) -> int:
        if in_class and char == "b":
            return 0x08
        if char in CONTROL_ESCAPES:
            return CONTROL_ESCAPES[char]
        if char in "ux":
            digits = "".join(self._take() for _ in range(4 if char == "u" else 2))
            try:
                return int(digits, 16)
            except ValueError:
                raise PatternError(f"pattern {self.text!r}: \\{char}{digits} is not a hex escape") from None
        if char.isalnum():
            raise PatternError(f"pattern {self.text!r}: \\{char} is not an escape dayzero knows")
        return ord(char)

    def _class(self) -> CharSet:
        negated = self._peek() == "^"
        if negated:
            self._take()
        ranges: list[tuple[int, int]] = []
        first = True
        while first or self._peek() != "]":
            first = False
            low = self._class_member()
            if isinstance(low, CharSet):
                ranges += _positive_ranges(low)
                continue
            if self._peek() == "-" and self.text[self.at + 1:self.at + 2] not in ("]", ""):
                self._take()
                high = self._class_member()
                if isinstance(high, CharSet) or high < low:
                    raise PatternError(f"pattern {self.text!r}: a bad range in a character class")
                ranges.append((low, high))
            else:
                ranges.append((low, low))
        self._take()
        return CharSet(tuple(ranges), negated)

    def _class_member(self) -> int | CharSet:
        char = self._take()
        if char != "\\":
            return ord(char)
        chars = self._escape(in_class=True)
        if chars.negated or len(chars.ranges) != 1 or chars.ranges[0][0] != chars.ranges[0][1]:
            return chars
        return chars.ranges[0][0]


def _positive_ranges(chars: CharSet) -> list[tuple[int, int]]:
    """A class escape's ranges, its negation (\\D \\W \\S) spelled as the ranges between."""
    if not chars.negated:
        return list(chars.ranges)
    ranges, start = [], 0
    for low, high in sorted(chars.ranges):
        if low > start:
            ranges.append((start, low - 1))
        start = high + 1
    return ranges + ([(start, MAX_CODE_POINT)] if start <= MAX_CODE_POINT else [])
