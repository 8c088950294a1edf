"""dayzero renders a chat template byte for byte as transformers' apply_chat_template(..., tokenize=False) does:
tools with Unicode and unsorted keys through `tojson`, loopcontrols, `strftime_now`, `namespace`, named templates,
chat_template_kwargs, messages with None values and reasoning; and it does so without importing transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dayzero.errors import DayzeroError
from dayzero.llm.chat_template import load_chat_template
from tests.server.test_tool_calls import TEMPLATE as KIMI_TOOLS_TEMPLATE

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

# keys out of alphabetical order at every level, Unicode in descriptions, keys and enum values
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Météo du jour — 天気予報, with <b>markup</b> & 'quotes' 🌦",
        "parameters": {"type": "object", "properties": {
            "ville": {"type": "string", "description": "nom de la ville, p. ex. « Zürich »"},
            "unité": {"type": "string", "enum": ["°C", "°F"]}},
            "required": ["ville"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Heure locale", "parameters": {"type": "object", "properties": {}}}},
]
MESSAGES = [
    {"role": "system", "content": "Tu es un assistant météo."},
    {"role": "user", "content": "Quel temps fait-il à Zürich ? 天気は？"},
    {"role": "assistant", "content": None, "reasoning_content": "Je dois appeler l'outil.",
     "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"ville": "Zürich", "unité": "°C"}'}}]},
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "name": "get_weather",
     "content": '{"température": 21, "ciel": "ensoleillé ☀"}'},
    {"role": "user", "content": "Et l'heure ?"},
]

# Kimi K2's shape: the tools declared once as compact JSON, tool calls in its section markers
KIMI_K2 = """\
{%- if tools -%}
  <|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{%- endif -%}
{%- for message in messages -%}
  {%- if loop.first and messages[0]['role'] != 'system' -%}
    <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
  {%- endif -%}
  {%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>
  {%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>
  {%- elif message['role'] == 'tool' -%}<|im_system|>tool<|im_middle|>
  {%- else -%}<|im_assistant|>assistant<|im_middle|>
  {%- endif -%}
  {%- if message['role'] == 'assistant' and message.get('tool_calls') -%}
    {%- if message['content'] is defined -%}{{ message['content'] }}{%- endif -%}
    <|tool_calls_section_begin|>
    {%- for tool_call in message['tool_calls'] -%}
      <|tool_call_begin|>{{ tool_call['id'] }}<|tool_call_argument_begin|>
      {{- tool_call['function']['arguments'] }}<|tool_call_end|>
    {%- endfor -%}
    <|tool_calls_section_end|>
  {%- elif message['role'] == 'tool' -%}
    ## Return of {{ message.tool_call_id }}
{{ message['content'] }}
  {%- else -%}{{ message['content'] }}
  {%- endif -%}
  <|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"""

# Qwen3 / Hermes shape: one tool a line through plain `tojson`, a namespace, arguments as a mapping, a thinking switch
QWEN3 = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant\\n' }}
        {%- if message.reasoning_content %}
            {{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- message.content or '' }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- set tool_call = tool_call.function %}
            {{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}{{- tool_call.arguments }}
            {%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# Llama 3.1 shape: today's date from strftime_now, indented tool JSON, {% break %} / {% continue %}, raise_exception
LLAMA31 = """\
{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = strftime_now("%Y") %}{%- endif %}
<|start_header_id|>system<|end_header_id|>

Today Date: {{ date_string }}
{%- for tool in tools or [] %}
{%- if tool.function.name == "get_time" %}{% continue %}{% endif %}

{{ tool | tojson(indent=4) }}
{%- endfor %}
<|eot_id|>
{%- for message in messages %}
{%- if message.role == "tool" and message.content is not string %}
{{- raise_exception("tool content must be text") }}{% endif %}
{%- if message.role == "user" and "STOP" in message.content %}{% break %}{% endif %}
<|start_header_id|>{{ message.role }}<|end_header_id|>

{{ message.content | default("", true) }}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""


def hf_render(template, messages, tools=None, **kwargs) -> str:
    """transformers' own renderer: apply_chat_template on a tokenizer built around a tiny tokenizers object."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>")
    tokenizer.chat_template = template
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True, **kwargs)


def dayzero_template(tmp_path, template):
    config = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>", "chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return load_chat_template(tmp_path)


TEMPLATES = {"kimi tools": KIMI_TOOLS_TEMPLATE, "kimi k2": KIMI_K2, "qwen3": QWEN3, "llama 3.1": LLAMA31}


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no tools"])
def test_renders_as_transformers_does(tmp_path, name, tools):
    expected = hf_render(TEMPLATES[name], MESSAGES, tools)
    assert dayzero_template(tmp_path, TEMPLATES[name]).render(MESSAGES, tools) == expected


def test_tool_json_keeps_key_order_and_unicode(tmp_path):
    rendered = dayzero_template(tmp_path, QWEN3).render(MESSAGES, TOOLS)
    assert json.dumps(TOOLS[0], ensure_ascii=False) in rendered
    assert "Météo du jour — 天気予報, with <b>markup</b> & 'quotes' 🌦" in rendered
    assert rendered.index('"type": "function"') < rendered.index('"function": {')
    compact = dayzero_template(tmp_path, KIMI_K2).render(MESSAGES, TOOLS)
    assert json.dumps(TOOLS, ensure_ascii=False, separators=(",", ":")) in compact


@pytest.mark.parametrize("kwargs", [{"enable_thinking": False}, {"enable_thinking": True}, {}],
                         ids=["thinking off", "thinking on", "unset"])
def test_chat_template_kwargs_as_transformers_passes_them(tmp_path, kwargs):
    expected = hf_render(QWEN3, MESSAGES, TOOLS, **kwargs)
    assert dayzero_template(tmp_path, QWEN3).render(MESSAGES, TOOLS, chat_template_kwargs=kwargs) == expected
    assert expected.endswith("<think>\n\n</think>\n\n") == (kwargs.get("enable_thinking") is False)


def test_loopcontrols_strftime_now_and_kwargs_that_replace_the_defaults(tmp_path):
    template = dayzero_template(tmp_path, LLAMA31)
    messages = [*MESSAGES, {"role": "user", "content": "STOP here"}, {"role": "user", "content": "never shown"}]
    for kwargs in ({}, {"date_string": "26 Jul 2024"}, {"bos_token": "<|begin_of_text|>"}):
        rendered = template.render(messages, TOOLS, chat_template_kwargs=kwargs)
        assert rendered == hf_render(LLAMA31, messages, TOOLS, **kwargs)
        assert "never shown" not in rendered and '"name": "get_time"' not in rendered
    assert "26 Jul 2024" in template.render(messages, chat_template_kwargs={"date_string": "26 Jul 2024"})


def test_raise_exception_refuses_as_transformers_does(tmp_path):
    messages = [{"role": "tool", "content": ["not", "text"]}]
    with pytest.raises(Exception, match="tool content must be text"):
        hf_render(LLAMA31, messages)
    with pytest.raises(DayzeroError, match="refused the messages: tool content must be text"):
        dayzero_template(tmp_path, LLAMA31).render(messages)


def test_the_tool_use_template_is_picked_when_tools_are_given(tmp_path):
    named = [{"name": "default", "template": "plain{{ messages | length }}"},
             {"name": "tool_use", "template": "tools{{ tools | length }}"}]
    template = dayzero_template(tmp_path, named)
    assert template.render(MESSAGES, TOOLS) == "tools2"
    assert template.render(MESSAGES) == "plain5"


def test_namespaces_and_dicts_refuse_underscore_names(tmp_path):
    template = dayzero_template(tmp_path, "{% set ns = namespace(_x=1) %}{{ dict(a=1) | tojson }}")
    with pytest.raises(DayzeroError, match="underscore"):
        template.render(MESSAGES)
    assert dayzero_template(tmp_path, "{{ dict(b=1, a=2) | tojson }}").render(MESSAGES) == '{"b": 1, "a": 2}'


def test_generation_blocks_render_their_body(tmp_path):
    source = "{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}"
    assert dayzero_template(tmp_path, source).render(MESSAGES) == hf_render(source, MESSAGES)


def test_rendering_does_not_import_transformers(tmp_path):
    (tmp_path / "chat_template.jinja").write_text(QWEN3)
    code = ("import sys; from pathlib import Path; from dayzero.llm.chat_template import load_chat_template; "
            f"load_chat_template(Path({str(tmp_path)!r})).render([{{'role': 'user', 'content': 'hi'}}], "
            "[{'type': 'function', 'function': {'name': 'f'}}]); assert 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
