import importlib
import pkgutil

import pytest

import dayzero.plugins
from dayzero.perf import op_kinds
from dayzero.perf.op_kinds import (
    ATTNRES,
    CACHE_WRITES,
    ELEMENTWISE,
    GEMM,
    GQA,
    INDEXER,
    KDA,
    KINDS,
    MHC,
    MLA,
    MOE_EXPERTS,
    MOE_ROUTING,
    NORMS,
    OTHER,
    REDUCTIONS,
    cpu_op_kind,
    kernel_kind,
    param_kind,
    plugin_op_modules,
)
from tests.helpers import TINY_CONFIG


def test_every_plugin_package_and_named_module_has_a_kind():
    packages = {info.name for info in pkgutil.iter_modules(dayzero.plugins.__path__) if info.ispkg}
    assert packages == set(op_kinds.PACKAGE_KINDS)
    for module in op_kinds.MODULE_KINDS:
        importlib.import_module(f"{op_kinds.PLUGINS}.{module}")
    assert set(op_kinds.OP_KINDS) <= set(plugin_op_modules())
    assert set(op_kinds.PACKAGE_KINDS.values()) | set(op_kinds.MODULE_KINDS.values()) <= set(KINDS)


def test_every_registered_op_has_its_plugins_kind():
    kinds = {name: cpu_op_kind(f"dayzero::{name}") for name in plugin_op_modules()}
    assert OTHER not in kinds.values()
    assert kinds["fused_kda_decode"] == KDA and kinds["short_conv_decode"] == KDA
    assert kinds["index_topk_paged"] == INDEXER and kinds["mxfp8_quantize"] == INDEXER
    assert kinds["sparse_mla_paged"] == MLA and kinds["dense_mla_paged"] == MLA
    assert kinds["write_latent"] == CACHE_WRITES and kinds["write_index_keys"] == CACHE_WRITES
    assert kinds["attnres_mix"] == ATTNRES
    assert {kinds[op] for op in ("moe_route", "moe_permute", "moe_unpermute", "moe_router_logits")} == {MOE_ROUTING}
    assert kinds["moe_grouped_mlp"] == MOE_EXPERTS and kinds["moe_gated_activation"] == MOE_EXPERTS
    assert kinds["gqa_decode_paged"] == GQA and kinds["write_kv"] == CACHE_WRITES
    assert {kinds[op] for op in ("mhc_pre", "mhc_post")} == {MHC}


@pytest.mark.parametrize("name, kind", [
    ("_fused_kda_decode_kernel", KDA), ("_short_conv_decode_kernel", KDA), ("_decode_select_kernel", INDEXER),
    ("_merge_select_kernel", INDEXER), ("_quantize_kernel", INDEXER), ("_mla_attention_kernel", MLA),
    ("_sparse_mla_decode_kernel", MLA), ("_combine_splits_kernel", MLA), ("_write_fp8_latent_kernel", CACHE_WRITES),
    ("_attnres_mix_kernel", ATTNRES), ("_route_kernel", MOE_ROUTING), ("_permute_rows_kernel", MOE_ROUTING),
    ("_unpermute_kernel", MOE_ROUTING), ("_grouped_gemm_kernel", MOE_EXPERTS),
    ("_gated_activation_kernel", MOE_EXPERTS), ("_gqa_attention_kernel", GQA), ("_write_kv_kernel", CACHE_WRITES),
    ("_mhc_post_kernel", MHC), ("_mhc_finish_kernel", MHC),
])
def test_triton_kernels_take_their_modules_kind(name, kind):
    assert kernel_kind(name) == kind


@pytest.mark.parametrize("name, kind", [
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GEMM), ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", GEMM),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(...)", GEMM),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, float, 128, 16, 4, 4, false>(...)", GEMM),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(...)", GEMM),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(...)", NORMS),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>()", REDUCTIONS),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>(...)", REDUCTIONS),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(...)", ELEMENTWISE),
    ("void at::native::index_elementwise_kernel<128, 4>(...)", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(...)", ELEMENTWISE),
    ("Memcpy HtoD (Pageable -> Device)", ELEMENTWISE), ("Memset (Device)", ELEMENTWISE),
    ("triton_poi_fused_add_mul_0", ELEMENTWISE), ("triton_red_fused_mean_pow_1", REDUCTIONS),
    ("void cutlass_grouped_mm_kernel<...>", MOE_EXPERTS), ("some_unknown_kernel", OTHER),
])
def test_library_kernels_by_name(name, kind):
    assert kernel_kind(name) == kind


@pytest.mark.parametrize("name, kind", [
    ("aten::linear", GEMM), ("aten::mm", GEMM), ("aten::einsum", GEMM), ("aten::bmm", GEMM), ("aten::rms_norm", NORMS),
    ("aten::sum", REDUCTIONS), ("aten::argmax", REDUCTIONS), ("aten::softmax", REDUCTIONS), ("aten::mul", ELEMENTWISE),
    ("aten::index_select", ELEMENTWISE), ("aten::copy_", ELEMENTWISE), ("dayzero::no_such_op", OTHER),
])
def test_host_ops_by_name(name, kind):
    assert cpu_op_kind(name) == kind


def test_parameters_go_to_the_work_that_reads_them():
    from dayzero.model.config import ModelConfig
    from dayzero.model.weights import parameter_shapes

    kinds = {name: param_kind(name) for name in parameter_shapes(ModelConfig.from_hf(TINY_CONFIG))}
    assert kinds["model.embed_tokens.weight"] == ELEMENTWISE and kinds["lm_head.weight"] == GEMM
    assert kinds["model.layers.1.block_sparse_moe.experts.w1"] == MOE_EXPERTS
    assert kinds["model.layers.1.block_sparse_moe.gate.e_score_correction_bias"] == MOE_ROUTING
    assert kinds["model.layers.1.block_sparse_moe.shared_experts.up_proj.weight"] == GEMM
    assert kinds["model.layers.1.self_attention_res_proj.weight"] == ATTNRES
    assert kinds["model.layers.1.self_attention_res_norm.weight"] == ATTNRES
    assert kinds["model.output_attn_res_proj.weight"] == ATTNRES
    assert kinds["model.layers.0.self_attn.A_log"] == KDA and kinds["model.layers.0.self_attn.q_conv1d.weight"] == KDA
    assert kinds["model.layers.0.self_attn.q_proj.weight"] == GEMM
    assert kinds["model.layers.2.self_attn.indexer.k_norm.bias"] == NORMS
    assert kinds["model.layers.2.input_layernorm.weight"] == NORMS and kinds["model.norm.weight"] == NORMS
    assert set(kinds.values()) <= set(KINDS)
    assert param_kind("model.layers.3.attn_hc.fn") == MHC and param_kind("model.layers.3.ffn_hc.base") == MHC
    assert param_kind("model.layers.3.self_attn.q_norm.weight") == NORMS
