"""Tool calls in Kimi's format: the model's text splits into the answer and its calls however its tokens arrive,
and the chat endpoint offers tools through the checkpoint's template and answers with OpenAI's `tool_calls`,
whole and streamed; `tool_choice` can force a call; requests it cannot serve are refused with what to do."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from dayzero.runtime.engine_loop import Update
from dayzero.server.tool_call_stream import StreamedCalls
from dayzero.structured.tool_calls import (
    ARGUMENTS_BEGIN,
    CALL_BEGIN,
    CALL_END,
    SECTION_BEGIN,
    SECTION_END,
    ToolCall,
    ToolCallText,
    call_prefix,
    decode_keeping,
    marker_ids,
)
from dayzero.tokenizer import ByteTokenizer, TiktokenTokenizer
from tests.helpers import KIMI_VOCAB, random_model, tiny_config_dict, write_kimi_tokenizer
from tests.server.test_server import assert_nothing_open, events, make_server

MARKERS = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENTS_BEGIN, CALL_END)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
TIME = {"type": "function", "function": {"name": "get_time"}}
SCHEMAS = {"get_weather": WEATHER["function"]["parameters"], "get_time": {"type": "object"}}
ASK = [{"role": "user", "content": "Weather in Paris and the time?"}]
# a template in the spirit of Kimi's: the tools as JSON, earlier calls and results written back with their ids
TEMPLATE = ("{% if tools %}<|im_user|>tools: {{ tools | tojson }}<|im_end|>{% endif %}"
            "{% for m in messages %}<|im_user|>{{ m.role }}: {{ m.content }}"
            "{% for c in m.tool_calls or [] %}[{{ c.id }} {{ c.function.arguments }}]{% endfor %}"
            "{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}<|im_end|>{% endfor %}<|im_user|>assistant: ")


def call_text(name: str, index: int, arguments: str) -> str:
    return f"{CALL_BEGIN}functions.{name}:{index}{ARGUMENTS_BEGIN}{arguments}{CALL_END}"


TWO_CALLS = (f"Let me look.{SECTION_BEGIN}" + call_text("get_weather", 0, '{"city": "Paris"}') + "\n"
             + call_text("get_time", 1, "{}") + SECTION_END)
CALLS = [ToolCall("functions.get_weather:0", "get_weather", '{"city": "Paris"}'),
         ToolCall("functions.get_time:1", "get_time", "{}")]


def split(text: str, pieces: list[str], prefix: str = "") -> tuple[str, list[ToolCall]]:
    """Feed pieces through a ToolCallText -> (answer text, calls)."""
    tool_text, answer, calls = ToolCallText(prefix), "", []
    for piece in pieces:
        shown, new = tool_text.add(piece)
        answer, calls = answer + shown, calls + new
    return answer + tool_text.finish(), calls


def test_the_text_before_the_section_is_the_answer_and_each_call_is_read():
    assert split(TWO_CALLS, [TWO_CALLS]) == ("Let me look.", CALLS)
    assert CALLS[0].body(3) == {"index": 3, "id": "functions.get_weather:0", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


# atoms of a model's text: characters, markers, whole calls
ATOMS = list("ab <|>{}:\n") + list(MARKERS) + [call_text("f", 0, '{"x": 1}'), "functions.g:1" + ARGUMENTS_BEGIN]
pieces_of_text = st.lists(st.sampled_from(ATOMS), max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(pieces_of_text, max_size=6), st.data())
def test_any_split_of_the_text_gives_the_answer_and_calls_of_the_whole(parts, data):
    """However the tokens cut the text (markers included), the answer and calls are those of the whole text; text
    that is no call comes back whole."""
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    answer, calls = split(text, pieces)
    assert (answer, calls) == split(text, [text])
    if SECTION_BEGIN not in text:
        assert answer == text and not calls


def test_a_piece_that_may_begin_the_section_is_held_back():
    tool_text = ToolCallText()
    assert tool_text.add("Sure <|tool_calls") == ("Sure ", [])
    assert tool_text.add("_section_begin|>" + call_text("f", 0, "{}")) == ("", [ToolCall("functions.f:0", "f", "{}")])
    assert ToolCallText().add("a <|tool_call_e") == ("a <|tool_call_e", [])


def test_an_unfinished_or_malformed_call_comes_back_as_text():
    unfinished = SECTION_BEGIN + CALL_BEGIN + 'functions.f:0' + ARGUMENTS_BEGIN + '{"a": '
    assert split(unfinished, [unfinished]) == (unfinished, [])
    malformed = SECTION_BEGIN + CALL_BEGIN + "functions.f:0 {}" + CALL_END + call_text("g", 1, "[]") + SECTION_END
    answer, calls = split(malformed, [malformed])
    assert calls == [ToolCall("functions.g:1", "g", "[]")]
    assert answer == SECTION_BEGIN + CALL_BEGIN + "functions.f:0 {}" + CALL_END + SECTION_END


def test_a_forced_call_begins_the_text():
    named = call_prefix("get_weather", 2)
    assert split('{"city": "Oslo"}' + CALL_END + SECTION_END, ['{"city": ', '"Oslo"}', CALL_END], named) == (
        "", [ToolCall("functions.get_weather:2", "get_weather", '{"city": "Oslo"}')])
    assert split("get_time:0" + ARGUMENTS_BEGIN + "{}" + CALL_END, ["get_time:0", ARGUMENTS_BEGIN + "{}" + CALL_END],
                 call_prefix(None, 0)) == ("", [ToolCall("functions.get_time:0", "get_time", "{}")])


def kimi_tokenizer(directory, more_special: tuple[str, ...] = ()) -> TiktokenTokenizer:
    return TiktokenTokenizer(write_kimi_tokenizer(directory, more_special=MARKERS + ("<|im_system|>", *more_special)))


def test_tokenizers_with_the_markers_decode_them_as_text(tmp_path):
    tokenizer = kimi_tokenizer(tmp_path)
    markers = marker_ids(tokenizer)
    assert sorted(markers.values()) == sorted(MARKERS)
    ids = tokenizer.encode(TWO_CALLS)
    assert tokenizer.decode(ids) == 'Let me look.functions.get_weather:0{"city": "Paris"}\nfunctions.get_time:1{}'
    assert decode_keeping(tokenizer.decode, markers)(ids) == TWO_CALLS
    assert marker_ids(ByteTokenizer()) is None
    assert marker_ids(TiktokenTokenizer(write_kimi_tokenizer(tmp_path))) is None


# the chat endpoint, on a checkpoint with a Kimi-style tokenizer and a template that shows tools


@pytest.fixture(scope="module")
def kimi_server(tmp_path_factory):
    checkpoint = tmp_path_factory.mktemp("kimi")
    kimi_tokenizer(checkpoint)
    (checkpoint / "chat_template.jinja").write_text(TEMPLATE)
    server = make_server(random_model(tiny_config_dict(vocab_size=KIMI_VOCAB)), checkpoint)
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(kimi_server):
    # one client for the module: leaving a TestClient's context ends the app's lifespan, which stops the engine loop
    with TestClient(kimi_server.app) as client:
        yield client


def script_replies(server, monkeypatch) -> tuple[list, dict]:
    """Every choice's answer becomes reply["text"], a few tokens an update, then "stop" -> (the prompts sent,
    reply)."""
    prompts, reply = [], {}

    def submit(prompt_ids, params, request_id, post):
        prompts.append(prompt_ids)
        ids = server.llm.tokenizer.encode(reply["text"])
        post(Update())
        for start in range(0, len(ids), 3):
            post(Update(ids[start:start + 3]))
        post(Update([], "stop"))

    monkeypatch.setattr(server.loop, "submit", submit)
    return prompts, reply


@pytest.fixture
def scripted(kimi_server, monkeypatch):
    return script_replies(kimi_server, monkeypatch)


# a random model, nudged toward closing strings and objects, ends its JSON within a few hundred tokens
CLOSERS = {str(b): 4.0 for b in b'"}'}


def chat(client, **fields):
    return client.post("/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER, TIME], **fields})


def test_a_turn_that_calls_tools_answers_with_tool_calls(kimi_server, client, scripted):
    prompts, reply = scripted
    reply["text"] = TWO_CALLS
    body = chat(client).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {"role": "assistant", "content": "Let me look.",
                                 "tool_calls": [call.body() for call in CALLS]}
    shown = decode_keeping(kimi_server.llm.tokenizer.decode, kimi_server.tool_markers)(prompts[0])
    # the turn markers are special tokens that decode to nothing; tojson keeps key order, as transformers' does
    assert shown.startswith("tools: " + json.dumps([WEATHER, TIME], ensure_ascii=False))
    assert shown.endswith("assistant: ")
    assert_nothing_open(kimi_server)


def assembled(deltas: list[dict]) -> list[dict]:
    """Streamed tool-call deltas -> the calls they add up to, as a client assembles them (by index); each call's
    first delta carries its id, type and name once."""
    calls: list[dict] = []
    for delta in deltas:
        if delta["index"] == len(calls):
            assert {"id", "type"} <= set(delta) and delta["function"]["name"], delta
            calls.append({"index": delta["index"], "id": delta["id"], "type": delta["type"],
                          "function": {"name": delta["function"]["name"], "arguments": ""}})
        else:
            assert delta["index"] == len(calls) - 1 and set(delta) == {"index", "function"}, delta
        calls[-1]["function"]["arguments"] += delta["function"]["arguments"]
    return calls


def test_streamed_calls_come_piece_by_piece_with_their_index_and_the_same_answer(kimi_server, client, scripted):
    scripted[1]["text"] = TWO_CALLS
    chunks = events(chat(client, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "Let me look."
    call_deltas = [call for d in deltas for call in d.get("tool_calls", ())]
    assert assembled(call_deltas) == [c.body(i) for i, c in enumerate(CALLS)]
    # the first call's head went out before its arguments were whole
    assert call_deltas[0]["function"]["arguments"] == "" and len(call_deltas) > 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert_nothing_open(kimi_server)


def test_a_streamed_call_cut_by_max_tokens_stays_a_call(client, scripted):
    """A call whose head went out and which the answer never finished is not repeated as answer text."""
    scripted[1]["text"] = f"Hm.{SECTION_BEGIN}" + call_text("get_weather", 0, '{"city": "Par')[:-len(CALL_END)]
    deltas = [c["choices"][0]["delta"] for c in events(chat(client, stream=True))]
    assert "".join(d.get("content") or "" for d in deltas) == "Hm."
    (call,) = assembled([call for d in deltas for call in d.get("tool_calls", ())])
    assert call["id"] == "functions.get_weather:0" and call["function"]["arguments"] == '{"city": "Par'


def test_parallel_tool_calls_false_streams_the_first_call_only(client, scripted):
    scripted[1]["text"] = TWO_CALLS
    deltas = [c["choices"][0]["delta"] for c in events(chat(client, stream=True, parallel_tool_calls=False))]
    assert assembled([call for d in deltas for call in d.get("tool_calls", ())]) == [CALLS[0].body(0)]


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces_of_text, max_size=6), st.data())
def test_any_split_streams_the_calls_of_the_whole(parts, data):
    """However the tokens cut the text, the streamed deltas add up to the calls of the whole text, in order."""
    text = SECTION_BEGIN + "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    tool_text, stream, deltas, calls = ToolCallText(), StreamedCalls(), [], []
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        _, new = tool_text.add(text[start:end])
        calls += new
        deltas += stream.deltas(new, tool_text.open_call())
    expected = [c.body(i) for i, c in enumerate(calls)]
    streamed = assembled(deltas)
    if stream.open:  # an unfinished call went out as far as it was written
        streamed, cut = streamed[:-1], streamed[-1]
        assert cut["function"]["arguments"] == tool_text.open_call().arguments
    assert streamed == expected


def test_parallel_tool_calls_false_keeps_the_first_call(client, scripted):
    scripted[1]["text"] = TWO_CALLS
    message = chat(client, parallel_tool_calls=False).json()["choices"][0]["message"]
    assert message["tool_calls"] == [CALLS[0].body()]


def test_a_named_tool_choice_starts_the_turn_with_that_call(kimi_server, client, scripted):
    """The prompt ends in the call's opening (numbered after the conversation's earlier calls), which the answer's
    calls include; the earlier call and its result reach the template with their ids."""
    prompts, reply = scripted
    reply["text"] = '{"city": "Rome"}' + CALL_END + SECTION_END
    earlier = {"id": "functions.get_time:0", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [earlier]},
                      {"role": "tool", "tool_call_id": "functions.get_time:0", "content": "noon"}]
    reply_body = chat(client, messages=messages,
                      tool_choice={"type": "function", "function": {"name": "get_weather"}}).json()
    message = reply_body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "tool_calls": [
        ToolCall("functions.get_weather:1", "get_weather", '{"city": "Rome"}').body()]}
    shown = decode_keeping(kimi_server.llm.tokenizer.decode, kimi_server.tool_markers)(prompts[0])
    assert "[functions.get_time:0 {}]" in shown and "noon(functions.get_time:0)" in shown
    assert shown.endswith("assistant: " + call_prefix("get_weather", 1))


def test_tool_choice_none_shows_the_tools_but_reads_no_calls(client, scripted):
    prompts, reply = scripted
    reply["text"] = TWO_CALLS
    choice = chat(client, tool_choice="none").json()["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith("Let me look.functions.get_weather:0")
    assert b"tools: " in bytes(t for t in prompts[0] if t < 256)


def test_the_model_runs_with_tools_offered(kimi_server, client):
    """The real engine behind it: a random model's answer, cut by max_tokens, comes back whole as text or calls."""
    reply = chat(client, max_tokens=6, temperature=0)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] in ("length", "stop", "tool_calls") and reply.json()["usage"]["completion_tokens"]
    assert_nothing_open(kimi_server)


@pytest.mark.parametrize("fields, says", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0] must be"),
    ({"tools": [WEATHER, WEATHER]}, "names a function twice"),
    ({"tools": "all"}, "'tools' must be a list"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'tool_choice' must be"),
    ({"tools": None, "tool_choice": "required"}, "'tool_choice' needs 'tools'"),
    ({"parallel_tool_calls": "yes"}, "'parallel_tool_calls' must be true or false"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}, {"role": "user", "content": "y",
                                                                        "tool_calls": [{"id": 1}]}]},
     "messages[1].tool_calls must be a list, in an assistant message"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]}]},
     "messages[0].tool_calls[0] must be"),
    ({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]}, "tool_call_id must be a string"),
])
def test_bad_tool_fields_are_refused(kimi_server, client, fields, says):
    reply = chat(client, **fields)
    assert reply.status_code == 400 and says in reply.json()["error"]["message"], reply.text
    assert_nothing_open(kimi_server)


def test_a_checkpoint_that_cannot_read_calls_refuses_tools_and_says_why(tmp_path):
    """No template: nothing would show the model its tools; a tokenizer without the markers: its calls could not be
    read. Text completions take no tools."""
    model = random_model(tiny_config_dict())
    server = make_server(model, tmp_path)
    try:
        with TestClient(server.app) as client:
            assert "no chat template" in chat(client).json()["error"]["message"]
            (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
            server.template = type(server.template)(TEMPLATE)
            assert "has no tool-call tokens" in chat(client).json()["error"]["message"]
            assert chat(client, tool_choice="none", max_tokens=1).status_code == 200
            reply = client.post("/v1/completions", json={"prompt": "x", "tools": [WEATHER]})
            assert "'tools' is not supported" in reply.json()["error"]["message"]
    finally:
        server.close()


def test_a_named_call_closes_when_its_arguments_do():
    """A named call's arguments are held to JSON, which cannot write the end markers: the turn stopping by itself
    closes the call; a call the model closed itself is left as it is."""
    tool_text = ToolCallText(call_prefix("get_weather", 0), CALL_END + SECTION_END)
    assert tool_text.add('{"city": "Oslo"}') == ("", [])
    assert tool_text.close() == [ToolCall("functions.get_weather:0", "get_weather", '{"city": "Oslo"}')]
    assert tool_text.finish() == ""
    closed = ToolCallText(call_prefix("f", 0), CALL_END + SECTION_END)
    assert closed.add("{}" + CALL_END + SECTION_END)[1] == [ToolCall("functions.f:0", "f", "{}")]
    assert closed.close() == [] and closed.finish() == ""


@pytest.mark.parametrize("parameters", [WEATHER["function"]["parameters"],
                                        {"type": "object", "properties": {"city": {"type": "string",
                                                                                   "multipleOf": 2}}}],
                         ids=["schema", "multipleOf: any object"])
def test_a_named_calls_arguments_follow_the_functions_schema(client, parameters):
    """The real engine behind it: a random model's arguments, held to the function's parameters (or, where dayzero
    cannot hold that schema, to any JSON object), become a whole call."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
    reply = client.post("/v1/chat/completions", json={
        "messages": ASK, "tools": [tool], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 200, "temperature": 0.8, "seed": 1, "logit_bias": CLOSERS}).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and call["id"] == "functions.get_weather:0"
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments, dict)
    if "multipleOf" not in json.dumps(parameters):
        jsonschema.validate(arguments, parameters)


@pytest.mark.parametrize("parallel", [True, False])
def test_required_calls_from_the_real_engine_name_offered_functions_with_valid_arguments(
        kimi_server, client, parallel):
    reply = chat(client, tool_choice="required", parallel_tool_calls=parallel, max_tokens=200, temperature=0.8,
                  seed=2, logit_bias=CLOSERS).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    calls = choice["message"]["tool_calls"]
    assert calls and (parallel or len(calls) == 1)
    for call in calls:
        name = call["function"]["name"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])
    assert_nothing_open(kimi_server)


def test_a_call_the_model_opens_under_auto_is_held_too(kimi_server, client):
    section_begin = next(t for t, text in marker_ids(kimi_server.llm.tokenizer).items() if text == SECTION_BEGIN)
    reply = chat(client, max_tokens=200, temperature=0.8, seed=3,
                  logit_bias={**CLOSERS, str(section_begin): 30.0}).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    for call in choice["message"]["tool_calls"]:
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])


def test_response_format_with_a_forced_call_is_refused(client):
    reply = chat(client, tool_choice="required", response_format={"type": "json_object"})
    assert reply.status_code == 400 and "leave out response_format" in reply.json()["error"]["message"]
