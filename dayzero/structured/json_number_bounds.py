"""Bounds on a JSON number held as it is written (a schema's minimum / maximum, exclusive or not): can the digits
so far still end inside the bounds, and is the whole number inside them. Exact rational arithmetic; the numbers a
bounded node takes are written without an exponent (json_grammar.py), so their digits so far pin them down:

    "12"   -> 12, 12.x, 12x, 12x.x, ...: the union over k >= 0 of [12 * 10^k, 13 * 10^k)
    "12.3" -> [12.3, 12.4)            "0" -> [0, 1)            "-12" -> the mirror of "12"

An integer's completions are the integers of the same sets (no fraction).
"""

from __future__ import annotations

import math
from fractions import Fraction

Bound = tuple[float, bool]  # (value, exclusive)
# the widest magnitude a completion is tried at: 10^400 is past every float bound
MAX_POWER = 400


def within(text: bytes, low: Bound | None, high: Bound | None) -> bool:
    """Whether the whole number `text` lies inside the bounds."""
    return _inside(Fraction(text.decode()), low, high)


def reachable(text: bytes, integer: bool, low: Bound | None, high: Bound | None) -> bool:
    """Whether some number that starts with `text` (a sign, digits, a dot, more digits) lies inside the bounds."""
    negative = text.startswith(b"-")
    digits = text[1:] if negative else text
    whole, dot, fraction = digits.decode().partition(".")
    if not digits:  # a lone sign: any number <= 0
        spans = [(Fraction(0), Fraction(10 ** MAX_POWER))]
    elif dot:
        start = Fraction(f"{whole}.{fraction or 0}")
        spans = [(start, start + Fraction(1, 10 ** len(fraction)))]
    elif whole == "0":
        spans = [(Fraction(0), Fraction(1))]
    else:
        return _some_magnitude_meets(int(whole), negative, integer, low, high)
    return any(_span_meets(lo, hi, negative, integer, low, high) for lo, hi in spans)


def _some_magnitude_meets(value: int, negative: bool, integer: bool, low: Bound | None, high: Bound | None) -> bool:
    """Digits without a dot: [value * 10^k, (value + 1) * 10^k) for k = 0, 1, ... (mirrored when negative), tried
    until the spans pass the bound they grow towards."""
    outer = low if negative else high
    for k in range(MAX_POWER):
        start, end = Fraction(value * 10 ** k), Fraction((value + 1) * 10 ** k)
        if _span_meets(start, end, negative, integer, low, high):
            return True
        if outer is not None and start > abs(Fraction(outer[0])) + 1:
            return False
    return False


def _span_meets(start: Fraction, end: Fraction, negative: bool, integer: bool, low: Bound | None,
                high: Bound | None) -> bool:
    """Whether [start, end) (mirrored to (-end, -start] when negative) holds a number inside the bounds (an
    integer one for integers)."""
    if integer:
        first, last = (math.ceil(start), math.ceil(end) - 1)
        return _integers_meet(-last if negative else first, -first if negative else last, low, high)
    return _decimals_meet(start, end, negative, low, high)


def _integers_meet(first: int, last: int, low: Bound | None, high: Bound | None) -> bool:
    if low is not None:
        value, exclusive = Fraction(low[0]), low[1]
        first = max(first, math.floor(value) + 1 if exclusive else math.ceil(value))
    if high is not None:
        value, exclusive = Fraction(high[0]), high[1]
        last = min(last, math.ceil(value) - 1 if exclusive else math.floor(value))
    return first <= last


def _decimals_meet(start: Fraction, end: Fraction, negative: bool, low: Bound | None, high: Bound | None) -> bool:
    # the numbers written with these digits are the finite decimals of [start, end) (negated when negative): dense,
    # so the span meets the bounds unless they leave it empty or a single point the span does not hold
    lo, lo_closed, hi, hi_closed = (-end, False, -start, True) if negative else (start, True, end, False)
    if low is not None and (Fraction(low[0]) > lo or (Fraction(low[0]) == lo and low[1])):
        lo, lo_closed = Fraction(low[0]), not low[1]
    if high is not None and (Fraction(high[0]) < hi or (Fraction(high[0]) == hi and high[1])):
        hi, hi_closed = Fraction(high[0]), not high[1]
    return lo < hi or (lo == hi and lo_closed and hi_closed)


def _inside(value: Fraction, low: Bound | None, high: Bound | None) -> bool:
    above = low is None or (value > Fraction(low[0]) if low[1] else value >= Fraction(low[0]))
    below = high is None or (value < Fraction(high[0]) if high[1] else value <= Fraction(high[0]))
    return above and below
