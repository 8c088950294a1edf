"""`dayzero inspect`: per layer kind, sums that equal what `dayzero plan` (rank weights), `dayzero bench` (decode
traffic floor, prefill work) and the cache layouts count for the whole model and for one rank; ops named as
registered, "reference only" where none is."""

from __future__ import annotations

import pytest
import torch

from dayzero.export.rank_plan import RankPlan
from dayzero.export.sizing import rank_weights
from dayzero.model.caches import CacheFormat, cache_bytes
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import config_manifest
from dayzero.model.expert_format import with_mxfp4_experts
from dayzero.paths import resolve_config
from dayzero.perf import layer_ops
from dayzero.perf.decode_traffic import decode_traffic
from dayzero.perf.inspect import InspectOptions, profile
from dayzero.perf.inspect_table import render
from dayzero.perf.layer_caches import SEQUENCE, TOKEN
from dayzero.perf.prefill_work import prefill_flops
from dayzero.plugins.registry import PLUGIN_OPS

# every bundled config, one rank plan each; the formats a decode token reads
CASES = {
    "tiny-hybrid": InspectOptions(context=100, tp=2, ep=2, dtype="float32", index_cache="mxfp8"),
    "kimi-linear-48b-a3b": InspectOptions(tp=2, kv_cache="fp8"),
    "kimi-k3.1": InspectOptions(context=100_000, tp=8, ep=8, mxfp4_experts=True, kv_cache="fp8",
                                index_cache="mxfp8"),
    "h200-slice": InspectOptions(),
    "glm-5.3-flash": InspectOptions(context=30_000, tp=8, ep=8, kv_cache="fp8", index_cache="mxfp8"),
}


def bundled(name: str) -> ModelConfig:
    return ModelConfig.from_hf(resolve_config(name))


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    name, options = request.param, CASES[request.param]
    cfg = with_mxfp4_experts(bundled(name), options.mxfp4_experts)
    local = RankPlan(options.tp, 0, options.ep).local_config(cfg)
    return cfg, local, options, profile(bundled(name), name, options)


def test_weights_agree_with_plan(case):
    cfg, _, options, report = case
    whole = rank_weights(cfg, RankPlan(1, 0), options.torch_dtype)
    share = rank_weights(cfg, RankPlan(options.tp, 0, options.ep), options.torch_dtype)
    assert (report.model_total.params, report.model_total.weight_bytes) == (whole.params, whole.bytes)
    assert (report.rank_total.params, report.rank_total.weight_bytes) == (share.params, share.bytes)


@pytest.mark.parametrize("rank", [False, True], ids=["model", "rank"])
def test_decode_bytes_agree_with_the_bench_floor(case, rank):
    cfg, local, options, report = case
    net, total = (local, report.rank_total) if rank else (cfg, report.model_total)
    manifest = config_manifest(net, options.torch_dtype, options.cache_format, max_batch=1)
    floor = decode_traffic(net, manifest, batch=1, context=options.context)
    assert total.decode_weight_bytes == pytest.approx(floor.weight_bytes, rel=1e-12)
    assert total.decode_state_bytes == floor.state_bytes
    assert total.decode_cache_bytes == pytest.approx(floor.cache_bytes, rel=1e-12)
    assert total.decode_bytes == pytest.approx(floor.total_bytes, rel=1e-12)


@pytest.mark.parametrize("rank", [False, True], ids=["model", "rank"])
def test_prefill_work_agrees_with_the_bench_model(case, rank):
    cfg, local, options, report = case
    net, total = (local, report.rank_total) if rank else (cfg, report.model_total)
    assert total.prefill_flops * options.context == pytest.approx(prefill_flops(net, options.context), rel=1e-12)


@pytest.mark.parametrize("rank", [False, True], ids=["model", "rank"])
def test_cache_bytes_agree_with_the_cache_layouts(case, rank):
    cfg, local, options, report = case
    net = local if rank else cfg
    plain = cache_bytes(net, options.torch_dtype)
    assert report.cache_bytes(TOKEN, rank=rank) == plain.per_token
    assert report.cache_bytes(SEQUENCE, rank=rank) == plain.per_slot
    if cfg.mla is not None and cfg.mla.kv_lora_rank % 128 == 0:
        quantized = cache_bytes(net, options.torch_dtype, CacheFormat(kv_fp8=True, index_mxfp8=True))
        assert report.cache_bytes(TOKEN, quantized=True, rank=rank) == quantized.per_token
    else:
        assert report.cache_bytes(TOKEN, quantized=True, rank=rank) is None


def test_every_layer_has_one_mixer_and_one_feed_forward(case):
    cfg, _, _, report = case
    for sublayer in (layer_ops.MIXER, layer_ops.FFN):
        assert sum(row.layers for row in report.rows if row.sublayer == sublayer) == cfg.num_layers


def test_kda_state_is_per_sequence_and_split_over_ranks(case):
    cfg, _, options, report = case
    kda = next(row for row in report.rows if row.kind == "kda")
    assert {line.per for line in kda.caches} == {SEQUENCE} and kda.model.decode_cache_bytes == 0
    state = next(line for line in kda.caches if line.tensor == "state")
    heads = cfg.kda.num_heads
    assert state.bytes == (heads * cfg.kda.head_dim**2 * 4,)
    assert state.rank_bytes == (state.bytes[0] // options.tp,)
    attention = [row for row in report.rows if row.kind in (layer_ops.MLA, layer_ops.MLA_DSA)]
    # a pooled indexer's window of its unfinished pool is per sequence
    assert attention and all((line.per == SEQUENCE) == (line.tensor == "index_window") and
                             line.rank_bytes == line.bytes for row in attention for line in row.caches)


def test_bundled_configs_are_served_by_registered_ops(case):
    _, _, _, report = case
    named = {op for row in report.rows for piece in row.pieces for op in (piece.prefill + " + " + piece.decode)
             .split(" + ") if not op.startswith("torch")}
    assert named and named <= set(PLUGIN_OPS)


def test_ops_follow_the_cache_format_the_expert_format_and_context_parallelism():
    cfg = bundled("kimi-k3.1")
    quantized = layer_ops.pieces((layer_ops.MIXER, layer_ops.MLA_DSA), cfg, CacheFormat(index_mxfp8=True))
    assert any("mxfp8_quantize" in p.prefill for p in quantized)
    assert not any("mxfp8_quantize" in p.prefill for p in layer_ops.pieces((layer_ops.MIXER, layer_ops.MLA_DSA), cfg,
                                                                           CacheFormat()))
    experts = layer_ops.pieces((layer_ops.FFN, "moe"), with_mxfp4_experts(cfg), CacheFormat())
    assert any(p.decode == "moe_grouped_mlp_mxfp4" for p in experts)
    assert any("kda_summary" in p.prefill for p in layer_ops.pieces((layer_ops.MIXER, "kda"), cfg, CacheFormat(), 2))


def test_a_plain_shared_expert_decodes_inside_the_grouped_gemm_a_gated_one_apart():
    def decode_ops(name):
        return {p.name: p.decode for p in layer_ops.pieces((layer_ops.FFN, "moe"), bundled(name), CacheFormat())}

    kimi, qwen = decode_ops("kimi-linear-48b-a3b"), decode_ops("qwen3-next-80b-a3b")
    assert kimi["experts"] == kimi["shared experts"] == "moe_grouped_mlp_shared"
    assert qwen["experts"] == "moe_grouped_mlp" and qwen["shared experts"] == "moe_gated_activation"


def test_a_kind_or_op_without_a_kernel_shows_reference_only(monkeypatch):
    monkeypatch.delitem(layer_ops.PIECES, (layer_ops.FFN, "moe"))
    report = profile(bundled("tiny-hybrid"), "tiny-hybrid", InspectOptions())
    moe = next(row for row in report.rows if row.kind == "moe")
    assert [(p.prefill, p.decode) for p in moe.pieces] == [(layer_ops.REFERENCE_ONLY, layer_ops.REFERENCE_ONLY)]
    assert moe.model.params > 0 and "reference only" in render(report)
    assert layer_ops.served("no_such_op") == "reference only (no_such_op)"
    assert layer_ops.served("chunk_kda") == "chunk_kda"
    assert layer_ops.pieces((layer_ops.MIXER, "gated_deltanet"), bundled("tiny-hybrid"), CacheFormat()) == (
        layer_ops.Piece("all", layer_ops.REFERENCE_ONLY, layer_ops.REFERENCE_ONLY),)


def test_parameters_fall_into_their_sublayer_rows():
    cfg = bundled("tiny-hybrid")
    assert layer_ops.param_group(cfg, "model.layers.0.self_attn.q_proj.weight") == (layer_ops.MIXER, "kda")
    assert layer_ops.param_group(cfg, "model.layers.2.self_attn.indexer.wk.weight") == (layer_ops.MIXER, "mla_dsa")
    assert layer_ops.param_group(cfg, "model.layers.0.mlp.up_proj.weight") == (layer_ops.FFN, "dense")
    assert layer_ops.param_group(cfg, "model.layers.3.block_sparse_moe.experts.w1") == (layer_ops.FFN, "moe")
    assert layer_ops.param_group(cfg, "model.layers.3.mlp_res_proj.weight") == (layer_ops.RESIDUAL, "attnres")
    assert layer_ops.param_group(cfg, "lm_head.weight") == (layer_ops.OUTSIDE, "embedding")


def test_glm5_next_shows_hyper_connections_pooled_keys_and_the_unloaded_vision_tower():
    cfg = bundled("glm-5.3-flash")
    assert layer_ops.param_group(cfg, "model.layers.3.attn_hc.fn") == (layer_ops.RESIDUAL, layer_ops.HYPER)
    text = render(profile(cfg, "glm-5.3-flash", InspectOptions()))
    for label in ("hyper-connections", "mhc_pre", "mhc_post", "pooled_index_topk_paged",
                  "write_pooled_index_keys_decode", "index_window  sequence  7680 B bfloat16",
                  "index_k       token     16 B bfloat16", "KDA state, conv and index windows are per sequence",
                  "vision tower (vision_config, model.visual.*): not loaded"):
        assert label in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_the_table_lists_every_kind_and_the_totals():
    report = profile(bundled("kimi-linear-48b-a3b"), "kimi-linear-48b-a3b", InspectOptions(tp=2))
    text = render(report)
    # Kimi-Linear's plain residual: the last add runs with the final norm
    for label in ("KDA", "dense MLA", "dense MLP", "MoE", "per rank (--tp 2 --ep 1)", "chunk_kda",
                  "dense_mla_paged", "1152 B bfloat16", "656 B fp8", "per sequence, not per token", "add_rms_norm"):
        assert label in text
    assert "index keys" not in text.splitlines()[0] and max(len(line) for line in text.splitlines()) <= 120


@pytest.mark.parametrize("options, message", [
    (dict(context=0), "--context must be >= 1"), (dict(tp=0), "--tp must be >= 1"),
    (dict(kv_cache="int4"), "--kv-cache must be one of bf16, fp8"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(Exception, match=message):
        InspectOptions(**options)


def test_an_fp8_latent_cache_that_does_not_fit_is_refused():
    with pytest.raises(Exception, match="--kv-cache fp8: an FP8 latent cache needs kv_lora_rank"):
        profile(bundled("tiny-hybrid"), "tiny-hybrid", InspectOptions(kv_cache="fp8"))


def test_dtype_sets_the_plain_formats():
    report = profile(bundled("tiny-hybrid"), "tiny-hybrid", InspectOptions(dtype="float32"))
    assert report.model_total.weight_bytes == rank_weights(bundled("tiny-hybrid"), RankPlan(1, 0),
                                                           torch.float32).bytes
    mla = next(row for row in report.rows if row.kind == layer_ops.MLA_DSA)
    assert mla.caches[0].formats == ("float32", "fp8")
