"""A prompt's own log probabilities (completions' echo with logprobs): every prompt token after the first gets the
eager reference's log-softmax at the token before it, and its most likely alternatives, whether the prompt is
prefilled whole or in chunks, beside other requests, or again with prefix caching on; engines that return only last
logits refuse with what to do; over HTTP, max_tokens 0 answers the prompt alone, as evaluation harnesses ask."""

from __future__ import annotations

import pytest
import torch
from starlette.testclient import TestClient

from dayzero.contract import PAGE, SLOT
from dayzero.errors import DayzeroError
from dayzero.export.split_engine import SplitEngine
from dayzero.model import scoring
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.tokenizer import ByteTokenizer
from tests.helpers import random_model, tiny_config_dict
from tests.server.test_server import assert_nothing_open, greedy, make_server

TOP = 4


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def runtime(model, token_budget: int, prefix_caching: bool = False) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=512)
    budget = 9 * manifest.unit_bytes(SLOT) + 40 * manifest.unit_bytes(PAGE)
    options = RuntimeOptions(token_budget=token_budget, memory_bytes=budget, prefix_caching=prefix_caching,
                             snapshot_every=64)
    return LLMEngine(EagerEngine(model, manifest), options)


def reference(model, prompt: list[int]) -> torch.Tensor:
    """[len(prompt), vocab]: the log-softmax after each prompt token."""
    return torch.log_softmax(model.logits(torch.tensor([prompt]))[0].float(), -1)


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams):
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_work:
        engine.step()
    return seqs


def assert_reference(model, seq) -> None:
    expected = reference(model, seq.prompt_ids)
    assert seq.prompt_logprobs[0] is None and len(seq.prompt_logprobs) == len(seq.prompt_ids)
    for position, entry in enumerate(seq.prompt_logprobs[1:], start=1):
        row = expected[position - 1]
        assert entry.token == seq.prompt_ids[position]
        assert entry.logprob == pytest.approx(float(row[entry.token]), abs=1e-4)
        ids, values = zip(*entry.top)
        assert list(ids) == row.topk(TOP).indices.tolist()
        assert list(values) == pytest.approx(row.topk(TOP).values.tolist(), abs=1e-4)


@pytest.mark.parametrize("token_budget", [512, 24], ids=["whole", "chunked"])
def test_each_prompt_token_gets_the_reference_distribution(model, token_budget):
    """Two prompts of 90 and 50 tokens, with a request that does not ask beside them; a budget of 24 tokens cuts
    them into chunks whose last rows score the next chunk's first token."""
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (90, 50)]
    engine = runtime(model, token_budget)
    plain = engine.add_request(prompts[1][:30], SamplingParams(max_tokens=2))
    seqs = run(engine, prompts, SamplingParams(max_tokens=3, prompt_logprobs=TOP))
    for seq in seqs:
        assert_reference(model, seq)
    assert plain.prompt_logprobs is None and plain.output_ids


def test_prefix_caching_does_not_skip_a_scored_prompt(model):
    gen = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 256, (150,), generator=gen).tolist()
    engine = runtime(model, 64, prefix_caching=True)
    run(engine, [prompt], SamplingParams(max_tokens=2))
    again = run(engine, [prompt], SamplingParams(max_tokens=2, prompt_logprobs=TOP))[0]
    assert_reference(model, again)


def test_an_engine_with_only_last_logits_refuses_with_what_to_do(model):
    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=128)
    eager = EagerEngine(model, manifest)
    engine = LLMEngine(SplitEngine(manifest, eager, eager), RuntimeOptions(memory_bytes=64 << 20))
    with pytest.raises(DayzeroError, match="need the eager engine without context parallelism"):
        engine.add_request([1, 2, 3], SamplingParams(prompt_logprobs=0))


def test_scoring_in_blocks_equals_scoring_at_once(model, monkeypatch):
    hidden = torch.randn(37, model.config.hidden_size)
    targets = torch.randint(-1, 256, (37,))
    whole = scoring.score_rows(model.lm_head, hidden, targets, 3)
    monkeypatch.setattr(scoring, "ROWS_AT_ONCE", 5)
    blocks = scoring.score_rows(model.lm_head, hidden, targets, 3)
    assert torch.equal(whole.rows, (targets >= 0).nonzero().flatten()) and torch.equal(whole.rows, blocks.rows)
    torch.testing.assert_close(whole.logprobs, blocks.logprobs)
    assert torch.equal(whole.top_ids, blocks.top_ids)
    none = scoring.score_rows(model.lm_head, hidden, torch.full((37,), -1), 2)
    assert none.rows.numel() == 0 and none.top_ids.shape == (0, 2)


@pytest.fixture(scope="module")
def client(model, tmp_path_factory):
    server = make_server(model, tmp_path_factory.mktemp("checkpoint"))
    with TestClient(server.app) as client:
        client.server = server
        yield client
    server.close()


def test_max_tokens_0_with_echo_answers_the_prompt_and_its_log_probabilities(client, model):
    """As lm-evaluation-harness scores a continuation: echo, logprobs 1, max_tokens 0."""
    prompt = "The capital of France is Paris"
    body = client.post("/v1/completions", json={"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0,
                                                "temperature": 0}).json()
    choice, ids = body["choices"][0], ByteTokenizer().encode(prompt)
    assert choice["text"] == prompt and choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    logprobs, expected = choice["logprobs"], reference(model, ids)
    assert logprobs["tokens"] == [ByteTokenizer().decode([t]) for t in ids]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert logprobs["token_logprobs"][1:] == pytest.approx([float(expected[i, t]) for i, t in enumerate(ids[1:])],
                                                           abs=1e-4)
    assert logprobs["text_offset"][-1] == len(prompt) - 1
    assert_nothing_open(client.server)


def test_echo_with_logprobs_lists_the_prompt_then_the_answer(client):
    request = greedy(prompt="hello there", max_tokens=3, logprobs=2)
    answer = client.post("/v1/completions", json=request).json()["choices"][0]
    echoed = client.post("/v1/completions", json={**request, "echo": True}).json()["choices"][0]
    prompt_tokens = len(ByteTokenizer().encode("hello there"))
    assert echoed["text"] == "hello there" + answer["text"]
    for field in ("tokens", "token_logprobs", "top_logprobs"):
        assert echoed["logprobs"][field][prompt_tokens:] == answer["logprobs"][field]
    assert len(echoed["logprobs"]["tokens"]) == prompt_tokens + 3


def test_the_python_api_returns_both_kinds_of_log_probabilities(model, tmp_path):
    from dayzero.llm.api import LLM

    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=128)
    llm = LLM(tmp_path, runtime=RuntimeOptions(memory_bytes=64 << 20), engine=EagerEngine(model, manifest))
    out = llm.generate("hi there", SamplingParams(max_tokens=2, logprobs=1, prompt_logprobs=0))[0]
    assert len(out.logprobs) == 2 and len(out.prompt_logprobs) == len(out.prompt_token_ids)
    # prompt_logprobs 0: each position holds the prompt token's log probability alone
    assert out.prompt_logprobs[0] is None and all(list(e) == [token] for e, token in zip(out.prompt_logprobs[1:],
                                                                                         out.prompt_token_ids[1:]))
