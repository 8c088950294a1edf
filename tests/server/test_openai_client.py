"""`dayzero serve MODEL` with vLLM's options, driven by the official `openai` client as users drive vLLM: completions,
chat, streaming with usage, tools, a JSON-schema response format and the model list."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.server.listener import wait_healthy
from tests.helpers import KIMI_VOCAB, ROOT, tiny_config_dict
from tests.server.test_tool_calls import TEMPLATE, WEATHER, kimi_tokenizer
from tests.test_cli import free_port

openai = pytest.importorskip("openai")
NAME = "tiny-kimi"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = tmp_path_factory.mktemp("openai")
    (folder / "config").mkdir()
    (folder / "config" / "config.json").write_text(json.dumps(tiny_config_dict(vocab_size=KIMI_VOCAB)))
    checkpoint = write_random_checkpoint(folder / "config", folder / "checkpoint", torch.float32)
    kimi_tokenizer(checkpoint)
    (checkpoint / "chat_template.jinja").write_text(TEMPLATE)
    port = free_port()
    command = [sys.executable, "-m", "dayzero", "serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
               "--served-model-name", NAME, "--tensor-parallel-size", "1", "--max-model-len", "512",
               "--kv-cache-dtype", "auto", "--max-num-seqs", "4", "--dtype", "float32"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "DAYZERO_CACHE_DIR": str(folder / "cache")})
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}", 180), "the server did not come up"
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)


def test_models_list_names_the_served_model(client):
    assert [model.id for model in client.models.list()] == [NAME]


def test_a_completion(client):
    reply = client.completions.create(model=NAME, prompt="The hybrid model", max_tokens=5, temperature=0)
    assert reply.choices[0].finish_reason in ("length", "stop") and reply.usage.completion_tokens <= 5
    again = client.completions.create(model=NAME, prompt="The hybrid model", max_tokens=5, temperature=0)
    assert again.choices[0].text == reply.choices[0].text


def test_a_streamed_chat_with_usage_matches_the_whole_answer(client):
    messages = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0)
    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_a_required_tool_call_comes_back_as_a_tool_call(client):
    reply = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                           tools=[WEATHER], tool_choice="required", max_tokens=40, temperature=0)
    (call,) = reply.choices[0].message.tool_calls[:1]
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)


def test_a_json_schema_answer_follows_its_schema(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}
    # room for the longest answer the schema allows (whitespace runs of up to 32 between its tokens included)
    reply = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "a city"}], max_tokens=200, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
    answer = json.loads(reply.choices[0].message.content)
    assert set(answer) == {"city"} and isinstance(answer["city"], str) and len(answer["city"]) <= 8
