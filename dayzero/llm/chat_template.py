"""Chat messages -> one prompt, with the checkpoint's own chat template.

HF checkpoints carry the template as Jinja, in `chat_template.jinja` or under "chat_template" in
`tokenizer_config.json` (a string, or a list of named templates). It renders in a sandbox. A checkpoint without one
(the embedded byte-level model) gets a plain "role: content" transcript ending in "assistant:".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.tokenizer import special_token_text, tokenizer_config


def _plain(messages: list[dict], add_generation_prompt: bool) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant:" if add_generation_prompt else "")


def _raise(message: str):
    raise DayzeroError(f"the chat template refused the messages: {message}")


@dataclass(frozen=True)
class ChatTemplate:
    source: str | None  # Jinja text; None: the plain transcript
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
               chat_template_kwargs: dict | None = None) -> str:
        """tools: the functions the model may call, for templates that show them (Kimi's, ...);
        add_generation_prompt: end with the opening of the assistant's turn; chat_template_kwargs: more variables
        for the template (a thinking switch, ...), as transformers' apply_chat_template passes its extra kwargs."""
        if self.source is None:
            return _plain(messages, add_generation_prompt)
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        try:
            # the named variables win over chat_template_kwargs' of the same name
            return env.from_string(self.source).render({
                **(chat_template_kwargs or {}), "messages": messages, "tools": tools,
                "add_generation_prompt": add_generation_prompt, "bos_token": self.bos_token,
                "eos_token": self.eos_token})
        except TemplateError as err:
            raise DayzeroError(f"the checkpoint's chat template failed: {err}") from err


def _named(template) -> str | None:
    """tokenizer_config's chat_template: a string, or [{"name", "template"}] (the one named "default")."""
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        return named.get("default") or next(iter(named.values()), None)
    return template


def load_chat_template(checkpoint: Path) -> ChatTemplate:
    config = tokenizer_config(checkpoint)
    jinja_file = checkpoint / "chat_template.jinja"
    source = jinja_file.read_text() if jinja_file.is_file() else _named(config.get("chat_template"))
    return ChatTemplate(source, special_token_text(config.get("bos_token")),
                        special_token_text(config.get("eos_token")))
