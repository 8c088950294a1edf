"""The request fields each route takes, in one place: OpenAI's documented fields that dayzero reads, vLLM's
extensions it honours, OpenAI's fields that leave the answer as it is (accepted, not used), and the fields it refuses
by name when set. Any other field is refused as unknown, so that a misspelt one (`max_new_tokens`) never quietly
leaves its default in place."""

from __future__ import annotations

import difflib

from dayzero.server.request_error import RequestError

# read by both routes (openai_protocol.py)
SAMPLING = frozenset({"model", "max_tokens", "temperature", "top_p", "n", "seed", "stop", "stream", "stream_options",
                      "logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "response_format"})
# vLLM's extensions that dayzero honours
EXTENSIONS = frozenset({"top_k", "ignore_eos", "stop_token_ids", "repetition_penalty", "min_p", "min_tokens"})
# bookkeeping for the client or OpenAI's platform: the answer is the same with or without them
NOT_USED = frozenset({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})
COMPLETION_FIELDS = SAMPLING | EXTENSIONS | NOT_USED | {"prompt", "echo"}
CHAT_FIELDS = SAMPLING | EXTENSIONS | NOT_USED | {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                  "tool_choice", "parallel_tool_calls",
                                                  # vLLM's chat extensions (chat_turn.py)
                                                  "chat_template_kwargs", "add_generation_prompt"}
# vLLM's /tokenize (a prompt, or messages rendered as /v1/chat/completions renders them) and /detokenize
TOKENIZE_FIELDS = frozenset({"model", "prompt", "messages", "tools", "add_special_tokens", "add_generation_prompt"})
DETOKENIZE_FIELDS = frozenset({"model", "tokens"})
# field -> the values that mean "not used" (anything else is refused by name, where the route does not read it)
UNSUPPORTED = {
    "echo": (None, False), "suffix": (None, ""),
    "tools": (None, []), "functions": (None, []), "tool_choice": (None, "none"), "function_call": (None, "none"),
    "best_of": (None, 1), "modalities": (None, ["text"]), "audio": (None,), "prediction": (None,),
    "web_search_options": (None,), "reasoning_effort": (None,), "verbosity": (None,),
    # vLLM's extensions dayzero does not take (its structured outputs: response_format)
    "use_beam_search": (None, False), "length_penalty": (None, 1, 1.0), "guided_json": (None,),
    "guided_regex": (None,), "guided_choice": (None,), "guided_grammar": (None,), "structured_outputs": (None,),
}


def check_fields(body: dict, route: str, fields: frozenset[str]) -> None:
    """Refuse a field set to something dayzero cannot honour, then any field `route` does not know."""
    for name, unused in UNSUPPORTED.items():
        if name in body and name not in fields and body[name] not in unused:
            raise RequestError(f"'{name}' is not supported by dayzero; leave it out", param=name)
    unknown = sorted(set(body) - fields - set(UNSUPPORTED))
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(fields), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        names = ", ".join(f"'{name}'" for name in unknown)
        raise RequestError(f"{route} takes no field {names}{hint}; dayzero refuses fields it does not know rather "
                           "than answer without them", param=unknown[0])
