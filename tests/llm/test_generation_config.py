"""A checkpoint's generation_config.json sampling fields become SamplingParams defaults; a missing file gives none,
a broken one is an error that names the file and the field."""

from __future__ import annotations

import json

import pytest

from dayzero.errors import DayzeroError
from dayzero.llm.generation_config import sampling_defaults
from dayzero.runtime.sampling import SamplingParams


def write(folder, content) -> None:
    (folder / "generation_config.json").write_text(content if isinstance(content, str) else json.dumps(content))


def test_the_sampling_fields_map_onto_sampling_params(tmp_path):
    write(tmp_path, {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                     "max_new_tokens": 128, "do_sample": True, "eos_token_id": [1, 2], "max_length": 4096,
                     "bos_token_id": 0})
    defaults = sampling_defaults(tmp_path)
    assert defaults == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                        "max_tokens": 128}
    params = SamplingParams(**defaults)
    assert (params.temperature, params.max_tokens) == (0.6, 128)


def test_no_file_or_no_sampling_fields_give_no_defaults(tmp_path):
    assert sampling_defaults(tmp_path) == {}
    write(tmp_path, {"eos_token_id": 2, "temperature": None})
    assert sampling_defaults(tmp_path) == {}


def test_vllm_top_k_minus_one_means_all_tokens(tmp_path):
    write(tmp_path, {"top_k": -1})
    assert SamplingParams(**sampling_defaults(tmp_path)).top_k == 0


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "generation_config.json is not valid JSON"),
    ("[1, 2]", "must hold a JSON object"),
    ({"temperature": "hot"}, "temperature must be a number, got 'hot'"),
    ({"max_new_tokens": 1.5}, "max_new_tokens must be an integer"),
    ({"top_k": True}, "top_k must be an integer"),
    ({"top_p": 0}, "generation_config.json: need temperature >= 0, top_k >= 0 and 0 < top_p <= 1"),
    ({"max_new_tokens": 0}, "generation_config.json: max_tokens and n must be >= 1"),
])
def test_a_broken_file_names_itself_and_the_field(tmp_path, content, message):
    write(tmp_path, content)
    with pytest.raises(DayzeroError, match=message):
        sampling_defaults(tmp_path)
