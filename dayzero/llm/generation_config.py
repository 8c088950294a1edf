"""A checkpoint's sampling defaults, from its generation_config.json, as vLLM takes them (`generation_config="auto"`):
temperature, top_p, top_k, min_p, repetition_penalty and max_new_tokens (as max_tokens). Like vLLM, do_sample and
max_length are not read; its eos_token_id is the tokenizer's business (tokenizer.end_of_sequence_ids).

A missing file, or a file without these fields, gives no defaults. A file that is not a JSON object, or a field of
the wrong type, is an error that names the file and the field: the checkpoint's authors meant these values, and a
silently dropped temperature changes every answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.runtime.sampling import SamplingParams

GENERATION_CONFIG = "generation_config.json"
# generation_config.json field -> SamplingParams field, and the Python types its value may have
SAMPLING_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "temperature": ("temperature", (int, float)),
    "top_p": ("top_p", (int, float)),
    "top_k": ("top_k", (int,)),
    "min_p": ("min_p", (int, float)),
    "repetition_penalty": ("repetition_penalty", (int, float)),
    "max_new_tokens": ("max_tokens", (int,)),
}


def sampling_defaults(checkpoint: Path) -> dict:
    """The SamplingParams keyword arguments a checkpoint's generation_config.json sets ({} without the file)."""
    path = Path(checkpoint) / GENERATION_CONFIG
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DayzeroError(f"{path} is not valid JSON ({err}); fix or remove it") from err
    if not isinstance(data, dict):
        raise DayzeroError(f"{path} must hold a JSON object; fix or remove it")
    defaults = {field: _value(path, name, data[name], types)
                for name, (field, types) in SAMPLING_FIELDS.items() if data.get(name) is not None}
    try:
        SamplingParams(**defaults)
    except DayzeroError as err:
        raise DayzeroError(f"{path}: {err}; fix or remove it") from err
    return defaults


def _value(path: Path, name: str, value, types: tuple[type, ...]):
    if isinstance(value, bool) or not isinstance(value, types):
        kind = "an integer" if types == (int,) else "a number"
        raise DayzeroError(f"{path}: {name} must be {kind}, got {value!r}; fix or remove it")
    return value
