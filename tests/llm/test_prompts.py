"""Prompts and conversations in the forms vLLM takes, and the ones refused with a reason."""

from __future__ import annotations

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.llm.prompts import Prompt, conversations, parse_prompts

VOCAB = 300


@pytest.mark.parametrize(("prompts", "expected"), [
    ("hi", [Prompt("hi", None)]),
    (["a", "b"], [Prompt("a", None), Prompt("b", None)]),
    ({"prompt": "hi"}, [Prompt("hi", None)]),
    ({"prompt_token_ids": [1, 2]}, [Prompt(None, [1, 2])]),
    ([{"prompt_token_ids": (3,)}, "x"], [Prompt(None, [3]), Prompt("x", None)]),
    ({"prompt_token_ids": torch.tensor([4, 5])}, [Prompt(None, [4, 5])]),
    ({"prompt": "hi", "prompt_token_ids": [7]}, [Prompt("hi", [7])]),
    ([], []),
])
def test_prompt_forms(prompts, expected):
    assert parse_prompts(prompts, VOCAB) == expected


@pytest.mark.parametrize(("prompts", "message"), [
    (3, "prompts must be a string, a dict or a list"),
    ([None], "prompt 0 is a NoneType"),
    ({"prompt": 3}, "\"prompt\" must be a string"),
    ({"prompt_token_ids": "abc"}, "must be a list of integers"),
    ({"prompt_token_ids": [True]}, "must be a list of integers"),
    ({"prompt_token_ids": 5}, "must be a list of integers"),
    (["a", {"prompt_token_ids": [300]}], "prompt 1: token id 300 is outside the vocabulary \\[0, 300\\)"),
])
def test_bad_prompts_say_what_is_wrong(prompts, message):
    with pytest.raises(DayzeroError, match=message):
        parse_prompts(prompts, VOCAB)


def test_one_conversation_or_several():
    one = [{"role": "user", "content": "hi"}]
    assert conversations(one) == [one]
    assert conversations([one, one]) == [one, one]


def test_text_parts_are_joined_and_other_fields_kept():
    message = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
               "name": "x"}
    assert conversations([message]) == [[{"role": "user", "content": "ab", "name": "x"}]]
    assert conversations([{"role": "assistant", "content": None}]) == [[{"role": "assistant", "content": ""}]]


@pytest.mark.parametrize(("messages", "message"), [
    ([], "a conversation"),
    ("hi", "a conversation"),
    ([[]], "conversation 0 must be a non-empty list"),
    ([{"content": "hi"}], "each message is a dict with a \"role\""),
    ([{"role": "user", "content": [{"type": "image_url"}]}], "text parts only"),
])
def test_bad_conversations_say_what_is_wrong(messages, message):
    with pytest.raises(DayzeroError, match=message):
        conversations(messages)
