"""vLLM's Python API code runs unchanged on dayzero: `LLM(model=..., ...)`, `generate` on the prompt forms vLLM
takes, `SamplingParams(n=...)`, vLLM-shaped outputs, `LLM.chat`; greedy answers equal the reference model's and
dayzero's own call shape's, and the checkpoint's generation_config.json sets the defaults."""

from __future__ import annotations

import json

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.export.options import ExportOptions
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.generate import greedy_generate
from dayzero.model.weights import load
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import TINY_CONFIG

# the runtime of the LLMs that share the module's engine
SMALL = RuntimeOptions(memory_bytes=32 << 20)
# the checkpoint's sampling defaults: greedy and short, so that calls without SamplingParams stay quick
GENERATION_CONFIG = {"max_new_tokens": 5, "temperature": 0.0, "top_k": 50, "eos_token_id": 257}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("llm") / "tiny", dtype=torch.float32)
    (path / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    return path


@pytest.fixture(scope="module")
def llm(checkpoint, tmp_path_factory):
    from dayzero import LLM

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAYZERO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield LLM(model=str(checkpoint), dtype="float32", max_model_len=512, max_num_seqs=8)


def reference_tokens(checkpoint, prompt_ids: list[int], max_tokens: int) -> list[int]:
    model = load(checkpoint, dtype=torch.float32)
    return list(greedy_generate(model, prompt_ids, max_tokens, frozenset({257})))


def test_vllm_quickstart_code_runs_unchanged(llm):
    from dayzero import SamplingParams

    prompts = ["Hello, my name is", "The capital of France is"]
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=4, seed=0)
    outputs = llm.generate(prompts, sampling_params)
    for output, prompt in zip(outputs, prompts):
        assert output.prompt == prompt
        generated_text = output.outputs[0].text
        assert isinstance(generated_text, str) and output.finished
        assert 1 <= len(output.outputs[0].token_ids) <= 4


def test_greedy_answers_equal_the_reference_and_dayzero_own_call(llm, checkpoint):
    from dayzero import LLM, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=6)
    outputs = llm.generate(["a", "bc"], params)
    assert outputs[1].outputs[0].token_ids == reference_tokens(checkpoint, outputs[1].prompt_token_ids, 6)
    for output in outputs:
        assert output.text == output.outputs[0].text == ByteTokenizer().decode(output.outputs[0].token_ids)
    own = LLM(checkpoint, ExportOptions(backend="eager", dtype="float32", max_len=512, max_batch=8), SMALL)
    assert [o.text for o in own.generate(["a", "bc"], params)] == [o.outputs[0].text for o in outputs]


def test_n_answers_a_prompt(llm):
    from dayzero import SamplingParams

    outputs = llm.generate(["a", "b"], SamplingParams(temperature=0, max_tokens=8, n=2))
    assert len(outputs) == 2
    for output in outputs:
        assert [c.index for c in output.outputs] == [0, 1]
        assert output.outputs[0].token_ids == output.outputs[1].token_ids
    assert outputs[0].outputs[0].text == llm.generate("a", SamplingParams(temperature=0, max_tokens=8))[0].text


def test_sampled_answers_take_seed_plus_their_index(llm):
    from dayzero import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=6, seed=7, n=3)
    (first,) = llm.generate(["x"], params)
    (again,) = llm.generate(["x"], params)
    answers = [c.token_ids for c in first.outputs]
    assert answers == [c.token_ids for c in again.outputs]
    assert len({tuple(a) for a in answers}) > 1
    (third,) = llm.generate(["x"], SamplingParams(temperature=1.0, max_tokens=6, seed=9))
    assert third.outputs[0].token_ids == answers[2]


def test_prompt_forms(llm):
    from dayzero import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=4)
    ids = ByteTokenizer().encode("hello")
    by_text = llm.generate("hello", params)
    by_dict = llm.generate({"prompt": "hello"}, params)
    by_ids = llm.generate([{"prompt_token_ids": ids}], params)
    assert by_text[0].token_ids == by_dict[0].token_ids == by_ids[0].token_ids
    assert by_ids[0].prompt is None and by_ids[0].prompt_token_ids == ids and by_dict[0].prompt == "hello"


def test_token_id_prompts_never_reach_the_tokenizer(checkpoint, llm):
    from dayzero import LLM, SamplingParams

    class NoEncoding(ByteTokenizer):
        def encode(self, text, add_special_tokens=True):
            raise AssertionError("a token-id prompt was tokenized")

    own = LLM(checkpoint, runtime=SMALL, engine=llm.step_engine, tokenizer=NoEncoding())
    out = own.generate({"prompt_token_ids": [256, 104, 105]}, SamplingParams(temperature=0, max_tokens=3))
    assert len(out[0].token_ids) == 3


@pytest.mark.parametrize(("prompt", "message"), [
    ({"prompt_token_ids": [1, 999]}, "token id 999 is outside the vocabulary"),
    ({"prompt_token_ids": [-1]}, "token id -1 is outside the vocabulary"),
    ({"prompt_token_ids": ["a"]}, "must be a list of integers"),
    ({"prompt_token_ids": [1.5]}, "must be a list of integers"),
    ({"prompt_token_ids": []}, "is empty"),
    ({"prompt": "a", "multi_modal_data": {}}, "multi_modal_data"),
    ({}, "neither"),
    ([1, 2, 3], "prompt 0 is a int"),
])
def test_bad_prompts_are_refused_before_any_runs(llm, prompt, message):
    from dayzero import SamplingParams

    with pytest.raises(DayzeroError, match=message):
        llm.generate(["fine", prompt] if isinstance(prompt, dict) else prompt, SamplingParams(max_tokens=2))
    assert not llm.engine.has_work


def test_a_refused_request_leaves_none_of_its_call_running(llm):
    from dayzero import SamplingParams

    with pytest.raises(DayzeroError, match="exceeds the engine's max length"):
        llm.generate(["fine", "x" * 600], SamplingParams(max_tokens=2))
    assert not llm.engine.has_work


def test_stops_are_cut_from_the_text_and_named(llm):
    from dayzero import SamplingParams

    (plain,) = llm.generate("a", SamplingParams(temperature=0, max_tokens=8))
    tokens = plain.outputs[0].token_ids
    at = next(i for i, t in enumerate(tokens) if 33 <= t < 127 and chr(t) not in ByteTokenizer().decode(tokens[:i]))
    stop = chr(tokens[at])
    (by_string,) = llm.generate("a", SamplingParams(temperature=0, max_tokens=8, stop=[stop]))
    answer = by_string.outputs[0]
    assert (answer.finish_reason, answer.stop_reason) == ("stop", stop)
    assert answer.token_ids == tokens[:at + 1] and stop not in answer.text
    (by_id,) = llm.generate("a", SamplingParams(temperature=0, max_tokens=8, stop_token_ids=[tokens[at]]))
    assert (by_id.outputs[0].stop_reason, by_id.outputs[0].token_ids) == (tokens[at], tokens[:at + 1])
    assert plain.outputs[0].stop_reason is None


def test_logprobs_are_vllm_shaped(llm):
    from dayzero import SamplingParams

    (out,) = llm.generate("ab", SamplingParams(temperature=0, max_tokens=3, logprobs=2, prompt_logprobs=1))
    answer = out.outputs[0]
    assert len(answer.logprobs) == 3
    for token, position in zip(answer.token_ids, answer.logprobs):
        # greedy: the chosen token is the most likely one
        assert position[token].rank == 1 and len(position) == 2
        assert position[token].decoded_token == ByteTokenizer().decode([token])
    assert answer.cumulative_logprob == pytest.approx(sum(p[t].logprob for t, p in zip(answer.token_ids,
                                                                                        answer.logprobs)))
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(out.prompt_token_ids)
    for token, position in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert token in position and 1 in {p.rank for p in position.values()}
    assert llm.generate("ab", SamplingParams(max_tokens=2))[0].outputs[0].cumulative_logprob is None


def test_dayzero_run_reads_the_first_answer_on_the_request(llm):
    from dayzero import SamplingParams

    (out,) = llm.generate("a", SamplingParams(temperature=0, max_tokens=3, n=2))
    first = out.outputs[0]
    assert (out.text, out.token_ids, out.finish_reason) == (first.text, first.token_ids, first.finish_reason)
    assert out.request_id and out.prompt == "a" and out.prompt_token_ids == [256, 97]
    assert 0 < out.time_to_first_token_s < out.metrics.finished_time - out.metrics.arrival_time


def test_chat_renders_as_the_server_does(llm):
    from dayzero import SamplingParams

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text",
                                                                                          "text": "hi"}]}]
    (out,) = llm.chat(messages, SamplingParams(temperature=0, max_tokens=2))
    # the embedded model has no template: the plain transcript, with the tokenizer's BOS
    assert out.prompt == "system: Be brief.\nuser: hi\nassistant:"
    assert out.prompt_token_ids == ByteTokenizer().encode(out.prompt)
    (by_ids,) = llm.generate({"prompt_token_ids": out.prompt_token_ids}, SamplingParams(temperature=0, max_tokens=2))
    assert out.outputs[0].token_ids == by_ids.outputs[0].token_ids
    both = llm.chat([messages, [{"role": "user", "content": "yo"}]], SamplingParams(temperature=0, max_tokens=2))
    assert [o.prompt for o in both] == [out.prompt, "user: yo\nassistant:"]


def test_chat_with_a_template_writes_its_markers_and_takes_its_kwargs(llm):
    from dayzero import SamplingParams

    template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if tools %}[{{ tools | length }} "
                "tools]{% endif %}{% if think %}<think>{% endif %}{% if add_generation_prompt %}<bot>{% endif %}")
    params = SamplingParams(temperature=0, max_tokens=2)
    messages = [{"role": "user", "content": "hi"}]
    (out,) = llm.chat(messages, params, chat_template=template, chat_template_kwargs={"think": True},
                      tools=[{"type": "function", "function": {"name": "f"}}])
    assert out.prompt == "<user>hi[1 tools]<think><bot>"
    # a template writes its own markers: no BOS added
    assert out.prompt_token_ids == ByteTokenizer().encode(out.prompt, add_special_tokens=False)
    (closed,) = llm.chat(messages, params, chat_template=template, add_generation_prompt=False)
    assert closed.prompt == "<user>hi"


def test_generation_config_sets_the_defaults(llm):
    from dayzero import SamplingParams

    defaults = llm.get_default_sampling_params()
    assert (defaults.max_tokens, defaults.temperature, defaults.top_k) == (5, 0.0, 50)
    (out,) = llm.generate("a")
    assert len(out.outputs[0].token_ids) == 5 or out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].token_ids == llm.generate("a", SamplingParams(temperature=0, max_tokens=5))[0].token_ids


def test_sampling_params_default_to_vllms():
    from dayzero import SamplingParams
    from dayzero.runtime import sampling

    params = SamplingParams()
    assert (params.temperature, params.max_tokens, params.top_p, params.n) == (1.0, 16, 1.0, 1)
    assert isinstance(params, sampling.SamplingParams) and params.method == "random"


def test_generation_config_vllm_keeps_vllms_defaults(checkpoint, llm):
    from dayzero import LLM, SamplingParams

    own = LLM(checkpoint, runtime=SMALL, engine=llm.step_engine, generation_config="vllm")
    assert own.get_default_sampling_params() == SamplingParams()


def test_http_requests_take_the_generation_config_defaults(llm):
    from starlette.testclient import TestClient

    from dayzero import SamplingParams
    from dayzero.server.openai_protocol import parse_chat, parse_completion
    from dayzero.server.server import OpenAIServer, ServedModel, ServerOptions

    defaults = ServedModel.of(llm).sampling_defaults
    assert defaults == {"max_tokens": 5, "temperature": 0.0, "top_k": 50}
    unset = parse_completion({"prompt": "p"}, defaults).sampling
    assert (unset.max_tokens, unset.temperature, unset.top_k) == (5, 0.0, 50)
    asked = parse_completion({"prompt": "p", "temperature": 0.7, "top_k": None, "max_tokens": 3}, defaults).sampling
    assert (asked.max_tokens, asked.temperature, asked.top_k) == (3, 0.7, 50)
    chat = parse_chat({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9}, "p",
                      defaults).sampling
    assert (chat.max_tokens, chat.temperature) == (9, 0.0)
    server = OpenAIServer(llm, ServerOptions(warm_up=False))
    try:
        with TestClient(server.app) as client:
            reply = client.post("/v1/completions", json={"prompt": "a"}).json()
    finally:
        server.close()
    greedy = llm.generate("a", SamplingParams(temperature=0, max_tokens=5))[0].outputs[0]
    assert reply["usage"]["completion_tokens"] == len(greedy.token_ids) and reply["choices"][0]["text"] == greedy.text


@pytest.mark.parametrize("call", ["generate", "chat"])
def test_lora_requests_are_refused(llm, call):
    with pytest.raises(DayzeroError, match="LoRA"):
        getattr(llm, call)([{"role": "user", "content": "hi"}] if call == "chat" else "a", lora_request=object())


def test_one_sampling_params_a_prompt_or_one_for_all(llm):
    from dayzero import SamplingParams

    outs = llm.generate(["a", "b"], [SamplingParams(max_tokens=2), SamplingParams(max_tokens=3)])
    assert [len(o.token_ids) for o in outs] == [2, 3]
    with pytest.raises(DayzeroError, match="2 SamplingParams for 3 prompts"):
        llm.generate(["a", "b", "c"], [SamplingParams(), SamplingParams()])


def test_llm_seed_makes_sampling_replay(checkpoint, llm):
    from dayzero import LLM, SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=6)
    runs = [LLM(checkpoint, runtime=SMALL, engine=llm.step_engine, seed=3).generate(["x", "x"], params)
            for _ in range(2)]
    assert [o.token_ids for o in runs[0]] == [o.token_ids for o in runs[1]]
    assert runs[0][0].token_ids != runs[0][1].token_ids


def test_a_tokenizer_folder_brings_its_chat_template(checkpoint, llm, tmp_path):
    from dayzero import LLM, SamplingParams

    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    own = LLM(checkpoint, runtime=SMALL, engine=llm.step_engine, tokenizer=str(tmp_path))
    (out,) = own.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=1))
    assert out.prompt == "[hi]"
    with pytest.raises(DayzeroError, match="is not a folder"):
        LLM(checkpoint, runtime=SMALL, engine=llm.step_engine, tokenizer=str(tmp_path / "nowhere"))
