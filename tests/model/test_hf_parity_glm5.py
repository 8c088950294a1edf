"""Parity with transformers for GLM-5.3-Flash (`glm5_next`, the checkpoint: glm5_checkpoints.py): dayzero's reference
model gives transformers' fp32 logits, with the pooled indexer's selections untied, and so do the plugin ops' Triton
bodies (interpreter); the runtime's greedy tokens (chunked prefill, speculation, prefix caching) equal transformers'
greedy `generate` across pool boundaries; transformers' in-memory tensor names load as the release's."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from dayzero.contract import PAGE, SLOT
from dayzero.model import load
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.glm5_checkpoints import KPOOL, TOPK, VOCAB, write_checkpoint
from tests.model.hf_generation import NEW_TOKENS, HalfRightProposer, transformers_tokens
from tests.plugins.triton_env import ON_GPU, needs_triton


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # tiny shapes run fastest on one thread, and far faster on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield write_checkpoint(tmp_path_factory.mktemp("glm5_next"))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def generations(checkpoint):
    """transformers' greedy tokens after a prompt, generated once a module."""
    found: dict[tuple[int, ...], list[int]] = {}

    def tokens(prompt: list[int]) -> list[int]:
        if tuple(prompt) not in found:
            found[tuple(prompt)] = transformers_tokens(checkpoint[1], prompt)
        return found[tuple(prompt)]

    return tokens


def test_reference_logits_match_transformers(checkpoint, untied, caplog):
    directory, hf = checkpoint
    length = 40
    ids = torch.randint(0, VOCAB, (2, length))
    with caplog.at_level(logging.INFO, logger="dayzero.model.weights"):
        model = load(directory, dtype=torch.float32)
    assert "vision tower" in caplog.text and not any("visual" in name for name, _ in model.named_parameters())
    got = model.logits(ids)
    assert rel_err(got, expected_logits(hf, ids)) < 1e-4
    indexers = sum(model.config.owns_indexer(layer) for layer in range(model.config.num_layers))
    # the rows that see more complete pools than the indexer keeps
    selecting = sum((p + 1) // KPOOL > TOPK // KPOOL for p in range(length))
    assert len(untied) == indexers * 2 * selecting and min(untied) > 1e-5


def prompt(length: int) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(length)).tolist()


def runtime(model, num_draft: int, pages: int, prefix_caching: bool = False) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=256, num_draft=num_draft)
    groups = 3 + (2 if prefix_caching else 0)
    memory = groups * (1 + num_draft) * manifest.unit_bytes(SLOT) + pages * manifest.unit_bytes(PAGE)
    # a budget of 16 tokens prefills a long prompt in chunks that end inside pools
    options = RuntimeOptions(token_budget=16, memory_bytes=memory, prefix_caching=prefix_caching)
    return LLMEngine(EagerEngine(model, manifest), options)


def generate(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    seqs = [engine.add_request(p, SamplingParams(max_tokens=NEW_TOKENS)) for p in prompts]
    while engine.has_work:
        engine.step()
    return [seq.output_ids for seq in seqs]


@pytest.mark.parametrize("num_draft", [0, 2], ids=["plain", "drafts"])
def test_runtime_greedy_tokens_equal_transformers_generate(checkpoint, generations, num_draft):
    directory, _ = checkpoint
    prompts = [prompt(37), prompt(5)]
    expected = {tuple(p): generations(p) for p in prompts}
    engine = runtime(load(directory, dtype=torch.float32), num_draft, pages=8)
    if num_draft:
        engine.propose = HalfRightProposer(expected, VOCAB)
    assert generate(engine, prompts) == list(expected.values())
    if num_draft:
        assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens


@pytest.mark.parametrize("num_draft", [0, 2], ids=["plain", "drafts"])
def test_prefix_caching_resumes_a_pool_across_the_cached_page(checkpoint, generations, num_draft):
    """A 60-token prompt decodes across position 64, whose snapshot holds the window of the pool 63..65; the next
    turn (prompt, answer and 4 more tokens) starts from that snapshot, and a repeat of it from the prompt's own."""
    directory, _ = checkpoint
    first = prompt(60)
    answer = generations(first)
    second = first + answer + prompt(4)
    expected = {tuple(first): answer, tuple(second): generations(second)}
    engine = runtime(load(directory, dtype=torch.float32), num_draft, pages=12, prefix_caching=True)
    if num_draft:
        engine.propose = HalfRightProposer(expected, VOCAB)
    assert generate(engine, [first]) == [answer]
    assert generate(engine, [second]) == generate(engine, [second]) == [expected[tuple(second)]]
    assert engine.prefix_cache.hit_tokens == 2 * 64


@needs_triton
@pytest.mark.slow
@pytest.mark.skipif(ON_GPU, reason="the interpreter run is the CPU check")
def test_plugin_ops_logits_match_transformers(tmp_path, triton_bodies_on_cpu):
    """A full indexer layer and one sharing its picks (KDA's kernels are checked in the Kimi tests), with pools of 4
    (the pooled Top-K kernels' case: pools whole in pages), through the Triton bodies: 17 tokens make up to 4
    complete pools, of which 3 are kept."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        directory, hf = write_checkpoint(tmp_path, num_hidden_layers=2, index_kpool=4,
                                         layer_types=["indexed_attention", "indexed_attention"],
                                         indexer_types=["full", "shared"], mlp_layer_types=["sparse", "dense"])
        ids = torch.randint(0, VOCAB, (1, 17))
        got = load(directory, dtype=torch.float32).logits(ids)
        assert rel_err(got, expected_logits(hf, ids)) < 1e-4
    finally:
        torch.set_num_threads(threads)


def in_memory_layout(tensors: dict) -> dict:
    """transformers' in-memory names of the release's tensors: the hyper-connections as `attn_hc.fn`, the KDA convs
    fused (q, k, v rows), the gate under `forget_gate.`, routed experts fused (gate rows first)."""
    out = {}
    for name, tensor in tensors.items():
        name = re.sub(r"\.hc_(attn|ffn)_(fn|base|scale)$", r".\1_hc.\2", name)
        name = re.sub(r"\.self_attn\.(f_a_proj|f_b_proj|dt_bias|A_log)", r".self_attn.forget_gate.\1", name)
        out[name] = tensor
    for conv in [n for n in out if n.endswith(".q_conv1d.weight")]:
        parts = [out.pop(conv.replace(".q_conv1d", f".{w}_conv1d")) for w in "qkv"]
        out[conv.replace(".q_conv1d", ".conv1d")] = torch.cat(parts)
    for gate in [n for n in out if n.endswith(".experts.0.gate_proj.weight")]:
        base = gate.removesuffix(".0.gate_proj.weight")
        count = sum(n.startswith(base + ".") and n.endswith(".gate_proj.weight") for n in out)
        pop = [[out.pop(f"{base}.{e}.{w}.weight") for e in range(count)] for w in ("gate_proj", "up_proj", "down_proj")]
        out[f"{base}.gate_up_proj"] = torch.cat([torch.stack(pop[0]), torch.stack(pop[1])], dim=1)
        out[f"{base}.down_proj"] = torch.stack(pop[2])
    return out


def test_transformers_in_memory_tensor_names_load_the_same(checkpoint, tmp_path):
    directory, _ = checkpoint
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    tensors = in_memory_layout(load_file(directory / "model.safetensors"))
    assert any(".conv1d.weight" in n for n in tensors) and any("attn_hc.fn" in n for n in tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ids = torch.randint(0, VOCAB, (1, 20))
    released = load(directory, dtype=torch.float32).logits(ids)
    assert torch.equal(load(tmp_path, dtype=torch.float32).logits(ids), released)
