"""Chat messages -> one prompt, with the checkpoint's own chat template, rendered as transformers renders it.

HF checkpoints carry the template as Jinja, in `chat_template.jinja` or under "chat_template" in
`tokenizer_config.json` (a string, or a list of named templates). It renders in the Jinja environment transformers'
`apply_chat_template` builds (`transformers/utils/chat_template_utils.py`, `_compile_jinja_template`), without
importing transformers: an immutable sandbox with trim_blocks and lstrip_blocks; the loopcontrols extension
(`{% break %}`, `{% continue %}`) and `{% generation %}` blocks; a `tojson` filter that keeps key order and Unicode
(ensure_ascii, indent, separators and sort_keys as keywords); `raise_exception`, `strftime_now`, and `dict` /
`namespace` that refuse underscore names. Messages are prepared the same way: keys whose value is None are dropped, and
a message's reasoning is offered under each of its names. So a template sees the tools as it did in training.
A checkpoint without a template (the embedded byte-level model) gets a plain "role: content" transcript ending in
"assistant:".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.tokenizer import special_token_text, tokenizer_config

# the names a message's reasoning comes under; templates read the first, gpt-oss's read "thinking"
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _plain(messages: list[dict], add_generation_prompt: bool) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant:" if add_generation_prompt else "")


class TemplateRefusal(DayzeroError):
    """The template called raise_exception: the messages are not ones it accepts."""


def _raise(message: str):
    raise TemplateRefusal(f"the chat template refused the messages: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _prepared(message: dict) -> dict:
    """A message as transformers hands it to a template: no None values, the reasoning under each of its names."""
    message = {key: value for key, value in message.items() if value is not None}
    reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


@lru_cache(maxsize=16)
def _compiled(source: str):
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks the assistant's text for training masks; here it renders
        its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"chat templates cannot store underscore-prefixed attributes on a namespace: "
                                    f"{name!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)


@dataclass(frozen=True)
class ChatTemplate:
    source: str | None  # Jinja text; None: the plain transcript
    bos_token: str = ""
    eos_token: str = ""
    tool_use: str | None = None  # the template named "tool_use", which transformers picks when tools are given

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
               chat_template_kwargs: dict | None = None) -> str:
        """tools: the functions the model may call, for templates that show them (Kimi's, ...);
        add_generation_prompt: end with the opening of the assistant's turn; chat_template_kwargs: more variables
        for the template (a thinking switch, ...), as transformers' apply_chat_template passes its extra kwargs:
        they may replace the special tokens, never the messages, tools, documents or add_generation_prompt."""
        source = self.tool_use if tools is not None and self.tool_use is not None else self.source
        if source is None:
            return _plain(messages, add_generation_prompt)
        from jinja2.exceptions import TemplateError

        try:
            return _compiled(source).render({
                "bos_token": self.bos_token, "eos_token": self.eos_token, **(chat_template_kwargs or {}),
                "messages": [_prepared(m) for m in messages], "tools": tools, "documents": None,
                "add_generation_prompt": add_generation_prompt})
        except TemplateError as err:
            raise DayzeroError(f"the checkpoint's chat template failed: {err}") from err


def _named(template, name: str = "default") -> str | None:
    """tokenizer_config's chat_template: a string, or [{"name", "template"}] (the one named `name`; for "default",
    the first when none is named so)."""
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if name != "default":
            return named.get(name)
        return named.get("default") or next(iter(named.values()), None)
    return template if name == "default" else None


def load_chat_template(checkpoint: Path) -> ChatTemplate:
    config = tokenizer_config(checkpoint)
    jinja_file = checkpoint / "chat_template.jinja"
    source = jinja_file.read_text() if jinja_file.is_file() else _named(config.get("chat_template"))
    tool_use = None if jinja_file.is_file() else _named(config.get("chat_template"), "tool_use")
    return ChatTemplate(source, special_token_text(config.get("bos_token")),
                        special_token_text(config.get("eos_token")), tool_use)
