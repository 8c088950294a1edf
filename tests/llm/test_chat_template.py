"""Chat messages become one prompt through the checkpoint's own Jinja template (any of the places HF keeps it), or
a plain transcript without one; a template that refuses the messages, or a broken config, says so."""

from __future__ import annotations

import json

import pytest

from dayzero.errors import DayzeroError
from dayzero.llm.chat_template import load_chat_template

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
RENDERED = "<s><|system|>Be brief.</s><|user|>Hi</s><|assistant|>"


def test_plain_transcript_without_a_template(tmp_path):
    assert load_chat_template(tmp_path).render(MESSAGES) == "system: Be brief.\nuser: Hi\nassistant:"


@pytest.mark.parametrize("where", ["string", "named list", "jinja file"])
def test_the_checkpoint_template_renders_with_its_special_tokens(tmp_path, where):
    config = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>"}
    if where == "string":
        config["chat_template"] = TEMPLATE
    elif where == "named list":
        config["chat_template"] = [{"name": "tool_use", "template": "wrong"}, {"name": "default", "template": TEMPLATE}]
    else:
        (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_chat_template(tmp_path).render(MESSAGES) == RENDERED


def test_a_template_that_refuses_the_messages_says_why(tmp_path):
    (tmp_path / "chat_template.jinja").write_text(
        "{% if messages[0].role != 'user' %}{{ raise_exception('start with a user message') }}{% endif %}")
    with pytest.raises(DayzeroError, match="start with a user message"):
        load_chat_template(tmp_path).render(MESSAGES)


def test_templates_run_sandboxed(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    with pytest.raises(DayzeroError, match="chat template failed"):
        load_chat_template(tmp_path).render(MESSAGES)


def test_a_broken_tokenizer_config_names_the_file(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(DayzeroError, match="tokenizer_config.json is not valid JSON"):
        load_chat_template(tmp_path)


def test_without_the_generation_prompt_the_turn_is_left_closed(tmp_path):
    assert load_chat_template(tmp_path).render(MESSAGES, add_generation_prompt=False) == "system: Be brief.\nuser: Hi\n"
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    assert load_chat_template(tmp_path).render(MESSAGES, add_generation_prompt=False) == "<|system|>Be brief.<|user|>Hi"


def test_chat_template_kwargs_reach_the_template_and_cannot_replace_its_messages(tmp_path):
    (tmp_path / "chat_template.jinja").write_text(
        "{% if thinking %}<think>{% endif %}{{ messages | length }}")
    template = load_chat_template(tmp_path)
    assert template.render(MESSAGES, chat_template_kwargs={"thinking": True}) == "<think>2"
    assert template.render(MESSAGES, chat_template_kwargs={"messages": []}) == "2"
    assert template.render(MESSAGES) == "2"
