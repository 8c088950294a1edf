"""The ONNX interchange graph of the tiny hybrid's decode step: one custom node per plugin op, caches in and out,
valid ONNX, and on ONNX Runtime (CPU, custom ops over the references) the eager engine's logits and caches."""

from __future__ import annotations

import collections

import pytest
import torch

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime_extensions")

import onnx  # noqa: E402

from dayzero.contract import allocate_flat_caches  # noqa: E402
from dayzero.errors import DayzeroError  # noqa: E402
from dayzero.export.onnx import OnnxEngine, cache_names, export_onnx  # noqa: E402
from dayzero.export.trace import trace_step  # noqa: E402
from dayzero.model.caches import CacheFormat  # noqa: E402
from dayzero.model.eager_engine import EagerEngine, eager_manifest  # noqa: E402
from dayzero.model.step import contiguous_meta  # noqa: E402
from dayzero.plugins.registry import ONNX_DOMAIN  # noqa: E402
from tests.helpers import glm5_config_dict, layer_pattern, random_model, rel_err, tiny_config_dict  # noqa: E402

PAGES_PER_SEQ = 2
# KDA with the dense MLP, MLA with MoE, KDA with MoE: every kind of layer, for the variants' exports (half the six's
# export and run time)
THREE_LAYERS = {"num_hidden_layers": 3, "linear_attn_config": layer_pattern("kmk")}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = random_model(tiny_config_dict())
    # MXFP8 index keys (uint8 pages): the production format; the tiny latent is narrower than one FP8 tile
    manifest = eager_manifest(model, CacheFormat(index_mxfp8=True), max_batch=4, max_len=PAGES_PER_SEQ * 64)
    path = export_onnx(model, manifest, tmp_path_factory.mktemp("onnx") / "decode.onnx")
    return model, manifest, path


@pytest.fixture(scope="module")
def engine(exported):
    return OnnxEngine(exported[2])


def test_each_plugin_op_is_one_custom_node(exported):
    model, manifest, path = exported
    graph = onnx.load(path).graph
    program = trace_step(model, manifest, decode=True)
    plugin_calls = collections.Counter(str(n.target) for n in program.graph.nodes
                                       if n.op == "call_function" and str(n.target).startswith("dayzero."))
    custom_nodes = collections.Counter(n.op_type for n in graph.node if n.domain == ONNX_DOMAIN)
    assert sum(custom_nodes.values()) == sum(plugin_calls.values()) > 0
    assert sorted(custom_nodes.values()) == sorted(plugin_calls.values())
    assert {"fused_kda_decode", "WriteLatent", "WriteIndexKeys", "IndexTopkPaged", "sparse_mla_paged",
            "AttnresMixNorm", "MoeGroupedMlp", "RmsNorm", "GatedRmsNorm"} <= set(custom_nodes)
    assert {n.domain for n in graph.node} <= {"", ONNX_DOMAIN}


def test_caches_are_graph_inputs_and_outputs(exported):
    _, manifest, path = exported
    graph = onnx.load(path).graph
    inputs = {v.name: v.type.tensor_type for v in graph.input}
    outputs = {v.name: v.type.tensor_type for v in graph.output}
    assert [v.name for v in graph.output][0] == "logits"
    for name, spec in zip(cache_names(manifest), manifest.cache_tensors):
        for value in (inputs[name], outputs[f"{name}.new"]):
            assert value.elem_type == onnx.helper.np_dtype_to_tensor_dtype(torch.empty(0, dtype=spec.torch_dtype)
                                                                           .numpy().dtype)
            assert tuple(d.dim_value for d in value.shape.dim[1:]) == spec.unit_shape
            assert value.shape.dim[0].dim_param  # pages / slots stay dynamic
    # every cache output is produced by the custom node that updates it, not passed through
    producers = {out: n for n in graph.node for out in n.output}
    assert all(producers[f"{name}.new"].domain == ONNX_DOMAIN for name in cache_names(manifest))


def test_graph_passes_the_checker_with_the_custom_domain(exported):
    model = onnx.load(exported[2])
    onnx.checker.check_model(model, full_check=False)
    assert {i.domain: i.version for i in model.opset_import}[ONNX_DOMAIN] == 1


def _assert_decode_matches_eager(model, manifest, engine, num_steps: int = 3) -> None:
    """Prefill eagerly, then decode num_steps steps of 1 + num_draft tokens on both engines from equal caches."""
    eager, width = EagerEngine(model, manifest), 1 + manifest.num_draft
    batch, context = 2, 5
    ids = torch.randint(0, model.config.vocab_size, (batch, context + num_steps * width),
                        generator=torch.Generator().manual_seed(1))
    eager_caches = allocate_flat_caches(manifest, batch * PAGES_PER_SEQ, batch * width)
    eager.prefill(ids[:, :context].flatten(),
                  contiguous_meta([0] * batch, [context] * batch, PAGES_PER_SEQ, width), eager_caches)
    onnx_caches = [c.clone() for c in eager_caches]
    for step in range(num_steps):
        start = context + step * width
        meta = contiguous_meta([start] * batch, [width] * batch, PAGES_PER_SEQ, width, decode=True)
        # after the first verify step every draft token counts as accepted: read the state of the last one
        meta.num_accepted.fill_(1 if step == 0 else width)
        token = ids[:, start:start + width]
        expected = eager.decode(token, meta, eager_caches)
        logits = engine.decode(token, meta, onnx_caches)
        assert logits.shape == expected.shape == (batch, width, model.config.vocab_size)
        assert rel_err(logits, expected) < 1e-3, step
        assert max(rel_err(a.float(), b.float()) for a, b in zip(onnx_caches, eager_caches)) < 1e-3, step
    assert all(c.float().abs().sum() > 0 for c in onnx_caches)


def test_onnx_runtime_decode_matches_eager_over_three_steps(exported, engine):
    model, manifest, _ = exported
    assert engine.manifest.backend == "onnx" and engine.manifest.cache_tensors == manifest.cache_tensors
    _assert_decode_matches_eager(model, manifest, engine)


@pytest.mark.slow
def test_dense_mla_verify_step_matches_eager(tmp_path):
    """Kimi-Linear's layout (dense MLA, no indexer, no AttnRes) with one draft token per step."""
    model = random_model(tiny_config_dict(index_n_heads=None, index_head_dim=None, index_topk=None,
                                          attn_res_block_size=None, **THREE_LAYERS))
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=PAGES_PER_SEQ * 64, num_draft=1)
    path = export_onnx(model, manifest, tmp_path / "decode.onnx")
    # the plain residual: each add with the norm after it
    assert {"dense_mla_paged", "AddRmsNorm"} <= {n.op_type for n in onnx.load(path).graph.node
                                                 if n.domain == ONNX_DOMAIN}
    _assert_decode_matches_eager(model, manifest, OnnxEngine(path))


@pytest.mark.slow
def test_gated_gqa_verify_step_is_custom_nodes_and_decodes_as_eager(tmp_path):
    """Qwen3-Next's full attention (gated GQA layers over paged K/V) with one draft token per step."""
    from dayzero.model.hybrid import HybridModel
    from dayzero.model.random_init import init_random_
    from tests.model.test_gated_attention import gqa_model_config

    model = HybridModel(gqa_model_config())
    init_random_(model, 0)
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=PAGES_PER_SEQ * 64, num_draft=1)
    path = export_onnx(model, manifest, tmp_path / "decode.onnx")
    assert {"WriteKv", "GqaDecodePaged"} <= {n.op_type for n in onnx.load(path).graph.node if n.domain == ONNX_DOMAIN}
    _assert_decode_matches_eager(model, manifest, OnnxEngine(path))


@pytest.mark.slow
def test_mxfp4_experts_are_one_custom_node_and_decode_as_eager(tmp_path):
    model = random_model(tiny_config_dict(**THREE_LAYERS), mxfp4_experts=True)
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=PAGES_PER_SEQ * 64)
    path = export_onnx(model, manifest, tmp_path / "decode.onnx")
    custom = {n.op_type for n in onnx.load(path).graph.node if n.domain == ONNX_DOMAIN}
    assert "MoeGroupedMlpMxfp4" in custom and "MoeGroupedMlp" not in custom
    _assert_decode_matches_eager(model, manifest, OnnxEngine(path))


def test_onnx_engine_prefill_says_it_carries_decode_only(engine):
    with pytest.raises(DayzeroError, match="decode graph only"):
        engine.prefill(torch.zeros(3, dtype=torch.long), None, [])


def test_export_cli_onnx_backend_stores_an_entry_that_loads_and_decodes(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from dayzero.cache import CompilationCache
    from dayzero.cli import cli
    from dayzero.export.build import ONNX_FILE, RANK_DIR, load_engine
    from dayzero.export.split_engine import SplitEngine
    from dayzero.model import load
    from dayzero.model.checkpoint_writer import write_random_checkpoint
    from tests.helpers import TINY_CONFIG

    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    checkpoint = write_random_checkpoint(TINY_CONFIG, tmp_path / "ckpt", torch.float32)
    args = ["export", str(checkpoint), "--backend", "onnx", "--index-cache", "mxfp8", "--max-batch", "4",
            "--max-len", str(PAGES_PER_SEQ * 64)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0 and "[export] trace + write the ONNX decode graph done in" in result.stderr
    (key,) = CompilationCache(tmp_path / "engines").keys()
    entry = CompilationCache(tmp_path / "engines").get(key)
    onnx.checker.check_model(onnx.load(entry.file(f"{RANK_DIR}/{ONNX_FILE}")), full_check=False)
    engine = load_engine(entry)
    assert isinstance(engine, SplitEngine) and engine.manifest.backend == "onnx"
    _assert_decode_matches_eager(load(checkpoint, dtype=torch.float32), engine.manifest, engine)


@pytest.mark.slow
def test_glm5_next_decode_graph_runs_as_eager(tmp_path):
    """GLM-5.3-Flash's decode step (hyper-connections, pooled index keys and their windows, a layer sharing picks)
    with one draft token per step: its custom nodes, and ONNX Runtime's logits and caches equal eager's."""
    model = random_model(glm5_config_dict())
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=PAGES_PER_SEQ * 64, num_draft=1)
    path = export_onnx(model, manifest, tmp_path / "decode.onnx")
    custom = {n.op_type for n in onnx.load(path).graph.node if n.domain == ONNX_DOMAIN}
    assert {"MhcPre", "MhcPost", "WritePooledIndexKeysDecode", "PooledIndexTopkPaged"} <= custom
    _assert_decode_matches_eager(model, manifest, OnnxEngine(path))
