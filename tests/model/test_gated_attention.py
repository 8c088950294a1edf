"""The gated GQA mixer through paged caches equals transformers' Qwen3NextAttention on the whole sequence: a prefill,
a chunked prefill after cached context, then speculative-width decode steps, over pages the sequences cross."""

from __future__ import annotations

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.model.gated_attention import GatedAttention
from dayzero.model.layer_config import GQAConfig
from dayzero.model.step import GQACache, contiguous_meta
from dayzero.plugins.gqa import kv_cache_shape
from dayzero.plugins.registry import PLUGIN_OPS
from tests.helpers import rel_err
from tests.hf_checkpoints import transformers

HIDDEN = 96
CFG = GQAConfig(num_heads=6, num_kv_heads=2, head_dim=80, rotary_dim=20, rope_theta=1e6, norm_eps=1e-6)
# per step: (new tokens of sequence 0, of sequence 1); the decode steps carry 2 tokens each
PREFILLS = [(50, 30), (23, 40)]
DECODES = 3
PAGES_PER_SEQ = 3


def hf_attention():
    from transformers.models.qwen3_next import modeling_qwen3_next as hf

    config = transformers.Qwen3NextConfig(
        hidden_size=HIDDEN, num_attention_heads=CFG.num_heads, num_key_value_heads=CFG.num_kv_heads,
        head_dim=CFG.head_dim, rms_norm_eps=CFG.norm_eps, num_hidden_layers=4,
        rope_parameters={"rope_type": "default", "rope_theta": CFG.rope_theta,
                         "partial_rotary_factor": CFG.rotary_dim / CFG.head_dim})
    config._attn_implementation = "eager"
    attention = hf.Qwen3NextAttention(config, layer_idx=3).eval()
    with torch.no_grad():
        for p in attention.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else p.shape[-1] ** -0.5))
    return attention, hf.Qwen3NextRotaryEmbedding(config)


def hf_outputs(attention, rotary, x: torch.Tensor) -> torch.Tensor:
    """x [S, D] of one sequence -> its causal attention output [S, D]."""
    length = x.shape[0]
    positions = torch.arange(length)[None]
    mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        out, _ = attention(x[None], rotary(x[None], positions), mask)
    return out[0]


def run_steps(mixer: GatedAttention, xs: list[torch.Tensor], cache: GQACache) -> list[torch.Tensor]:
    """The sequences' tokens through prefill chunks, then decode steps of 2 tokens -> each sequence's outputs."""
    outs, done = [[], []], [0, 0]
    steps = [(list(new), False) for new in PREFILLS] + [([2, 2], True)] * DECODES
    for new, decode in steps:
        meta = contiguous_meta(done, new, PAGES_PER_SEQ, decode=decode)
        x = torch.cat([seq[d : d + n] for seq, d, n in zip(xs, done, new)])
        with torch.no_grad():
            out = mixer(x, meta, cache, decode)
        for n, part in enumerate(out.split(new)):
            outs[n].append(part)
        done = [d + n for d, n in zip(done, new)]
    return [torch.cat(o) for o in outs]


@pytest.fixture
def gqa_ops(request):
    """The GQA ops on the CPU as registered (their reference), or dispatched to their Triton bodies (interpreter)."""
    if request.param == "triton":
        pytest.importorskip("triton")
    ops = [PLUGIN_OPS[name] for name in ("write_kv", "gqa_prefill_paged", "gqa_decode_paged")]
    for op in ops:
        op.register_kernel("cpu", op.dayzero_impls["cuda" if request.param == "triton" else "cpu"])
    yield request.param
    for op in ops:
        op.register_kernel("cpu", op.dayzero_impls["cpu"])


# the Triton bodies on the plain cache (the FP8 reads are held against the reference in tests/plugins)
@pytest.mark.parametrize("gqa_ops, fp8, tolerance", [("reference", False, 1e-5), ("reference", True, 5e-2),
                                                     ("triton", False, 1e-5)],
                         ids=["reference-fp32-cache", "reference-fp8-cache", "triton-fp32-cache"], indirect=["gqa_ops"])
def test_prefill_chunked_prefill_and_decode_match_qwen3_next_attention(gqa_ops, fp8, tolerance):
    attention, rotary = hf_attention()
    mixer = GatedAttention(HIDDEN, CFG)
    mixer.load_state_dict(attention.state_dict())
    lengths = [sum(step[n] for step in PREFILLS) + 2 * DECODES for n in range(2)]
    xs = [torch.randn(length, HIDDEN) for length in lengths]
    shape = kv_cache_shape(2 * PAGES_PER_SEQ, CFG.num_kv_heads, CFG.head_dim, fp8)
    cache = GQACache(kv=torch.zeros(shape, dtype=torch.uint8) if fp8 else torch.full(shape, float("nan")))
    got = run_steps(mixer, xs, cache)
    for x, out in zip(xs, got):
        assert rel_err(out, hf_outputs(attention, rotary, x)) < tolerance


def test_config_refuses_heads_that_do_not_group():
    with pytest.raises(DayzeroError, match="multiple"):
        GQAConfig(num_heads=6, num_kv_heads=4, head_dim=64, rotary_dim=16)
    with pytest.raises(DayzeroError, match="rotary"):
        GQAConfig(num_heads=4, num_kv_heads=2, head_dim=64, rotary_dim=66)


def gqa_model_config():
    from dayzero.model.config import GQA, ModelConfig

    return ModelConfig(model_type="kimi_linear", vocab_size=100, hidden_size=HIDDEN, layer_kinds=(GQA, GQA),
                       mlp_kinds=("dense", "dense"), intermediate_size=64, kda=None, mla=None, indexer=None, moe=None,
                       gqa=CFG)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_the_manifest_pages_hold_each_gqa_layers_kv_and_cache_bytes_count_them(fp8):
    from dayzero.contract import PAGE
    from dayzero.model.caches import CacheFormat, cache_bytes
    from dayzero.model.eager_engine import config_manifest

    cfg, fmt = gqa_model_config(), CacheFormat(kv_fp8=fp8)
    manifest = config_manifest(cfg, torch.bfloat16, fmt, max_batch=4)
    shape = kv_cache_shape(1, CFG.num_kv_heads, CFG.head_dim, fp8)[1:]
    assert [(t.layer, t.name, t.unit, t.unit_shape, t.dtype) for t in manifest.cache_tensors] == [
        (layer, "kv", PAGE, shape, "uint8" if fp8 else "bfloat16") for layer in (0, 1)]
    per_token = 2 * 2 * CFG.num_kv_heads * (CFG.head_dim + 1 if fp8 else 2 * CFG.head_dim)
    assert cache_bytes(cfg, torch.bfloat16, fmt).per_token == per_token == manifest.unit_bytes(PAGE) // 64


def test_an_engine_of_gqa_layers_prefills_and_decodes_from_the_manifests_caches():
    from dayzero.contract import allocate_flat_caches
    from dayzero.model.caches import CacheFormat
    from dayzero.model.eager_engine import EagerEngine, eager_manifest
    from dayzero.model.hybrid import HybridModel
    from dayzero.model.random_init import init_random_

    model = HybridModel(gqa_model_config())
    init_random_(model, 0)
    manifest = eager_manifest(model, CacheFormat(), max_batch=2, max_len=192)
    engine, caches = EagerEngine(model, manifest), allocate_flat_caches(manifest, 6, 2)
    ids = torch.randint(0, 100, (2, 7))
    engine.prefill(ids[:, :5].flatten(), contiguous_meta([0, 0], [5, 5], 3), caches)
    logits = engine.decode(ids[:, 5:], contiguous_meta([5, 5], [2, 2], 3, slots_per_seq=2, decode=True), caches)
    assert torch.allclose(logits, model.logits(ids)[:, 5:], rtol=1e-4, atol=1e-4)


def test_tensor_parallel_ranks_sum_to_the_whole_layer():
    """Each rank holds whole query heads (with their gates) and whole KV heads: its partial outputs add up."""
    from dayzero.export.rank_plan import RankPlan

    cfg, tp = gqa_model_config(), 2
    whole = GatedAttention(HIDDEN, CFG)
    for p in whole.parameters():
        p.copy_(torch.randn_like(p) * 0.2)
    x = torch.randn(9, HIDDEN)
    meta = contiguous_meta([0], [9], 1)

    def run(module: GatedAttention) -> torch.Tensor:
        shape = kv_cache_shape(1, module.cfg.num_kv_heads, CFG.head_dim, False)
        with torch.no_grad():
            return module(x, meta, GQACache(kv=torch.zeros(shape)), decode=False)

    partials = []
    for rank in range(tp):
        plan = RankPlan(tp, rank)
        local = GatedAttention(HIDDEN, plan.local_config(cfg).gqa)
        for name, p in local.named_parameters():
            p.copy_(plan.shard(whole.get_parameter(name), p.shape))
        partials.append(run(local))
    assert rel_err(sum(partials), run(whole)) < 1e-5
    with pytest.raises(DayzeroError, match="num_key_value_heads = 2"):
        RankPlan(4, 0).local_config(cfg)
