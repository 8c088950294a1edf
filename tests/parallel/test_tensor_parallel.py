"""Tensor-parallel engines on CPU (gloo, one worker process per extra rank) == the one-rank reference: step logits,
greedy generation with speculation over reused state slots, startup failures; the traced steps' collective order."""

from __future__ import annotations

import json
import math

import pytest
import torch

from dayzero.cache import CompilationCache
from dayzero.contract import allocate_flat_caches
from dayzero.errors import DayzeroError
from dayzero.export.build import export_engine, load_rank_model
from dayzero.export.options import ExportOptions
from dayzero.export.trace import trace_step
from dayzero.llm.api import LLM
from dayzero.llm.loader import start_ranks
from dayzero.model import load
from dayzero.model.caches import PLAIN_CACHE
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.collectives import unordered_collectives
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.plugins.paged_cache import PAGE_SIZE
from dayzero.runtime.llm_engine import RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import TINY_CONFIG, rel_err, run_steps, tiny_config_dict

CPU_RANKS = ["cpu", "cpu"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp")
    # tiny-hybrid (latent MoE: the latent and shared partial sums reduce together) and a plain-MoE variant
    plain = root / "plain.json"
    plain.write_text(json.dumps(tiny_config_dict(routed_expert_hidden_size=None)))
    # MXFP4 experts kept packed: each rank's slice of the down projection's inputs is one 32-wide scale block
    wide = root / "wide.json"
    wide.write_text(json.dumps(tiny_config_dict(moe_intermediate_size=64)))
    written = {name: write_random_checkpoint(config, root / name, torch.float32, seed=3)
               for name, config in (("latent", TINY_CONFIG), ("plain", plain))}
    written["mxfp4"] = write_random_checkpoint(wide, root / "mxfp4", torch.float32, seed=3, mxfp4_experts=True)
    return written


def _inputs():
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (37, 70)]
    steps = [torch.randint(0, 256, (2, 2), generator=gen).tolist() for _ in range(3)]
    return prompts, steps


def _compare_with_one_rank(engine, checkpoint, tolerance: float) -> None:
    model = load(checkpoint, dtype=torch.float32)
    reference = EagerEngine(model, eager_manifest(model, PLAIN_CACHE, 4))
    pages = 2 * math.ceil(80 / PAGE_SIZE)
    prompts, steps = _inputs()
    got = run_steps(engine, allocate_flat_caches(engine.manifest, pages, 4), prompts, steps)
    expected = run_steps(reference, allocate_flat_caches(reference.manifest, pages, 4), prompts, steps)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and rel_err(g, e) < tolerance


@pytest.mark.parametrize("variant, ep", [("latent", 1), ("plain", 1), ("latent", 2), ("mxfp4", 1)],
                         ids=["latent", "plain", "latent-ep2", "mxfp4"])
def test_eager_ranks_match_one_rank(checkpoints, variant, ep, tmp_path):
    entry, _ = export_engine(checkpoints[variant], ExportOptions(backend="eager", tp=2, ep=ep, max_batch=4),
                             CompilationCache(tmp_path))
    engine = start_ranks(entry, 2, CPU_RANKS)
    assert not engine.decodes_alone and not engine.graph_capturable
    try:
        kda_state = next(s for s in engine.manifest.cache_tensors if s.name == "state")
        assert kda_state.unit_shape[0] == 1  # rank 0 holds one of tiny-hybrid's two KDA heads
        _compare_with_one_rank(engine, checkpoints[variant], 1e-5)
    finally:
        workers = list(engine.workers)
        engine.close()
    assert [process.returncode for process in workers] == [0]


def test_each_ranks_traced_step_orders_its_collectives(checkpoints):
    """The compiled path (GPUs): every all-reduce of a rank's step depends on the one before, so that no compiler
    can issue two in different orders on different ranks (tiny-hybrid's latent MoE has two partial sums)."""
    options = ExportOptions(backend="eager", tp=2, max_batch=4, num_draft=1)
    model = load_rank_model(checkpoints["latent"], options, rank=1)
    manifest = eager_manifest(model, PLAIN_CACHE, 4, num_draft=1)
    for decode in (False, True):
        graph = trace_step(model, manifest, decode).graph
        reductions = [n for n in graph.nodes if "all_reduce" in str(n.target)]
        assert len(reductions) == 2 * model.config.num_layers  # one per sublayer
        assert unordered_collectives(graph) == []


def _generate_twice(checkpoint, tp: int, ep: int = 1) -> list[list[int]]:
    """Two rounds on one engine: the second round's sequences reuse the first round's state slots."""
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    with LLM(checkpoint, ExportOptions(backend="eager", tp=tp, ep=ep, max_batch=4, num_draft=2)) as llm:
        first = llm.generate(["one two three one two three one two", "tensor parallel"], params)
        second = llm.generate(["a b a b a b a b", "a third prompt, longer than the others"], params)
    return [out.token_ids for out in first + second]


def test_greedy_generation_with_speculation_equals_one_rank(checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    one_rank = _generate_twice(checkpoints["plain"], 1)
    assert _generate_twice(checkpoints["plain"], 2) == one_rank
    assert _generate_twice(checkpoints["plain"], 2, ep=2) == one_rank


def test_tensor_parallel_ranks_score_prompts_as_one_rank(checkpoints, tmp_path, monkeypatch):
    """A prompt's own log probabilities (lm-evaluation-harness's loglikelihood) from two ranks: rank 0 scores the
    hidden states every rank computed, chunked prefill included."""
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    params = SamplingParams(max_tokens=1, prompt_logprobs=2)
    runtime = RuntimeOptions(token_budget=32)
    with LLM(checkpoints["latent"], ExportOptions(backend="eager", tp=2, max_batch=4), runtime) as llm:
        (scored,) = llm.generate(["a prompt scored token by token, longer than one prefill chunk of 32 tokens"], params)
    prompt = scored.prompt_token_ids
    assert len(prompt) > 32
    expected = torch.log_softmax(load(checkpoints["latent"], dtype=torch.float32).logits(torch.tensor([prompt]))[0], -1)
    assert scored.prompt_logprobs[0] is None and len(scored.prompt_logprobs) == len(prompt)
    for position, entry in enumerate(scored.prompt_logprobs[1:], start=1):
        assert entry[prompt[position]].logprob == pytest.approx(float(expected[position - 1, prompt[position]]),
                                                                abs=1e-4)
        top = [token for token, e in entry.items() if e.rank is not None]
        assert top == expected[position - 1].topk(2).indices.tolist()


def test_a_rank_that_cannot_start_is_reported(checkpoints, tmp_path):
    entry, _ = export_engine(checkpoints["plain"], ExportOptions(backend="eager", tp=2, max_batch=4),
                             CompilationCache(tmp_path))
    with pytest.raises(DayzeroError, match="rank 1 could not load its engine"):
        start_ranks(entry, 2, ["cpu", "no-such-device"])


@pytest.mark.parametrize("fields, message", [
    ({"tp": 2, "backend": "onnx"}, "single-rank"),
    ({"tp": 2, "backend": "aoti"}, "need GPUs"),
    ({"cp": 2}, "run the eager engine"),
    ({"ep": 2}, "must be 1 .* or equal --tp 1"),
    ({"tp": 4, "ep": 2}, "must be 1 .* or equal --tp 4"),
], ids=["onnx", "aoti-cpu", "cp-aoti", "ep-without-tp", "ep-not-tp"])
def test_unsupported_layouts_are_refused(fields, message):
    with pytest.raises(DayzeroError, match=message):
        ExportOptions(**fields)


def test_a_rank_that_died_is_reported_before_the_next_step(checkpoints, tmp_path):
    entry, _ = export_engine(checkpoints["plain"], ExportOptions(backend="eager", tp=2, max_batch=4),
                             CompilationCache(tmp_path))
    engine = start_ranks(entry, 2, CPU_RANKS)
    workers = list(engine.workers)
    try:
        workers[0].kill()
        workers[0].wait()
        caches = allocate_flat_caches(engine.manifest, 2, 4)
        prompts, steps = _inputs()
        with pytest.raises(DayzeroError, match="rank 1 exited"):
            run_steps(engine, caches, prompts[:1], steps[:1])
    finally:
        engine.close()
