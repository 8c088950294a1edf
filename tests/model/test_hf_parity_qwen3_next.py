"""Parity with transformers for Qwen3-Next (`qwen3_next`; the checkpoint: qwen3_next_checkpoints.py): dayzero's
reference model gives transformers' fp32 logits, also laid out for export and through verify steps (on the GPU: the
Triton kernels), and the runtime's greedy tokens (chunked prefill; speculation; a prompt that reuses another's cached
prefix) equal transformers' greedy `generate`."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.export.layout import lay_out
from dayzero.model import load
from dayzero.model.caches import CacheFormat
from dayzero.model.config import DENSE, GDN, GQA, MOE
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.step import contiguous_meta
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.hf_generation import NEW_TOKENS, HalfRightProposer, transformers_tokens
from tests.model.qwen3_next_checkpoints import VOCAB, write_checkpoint
from tests.plugins.triton_env import gpu_only

MAX_BATCH = 2


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("qwen3_next"))


def test_the_checkpoint_mixes_every_layer_kind(checkpoint):
    cfg = load(checkpoint[0], dtype=torch.float32).config
    assert cfg.layer_kinds == (GDN, GDN, GQA, GDN) and cfg.mlp_kinds == (MOE, DENSE, MOE, MOE)
    assert (cfg.gdn.num_key_heads, cfg.gdn.num_value_heads, cfg.gqa.head_dim, cfg.gqa.rotary_dim) == (2, 6, 40, 20)


def test_reference_logits_match_transformers(checkpoint):
    directory, hf = checkpoint
    # 70 tokens: two chunks of the chunked recurrence
    ids = torch.randint(0, VOCAB, (2, 70))
    got = load(directory, dtype=torch.float32).logits(ids)
    assert rel_err(got, expected_logits(hf, ids)) < 1e-4


def runtime(model, num_draft: int, prefix_caching: bool) -> LLMEngine:
    manifest = eager_manifest(model, CacheFormat(), max_batch=MAX_BATCH, max_len=256, num_draft=num_draft)
    # slot groups: the batch's, the dummy and, with prefix caching, a snapshot group a sequence of the batch
    groups = MAX_BATCH + 1 + (MAX_BATCH if prefix_caching else 0)
    memory = groups * (1 + num_draft) * manifest.unit_bytes(SLOT) + 12 * manifest.unit_bytes(PAGE)
    # a budget of 16 tokens prefills the prompts in chunks
    options = RuntimeOptions(token_budget=16, memory_bytes=memory, prefix_caching=prefix_caching)
    return LLMEngine(EagerEngine(model, manifest), options)


def prompts(shared_prefix: bool) -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    first = torch.randint(0, VOCAB, (100,), generator=gen).tolist()
    second = torch.randint(0, VOCAB, (5,), generator=gen).tolist()
    # the second prompt repeats the first's first page (64 tokens), whose state the first prefill snapshots
    return [first, first[:70] + second] if shared_prefix else [first[:37], second]


@pytest.mark.parametrize("num_draft, prefix_caching", [(0, False), (2, True)], ids=["plain", "drafts-prefix-cache"])
def test_runtime_greedy_tokens_equal_transformers_generate(checkpoint, num_draft, prefix_caching):
    directory, hf = checkpoint
    expected = {tuple(p): transformers_tokens(hf, p) for p in prompts(prefix_caching)}
    engine = runtime(load(directory, dtype=torch.float32), num_draft, prefix_caching)
    if num_draft:
        engine.propose = HalfRightProposer(expected, VOCAB)
    seqs = []
    for prompt in expected:
        seqs.append(engine.add_request(list(prompt), SamplingParams(max_tokens=NEW_TOKENS)))
        # with prefix caching, each prompt after the previous one finished
        while engine.has_work and prefix_caching:
            engine.step()
    while engine.has_work:
        engine.step()
    assert [seq.output_ids for seq in seqs] == list(expected.values())
    if num_draft:
        assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
    if prefix_caching:
        assert engine.prefix_cache.hit_tokens == 64


def verified_logits(model, ids: torch.Tensor, prefix: int) -> torch.Tensor:
    """Logits of positions prefix-1 .. T-1 on the model's device: prefill ids[:, :prefix], then verify steps of 2
    tokens (T - prefix even), each accepting both, so the next starts from the state after the second."""
    batch, length = ids.shape
    pages = -(-length // 64)
    caches = model.allocate_caches(batch * pages, 2 * batch)
    ids = ids.to(model.device)
    with torch.inference_mode():
        meta = contiguous_meta([0] * batch, [prefix] * batch, pages, slots_per_seq=2, device=model.device)
        out = [model.prefill(ids[:, :prefix].flatten(), meta, caches)[:, None]]
        for start in range(prefix, length, 2):
            meta = contiguous_meta([start] * batch, [2] * batch, pages, slots_per_seq=2, decode=True,
                                   device=model.device)
            meta.num_accepted.fill_(1 if start == prefix else 2)
            out.append(model.decode(ids[:, start : start + 2], meta, caches))
    return torch.cat(out, dim=1).cpu()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu_only)])
def test_laid_out_prefill_and_verify_steps_give_transformers_logits(checkpoint, device):
    """As the engines run it (export layout): the reference ops on the CPU; the Triton kernels (chunked prefill,
    fused decode / verify step) in fp32 on the GPU, where tf32 dots bound the error."""
    directory, hf = checkpoint
    ids = torch.randint(0, VOCAB, (2, 100))
    model = load(directory, dtype=torch.float32, device=device)
    # one GEMM for both input projections of each gated DeltaNet layer, its rows regrouped by kind
    assert lay_out(model)["gdn_fused_input_projection"] == 3
    assert not hasattr(model.model.layers[0].self_attn, "in_proj_qkvz")
    expected, tolerance = expected_logits(hf, ids), 1e-4 if device == "cpu" else 2e-2
    assert rel_err(model.logits(ids).cpu(), expected) < tolerance
    assert rel_err(verified_logits(model, ids, prefix=70), expected[:, 69:]) < tolerance
