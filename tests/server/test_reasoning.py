"""A thinking model's reasoning (`<think>` ... `</think>`) comes back as `reasoning_content` beside the answer, however
its tokens arrive, whole and streamed, when the model opens it or the template did, and before tool calls; text that
only looks like the marker stays the answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from dayzero.server.reasoning import THINK_BEGIN, THINK_END, ReasoningText
from dayzero.structured.tool_calls import SECTION_BEGIN
from tests.helpers import KIMI_VOCAB, random_model, tiny_config_dict
from tests.server.test_server import events, make_server
from tests.server.test_tool_calls import ASK, CALLS, TIME, TWO_CALLS, WEATHER, kimi_tokenizer, script_replies


def split(text: str, pieces: list[str], thinking: bool = False, kept_ends: tuple[str, ...] = ()) -> tuple[str, str]:
    reasoning_text, reasoning, answer = ReasoningText(thinking, kept_ends), "", ""
    for piece in pieces:
        more_reasoning, more_answer = reasoning_text.add(piece)
        reasoning, answer = reasoning + more_reasoning, answer + more_answer
    last_reasoning, last_answer = reasoning_text.finish()
    return reasoning + last_reasoning, answer + last_answer


@pytest.mark.parametrize("text, thinking, expected", [
    (f"{THINK_BEGIN}Let me see.{THINK_END}Sunny.", False, ("Let me see.", "Sunny.")),
    (f"\n {THINK_BEGIN}a{THINK_END}", False, ("a", "")),
    (f"plan{THINK_END}answer", True, ("plan", "answer")),
    ("still thinking", True, ("still thinking", "")),
    ("no reasoning here", False, ("", "no reasoning here")),
    ("<thinking> is a tag", False, ("", "<thinking> is a tag")),
    (f"{THINK_BEGIN}never closed", False, ("never closed", "")),
])
def test_reasoning_and_answer_are_split_at_the_markers(text, thinking, expected):
    assert split(text, [text], thinking) == expected


def test_a_tool_call_section_ends_the_reasoning_and_stays_in_the_answer():
    """Kimi K2.5's interleaved thinking: a call section inside the reasoning ends it without a closing marker."""
    text = f"{THINK_BEGIN}I need the weather.{TWO_CALLS[len('Let me look.'):]}"
    assert split(text, [text], kept_ends=(SECTION_BEGIN,)) == ("I need the weather.", TWO_CALLS[len("Let me look."):])
    assert split(text, [text]) == (text[len(THINK_BEGIN):], "")  # without tools the section is reasoning text


atoms = st.sampled_from(["a", " ", "<", "/", ">", "think", "\n", THINK_BEGIN, THINK_END, "<thi", "nk>", SECTION_BEGIN,
                         "<|tool_calls"])


@settings(max_examples=300, deadline=None)
@given(st.lists(atoms, max_size=10).map("".join), st.booleans(), st.booleans(), st.data())
def test_any_split_of_the_text_splits_it_as_the_whole(text, thinking, with_tools, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    ends = (SECTION_BEGIN,) if with_tools else ()
    assert split(text, pieces, thinking, ends) == split(text, [text], thinking, ends)


THINKING_TEMPLATE = ("{% for m in messages %}<|im_user|>{{ m.role }}: {{ m.content }}"
                     "{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}<|im_end|>{% endfor %}"
                     "<|im_user|>assistant: {% if opened %}<think>{% endif %}")


def thinking_server(tmp_path, opened: bool):
    kimi_tokenizer(tmp_path, more_special=(THINK_BEGIN, THINK_END))
    (tmp_path / "chat_template.jinja").write_text(THINKING_TEMPLATE.replace("opened", str(opened).lower()))
    return make_server(random_model(tiny_config_dict(vocab_size=KIMI_VOCAB)), tmp_path)


@pytest.mark.parametrize("opened", [False, True], ids=["model opens", "template opens"])
def test_the_chat_answer_carries_its_reasoning_whole_and_streamed(tmp_path, monkeypatch, opened):
    server = thinking_server(tmp_path, opened)
    prompts, reply = script_replies(server, monkeypatch)
    reply["text"] = ("" if opened else THINK_BEGIN) + f"Check the sky.{THINK_END}It is sunny."
    try:
        with TestClient(server.app) as client:
            history = [*ASK, {"role": "assistant", "content": "Hm.", "reasoning_content": "earlier"}, *ASK]
            message = client.post("/v1/chat/completions", json={"messages": history}).json()["choices"][0]["message"]
            deltas = [e["choices"][0]["delta"] for e in events(client.post(
                "/v1/chat/completions", json={"messages": ASK, "stream": True})) if e["choices"]]
    finally:
        server.close()
    assert message == {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Check the sky."}
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Check the sky."
    assert "".join(d.get("content") or "" for d in deltas) == "It is sunny."
    assert bytes(t for t in prompts[0] if t < 256).count(b"[earlier]") == 1


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "interleaved"])
def test_reasoning_comes_before_tool_calls(tmp_path, monkeypatch, closed):
    server = thinking_server(tmp_path, opened=False)
    _, reply = script_replies(server, monkeypatch)
    reply["text"] = f"{THINK_BEGIN}Two lookups.{THINK_END if closed else ''}" + TWO_CALLS
    try:
        with TestClient(server.app) as client:
            body = client.post("/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER, TIME]}).json()
    finally:
        server.close()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    # without a closing marker the text before the section is still reasoning
    content, reasoning = ("Let me look.", "Two lookups.") if closed else (None, "Two lookups.Let me look.")
    assert choice["message"] == {"role": "assistant", "content": content, "reasoning_content": reasoning,
                                 "tool_calls": [call.body() for call in CALLS]}


@pytest.mark.parametrize("opened", [False, True], ids=["model opens", "template opens"])
def test_a_json_answer_starts_after_the_reasoning(tmp_path, opened):
    """The real engine behind it (a random model, nudged to open and close its reasoning soon): the reasoning runs
    free, the answer after it is held to JSON."""
    import json

    server = thinking_server(tmp_path, opened)
    begin, end = (server.tokenizer.token_id(m) for m in (THINK_BEGIN, THINK_END))
    bias = {str(begin): 3.0, str(end): 3.0, **{str(b): 4.0 for b in b'"}'}}
    try:
        with TestClient(server.app) as client:
            reply = client.post("/v1/chat/completions", json={
                "messages": ASK, "response_format": {"type": "json_object"}, "max_tokens": 300, "temperature": 0.8,
                "seed": 1, "logit_bias": bias}).json()
    finally:
        server.close()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop", reply
    assert isinstance(json.loads(choice["message"]["content"]), dict)
    # free text: the grammar did not hold the reasoning (a JSON-held answer could not hold these bytes)
    assert not json_text_only(choice["message"]["reasoning_content"])


def json_text_only(text: str) -> bool:
    """Whether text could lie inside a JSON object's structure: no control bytes but whitespace, no '<'."""
    return all(c in " \t\n\r" or (c >= " " and c != "<") for c in text)
