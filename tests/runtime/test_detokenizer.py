"""Streamed text: pieces decoded a few tokens at a time add up to the whole decode, a character split over tokens
waits until it is whole, and stop strings are cut out without ever showing text that is later taken back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.runtime.detokenizer import ChoiceText, IncrementalDetokenizer, StopStringWatch
from dayzero.tokenizer import ByteTokenizer

decode = ByteTokenizer().decode
# bytes (0-255) and the byte tokenizer's special ids (256-258, decoded to nothing)
token_lists = st.lists(st.integers(0, 258), max_size=40)
arrivals = st.lists(st.integers(1, 4), min_size=1, max_size=40)


def batches(tokens: list[int], sizes: list[int]):
    start = 0
    for size in sizes * (len(tokens) + 1):
        if start >= len(tokens):
            return
        yield tokens[start:start + size]
        start += size


@settings(max_examples=200, deadline=None)
@given(token_lists, arrivals)
def test_incremental_text_is_the_whole_decode(tokens, sizes):
    detokenizer = IncrementalDetokenizer(decode)
    for batch in batches(tokens, sizes):
        detokenizer.add(batch)
        assert decode(tokens).startswith(detokenizer.text)
    detokenizer.flush()
    assert detokenizer.text == decode(tokens)


def test_a_character_split_over_tokens_waits_until_it_is_whole():
    detokenizer = IncrementalDetokenizer(decode)
    euro = list("€".encode())
    detokenizer.add([ord("a")])
    detokenizer.add([euro[0]])
    assert detokenizer.text == "a"
    detokenizer.add([euro[1]])
    assert detokenizer.text == "a"
    detokenizer.add([euro[2], ord("b")])
    assert detokenizer.text == "a€b"


def until_stop(text: str, stop: list[str]) -> str:
    """The text the engine generates: it stops at the first character that completes a stop string."""
    return next((text[:end] for end in range(len(text) + 1) if any(s in text[:end] for s in stop)), text)


@settings(max_examples=300, deadline=None)
@given(st.text("abc", max_size=30), st.lists(st.text("abc", min_size=1, max_size=3), max_size=3), arrivals)
def test_shown_text_never_holds_a_stop_string_and_ends_cut_before_the_first(text, stop, sizes):
    generated = until_stop(text, stop)
    choice = ChoiceText(decode, tuple(stop))
    shown = ""
    for batch in batches(list(generated.encode()), sizes):
        shown += choice.add(batch)
        assert not any(s in shown for s in stop)
    shown += choice.finish()
    hits = [generated.find(s) for s in stop if s in generated]
    assert shown == (generated[: min(hits)] if hits else generated) == choice.text
    assert choice.num_tokens == len(generated)


@settings(max_examples=300, deadline=None)
@given(st.text("abc€", max_size=30), st.lists(st.text("abc€", min_size=1, max_size=3), min_size=1, max_size=3))
def test_stop_watch_fires_at_the_token_the_whole_decode_first_holds_a_stop_string(text, stop):
    tokens = list(text.encode())
    watch = StopStringWatch(decode, tuple(stop))
    fired = next((i for i, token in enumerate(tokens) if watch.add(token)), None)
    expected = next((i for i in range(len(tokens)) if any(s in decode(tokens[: i + 1]) for s in stop)), None)
    assert fired == expected
