"""Parity with transformers for Qwen3-Next (`qwen3_next`; the checkpoint: qwen3_next_checkpoints.py): dayzero's
reference model gives transformers' fp32 logits, and the runtime's greedy tokens (chunked prefill; speculation; a
prompt that reuses another's cached prefix) equal transformers' greedy `generate`."""

from __future__ import annotations

import pytest
import torch

from dayzero.contract import PAGE, SLOT
from dayzero.export.layout import lay_out
from dayzero.model import load
from dayzero.model.caches import CacheFormat
from dayzero.model.config import DENSE, GDN, GQA, MOE
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from tests.helpers import rel_err
from tests.model.qwen3_next_checkpoints import VOCAB, expected_logits, write_checkpoint
from tests.model.test_cache_consistency import decode_logits
from tests.model.test_hf_parity_dsa import NEW_TOKENS, HalfRightProposer

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


def transformers_tokens(hf, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        # an explicit mask: without one, generate masks every prompt token equal to the pad id
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def test_the_export_layout_keeps_the_logits(checkpoint):
    """One GEMM for both input projections, its rows regrouped by kind: the same logits, prefill and decode."""
    directory, hf = checkpoint
    ids = torch.randint(0, VOCAB, (2, 70))
    model = load(directory, dtype=torch.float32)
    assert lay_out(model)["gdn_fused_input_projection"] == 3
    assert not hasattr(model.model.layers[0].self_attn, "in_proj_qkvz")
    expected = expected_logits(hf, ids)
    assert rel_err(model.logits(ids), expected) < 1e-4
    assert rel_err(decode_logits(model, ids, prefix=66), expected[:, 65:]) < 1e-4


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
        engine.propose = HalfRightProposer(expected)
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
