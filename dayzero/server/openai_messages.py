"""A chat request's conversation as dayzero reads it: the messages (text content, the calls an assistant made, its
reasoning, and the results a tool message returns) and the tools offered with `tools`, `tool_choice` and
`parallel_tool_calls`.

Everything here goes to the checkpoint's chat template, which shows the model its tools and earlier calls in the
model's own format; what the model then writes is read by tool_calls.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from dayzero.server.openai_protocol import flag
from dayzero.server.request_error import RequestError
from dayzero.structured.tool_calls import call_prefix

ROLES = ("system", "developer", "user", "assistant", "tool")
# OpenAI's rule for function names
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS = 128


def _content(message: dict, index: int) -> str:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise RequestError(f"messages[{index}].content must be a string or a list of text parts (dayzero serves text "
                       "models)", param="messages")


def _call_made(call, where: str) -> dict:
    """An assistant message's earlier tool call -> {"id", "type", "function": {"name", "arguments"}}."""
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(call.get("id"), str) and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), (str, dict))):
        raise RequestError(f"{where} must be {{\"id\": str, \"type\": \"function\", \"function\": {{\"name\": str, "
                           "\"arguments\": JSON text}}}", param="messages")
    arguments = function["arguments"]
    arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call["id"], "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _tool_fields(message: dict, index: int) -> dict:
    """The fields a template reads beside role and content: an assistant's tool_calls and reasoning_content, a tool
    result's tool_call_id, a participant's name."""
    fields = {}
    calls = message.get("tool_calls")
    if calls:
        if message["role"] != "assistant" or not isinstance(calls, list):
            raise RequestError(f"messages[{index}].tool_calls must be a list, in an assistant message",
                               param="messages")
        fields["tool_calls"] = [_call_made(c, f"messages[{index}].tool_calls[{i}]") for i, c in enumerate(calls)]
    for name in ("tool_call_id", "name", "reasoning_content"):
        if message.get(name) is not None:
            if not isinstance(message[name], str):
                raise RequestError(f"messages[{index}].{name} must be a string", param="messages")
            fields[name] = message[name]
    return fields


def chat_messages(body: dict) -> list[dict]:
    """The request's messages as [{"role", "content", and any tool fields}] with text content."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", param="messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"messages[{i}] needs a role, one of {', '.join(ROLES)}", param="messages")
        out.append({"role": message["role"], "content": _content(message, i), **_tool_fields(message, i)})
    return out


def calls_made(messages: list[dict]) -> int:
    """How many tool calls the conversation's assistant turns made (Kimi numbers a conversation's calls)."""
    return sum(len(m.get("tool_calls", ())) for m in messages)


@dataclass(frozen=True)
class ToolRequest:
    """The tools a chat request offers and how the model may use them."""

    tools: tuple[dict, ...]  # [{"type": "function", "function": {"name", ...}}], for the chat template
    choice: str  # "auto", "none", "required", or the one function the turn must call
    parallel: bool  # False: at most one call a turn

    @property
    def named_function(self) -> str | None:
        """The function a named tool_choice calls (None: "auto", "none" or "required")."""
        return None if self.choice in ("auto", "none", "required") else self.choice

    def parameters(self) -> dict[str, dict]:
        """Each function's parameters schema, by name (a function without one takes any object)."""
        return {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in self.tools}

    def forced_call(self, calls_before: int) -> str:
        """The text the model's turn starts with: a call ("required", a named function), else nothing."""
        if self.choice in ("auto", "none"):
            return ""
        return call_prefix(None if self.choice == "required" else self.choice, calls_before)


def _tool(tool, index: int) -> dict:
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    shape = f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
    if not isinstance(function, dict):
        raise RequestError(shape, param="tools")
    name = function.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise RequestError(f"{shape}: the function needs a name of 1-64 letters, digits, '_' or '-', got {name!r}",
                           param="tools")
    if not isinstance(function.get("description", ""), str) or not isinstance(function.get("parameters", {}), dict):
        raise RequestError(f"tools[{index}].function: description must be a string, parameters a JSON schema object",
                           param="tools")
    return {"type": "function", "function": function}


def _choice(choice, names: tuple[str, ...]) -> str:
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return choice
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if name not in names:
        raise RequestError("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                           f"\"function\": {{\"name\": one of the tools}}}}; got {choice!r}", param="tool_choice")
    return name


def parse_tools(body: dict) -> ToolRequest | None:
    """The request's tools; None when it offers none."""
    tools = body.get("tools")
    if tools is None or tools == []:
        if body.get("tool_choice") not in (None, "none", "auto"):
            raise RequestError("'tool_choice' needs 'tools' to choose from", param="tool_choice")
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise RequestError(f"'tools' must be a list of at most {MAX_TOOLS} functions", param="tools")
    parsed = tuple(_tool(tool, i) for i, tool in enumerate(tools))
    names = tuple(t["function"]["name"] for t in parsed)
    if len(set(names)) < len(names):
        raise RequestError("'tools' names a function twice; give each function one entry", param="tools")
    parallel = flag(body, "parallel_tool_calls") if body.get("parallel_tool_calls") is not None else True
    return ToolRequest(parsed, _choice(body.get("tool_choice"), names), parallel)
