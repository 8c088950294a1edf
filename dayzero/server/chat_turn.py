"""A chat request made ready for the engine: its messages through the checkpoint's chat template, the tools it
offers and how the model may call them, and how to read the answer (tool calls, a thinking model's reasoning).

A turn that must call a tool ("required", or a named function) starts with the call's opening written into the
prompt; a named function's arguments are then held to its parameters schema (to any JSON object where dayzero
cannot hold that schema), and the call closes where they do. Under "auto" and "required" the calls the model writes
are held to the offered functions and their schemas (tool_call_grammar.py). A thinking model's answer held to JSON
reasons first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dayzero.llm.chat_template import ChatTemplate
from dayzero.server.openai_messages import ToolRequest, calls_made, chat_messages, parse_tools
from dayzero.server.openai_protocol import GenerateRequest, parse_chat
from dayzero.server.reasoning import THINK_BEGIN, THINK_END, opens_thinking
from dayzero.server.request_error import RequestError
from dayzero.structured.json_schema import SchemaError, checked_schema
from dayzero.structured.tool_call_grammar import ToolCallRules, marker_token_ids
from dayzero.structured.tool_calls import MARKERS


@dataclass(frozen=True)
class ChatTurn:
    parsed: GenerateRequest  # its one prompt: the rendered conversation (and a forced call's opening)
    tools: ToolRequest | None  # read the answer's tool calls (None: tools are off)
    forced: str  # the text the answer was made to start with
    thinking: bool | None  # split the answer's reasoning off (True: it starts inside it); None: no reasoning


def prepare_chat(body: dict, template: ChatTemplate, tool_markers: dict | None, thinks: bool,
                 think_markers: dict, sampling_defaults: dict | None = None) -> ChatTurn:
    """tool_markers: the tokenizer's tool-call tokens (None: it has none); thinks: a thinking model's;
    think_markers: its reasoning markers' tokens ({}: it writes them as text); sampling_defaults: the checkpoint's
    (openai_protocol.with_defaults)."""
    messages, tools = chat_messages(body), parse_tools(body)
    prompt = template.render(messages, None if tools is None else list(tools.tools), _generation_prompt(body),
                             _template_kwargs(body))
    parsed = parse_chat(body, prompt, sampling_defaults)
    calling = tools if tools is not None and tools.choice != "none" else None
    if calling is None:
        thinking = opens_thinking(prompt) if thinks else None
        return ChatTurn(_json_after_reasoning(parsed, think_markers, thinking), None, "", thinking)
    _check_tool_calls_readable(template, tool_markers)
    forced = calling.forced_call(calls_made(messages))
    # a turn forced to start with a call has no reasoning
    thinking = opens_thinking(prompt) if thinks and not forced else None
    held = _calls_held_to_tools(parsed, calling, tool_markers)
    return ChatTurn(_arguments_held_to_schema(held, calling, prompt + forced), calling, forced, thinking)


def _json_after_reasoning(parsed: GenerateRequest, think_markers: dict, thinking: bool | None) -> GenerateRequest:
    """A thinking model's JSON answer starts after its reasoning (where the markers are tokens)."""
    if parsed.sampling.response_format is None or thinking is None or len(think_markers) != 2:
        return parsed
    ids = {text: token for token, text in think_markers.items()}
    sampling = dataclasses.replace(parsed.sampling, reasoning_tokens=(ids[THINK_BEGIN], ids[THINK_END]),
                                   reasoning_opened=thinking)
    return dataclasses.replace(parsed, sampling=sampling)


def _check_tool_calls_readable(template: ChatTemplate, tool_markers: dict | None) -> None:
    if template.source is None:
        raise RequestError("this checkpoint has no chat template to show the model its tools; serve a chat "
                           "model's checkpoint (with its tokenizer_config.json) to use 'tools'", param="tools")
    if tool_markers is None:
        raise RequestError("this checkpoint's tokenizer has no tool-call tokens (" + ", ".join(MARKERS) +
                           "): dayzero reads tool calls in Kimi's format only; leave 'tools' out or set "
                           "\"tool_choice\": \"none\"", param="tools")


def _parameters_schema(parameters: dict) -> str | None:
    """A function's parameters schema as the JSON text the engine compiles (None: any JSON object, where dayzero
    cannot hold the schema)."""
    try:
        return checked_schema(parameters)
    except SchemaError:
        return None


def _calls_held_to_tools(parsed: GenerateRequest, tools: ToolRequest, tool_markers: dict) -> GenerateRequest:
    """Under "auto" and "required", the answer's calls held to the offered functions (tool_call_grammar.py); an
    "auto" turn whose text answer is held to a response_format keeps that instead."""
    if parsed.sampling.response_format is not None and tools.choice != "auto":
        raise RequestError("response_format shapes a text answer, and this tool_choice makes the turn a tool call; "
                           "leave out response_format, or use tool_choice \"auto\"", param="response_format")
    if tools.named_function is not None or parsed.sampling.response_format is not None:
        return parsed
    functions = tuple((name, _parameters_schema(parameters)) for name, parameters in tools.parameters().items())
    rules = ToolCallRules(marker_token_ids(tool_markers), functions, tools.choice == "required", tools.parallel)
    return dataclasses.replace(parsed, sampling=dataclasses.replace(parsed.sampling, tool_calls=rules))


def _arguments_held_to_schema(parsed: GenerateRequest, tools: ToolRequest, prompt: str) -> GenerateRequest:
    """The request with `prompt`; a named call's answer (its arguments) held to the function's parameters schema, or
    to any JSON object where dayzero cannot hold that schema."""
    if tools.named_function is None:
        return dataclasses.replace(parsed, prompts=(prompt,))
    schema = _parameters_schema(tools.parameters()[tools.named_function])
    response_format = "json_object" if schema is None else "json_schema"
    sampling = dataclasses.replace(parsed.sampling, response_format=response_format, json_schema=schema)
    return dataclasses.replace(parsed, prompts=(prompt,), sampling=sampling)


def _generation_prompt(body: dict) -> bool:
    """vLLM's add_generation_prompt (default true): end the prompt with the opening of the assistant's turn."""
    value = body.get("add_generation_prompt", True)
    if not isinstance(value, bool):
        raise RequestError("'add_generation_prompt' must be true or false", param="add_generation_prompt")
    return value


def _template_kwargs(body: dict) -> dict | None:
    """vLLM's chat_template_kwargs: more variables for the chat template (a thinking switch, ...)."""
    value = body.get("chat_template_kwargs")
    if value is not None and not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        raise RequestError("'chat_template_kwargs' must be an object of template variables",
                           param="chat_template_kwargs")
    return value
