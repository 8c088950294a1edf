"""ONNX Runtime (CPU) implementations of the `dayzero` custom nodes, through onnxruntime-extensions PyOps.

Each kernel below reads one node's inputs and attributes as its translation in `plugins/*/op.py` writes them and
calls the registered torch op, which on CPU runs the plugin's reference.py; a node that updates a cache gets a
copy of it and returns the copy as its extra output. onnxruntime-extensions serves Python ops in its own domain
(`ai.onnx.contrib`) with fixed element types per op type, so the session runs a copy of the model in which each
`dayzero` node is renamed to `<op_type>_<signature hash>` of that domain; the file on disk keeps the contract.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import dayzero.plugins  # noqa: F401  (registers torch.ops.dayzero.*)
from dayzero.errors import DayzeroError
from dayzero.plugins.registry import ONNX_DOMAIN

ops = torch.ops.dayzero
Kernel = Callable[..., tuple[torch.Tensor, ...]]
KERNELS: dict[str, Kernel] = {}


def kernel(op_type: str):
    def record(fn: Kernel) -> Kernel:
        KERNELS[op_type] = fn
        return fn

    return record


def _linear_beta(attrs: dict) -> float | None:
    return attrs["linear_beta"] if attrs.get("has_linear_beta") else None


@kernel("fused_kda_decode")
def _fused_kda_decode(qkv, conv_weight, conv_state, z, A_log, dt_bias, beta_logits, state, state_slots,
                      num_accepted, *, scale, lower_bound=None):
    conv_state, state = conv_state.clone(), state.clone()
    o = ops.fused_kda_decode(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state,
                             state_slots, num_accepted, scale)
    return o, conv_state, state


@kernel("fused_gdn_decode")
def _fused_gdn_decode(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted, *, scale):
    conv_state, state = conv_state.clone(), state.clone()
    o = ops.fused_gdn_decode(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted,
                             scale)
    return o, conv_state, state


@kernel("recurrent_kda_pool")
def _recurrent_kda_pool(q, k, v, g, beta, state, state_slots, num_accepted, *, scale, use_qk_l2norm):
    state = state.clone()
    return ops.recurrent_kda_pool(q, k, v, g, beta, state, state_slots, num_accepted, scale, bool(use_qk_l2norm)), state


@kernel("short_conv_decode")
def _short_conv_decode(x, weight, conv_state, state_slots, num_accepted, *, activation="silu"):
    conv_state = conv_state.clone()
    return ops.short_conv_decode(x, weight, conv_state, state_slots, num_accepted, activation), conv_state


def _cache_write(op) -> Kernel:
    def write(cache, rows, slot_mapping, **attrs):
        cache = cache.clone()
        op(cache, rows, slot_mapping, *attrs.values())
        return (cache,)

    return write


kernel("WriteRows")(_cache_write(ops.write_rows))
kernel("WriteLatent")(_cache_write(ops.write_latent))
kernel("WriteIndexKeys")(_cache_write(ops.write_index_keys))


@kernel("WriteKv")
def _write_kv(cache, k, v, slot_mapping):
    cache = cache.clone()
    ops.write_kv(cache, k, v, slot_mapping)
    return (cache,)


@kernel("Mxfp8Quantize")
def _mxfp8_quantize(x, *, block):
    q, scales = ops.mxfp8_quantize(x, block)
    return q.view(torch.uint8), scales


@kernel("IndexTopkPaged")
def _index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, q_scales=None, *, topk, scale=None):
    if q_scales is not None:
        q = q.view(torch.float8_e4m3fn)
    return (ops.index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, topk, scale, q_scales),)


@kernel("WritePooledIndexKeysPrefill")
def _write_pooled_index_keys_prefill(index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens, slots):
    index_cache, window = index_cache.clone(), window.clone()
    ops.write_pooled_index_keys_prefill(index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens, slots)
    return index_cache, window


@kernel("WritePooledIndexKeysDecode")
def _write_pooled_index_keys_decode(index_cache, window, rows, ape, slot_mapping, positions, state_slots,
                                    num_accepted):
    index_cache, window = index_cache.clone(), window.clone()
    ops.write_pooled_index_keys_decode(index_cache, window, rows, ape, slot_mapping, positions, state_slots,
                                       num_accepted)
    return index_cache, window


@kernel("PooledIndexTopkPaged")
def _pooled_index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, q_scales=None, *, topk, kpool,
                             scale, has_scale, has_q_scales):
    if q_scales is not None:
        q = q.view(torch.float8_e4m3fn)
    return (ops.pooled_index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, topk, kpool,
                                        scale if has_scale else None, q_scales),)


@kernel("sparse_mla_paged")
def _sparse_mla_paged(q, latent_cache, block_table, cu_seqlens, indices, *, sm_scale, v_dim):
    return ops.sparse_mla_paged(q, latent_cache, block_table, cu_seqlens, indices, sm_scale, v_dim)


@kernel("dense_mla_paged")
def _dense_mla_paged(q, latent_cache, block_table, cu_seqlens, positions, *, sm_scale, v_dim):
    return ops.dense_mla_paged(q, latent_cache, block_table, cu_seqlens, positions, sm_scale, v_dim)


@kernel("GqaPrefillPaged")
def _gqa_prefill_paged(q, kv_cache, block_table, cu_seqlens, positions, *, sm_scale):
    return (ops.gqa_prefill_paged(q, kv_cache, block_table, cu_seqlens, positions, sm_scale),)


@kernel("GqaDecodePaged")
def _gqa_decode_paged(q, kv_cache, block_table, positions, *, sm_scale):
    return (ops.gqa_decode_paged(q, kv_cache, block_table, positions, sm_scale),)


@kernel("AttnresMix")
def _attnres_mix(query, rms_weight, *sources, eps):
    return (ops.attnres_mix(query, list(sources), rms_weight, eps),)


@kernel("AttnresMixNorm")
def _attnres_mix_norm(query, rms_weight, norm_weight, *sources, eps, norm_eps):
    return ops.attnres_mix_norm(query, list(sources), rms_weight, eps, norm_weight, norm_eps)


@kernel("AttnresMixBlocks")
def _attnres_mix_blocks(query, rms_weight, blocks, partial=None, *, num_blocks, has_partial, eps):
    return (ops.attnres_mix_blocks(query, blocks, num_blocks, partial, rms_weight, eps),)


@kernel("AttnresMixBlocksNorm")
def _attnres_mix_blocks_norm(query, rms_weight, norm_weight, blocks, partial=None, *, num_blocks, has_partial, eps,
                             norm_eps):
    return ops.attnres_mix_blocks_norm(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight, norm_eps)


@kernel("MhcPre")
def _mhc_pre(streams, fn, base, scale, *, norm_eps, hc_eps, sinkhorn_iters):
    return ops.mhc_pre(streams, fn, base, scale, norm_eps, hc_eps, sinkhorn_iters)


@kernel("MhcPost")
def _mhc_post(out, residual, post, comb):
    return (ops.mhc_post(out, residual, post, comb),)


@kernel("RmsNorm")
def _rms_norm(x, weight, *, eps, zero_centered):
    return (ops.rms_norm(x, weight, eps, bool(zero_centered)),)


@kernel("AddRmsNorm")
def _add_rms_norm(hidden, delta, weight, *, eps, zero_centered):
    return ops.add_rms_norm(hidden, delta, weight, eps, bool(zero_centered))


@kernel("GatedRmsNorm")
def _gated_rms_norm(x, gate, weight, *, eps, activation):
    return (ops.gated_rms_norm(x, gate, weight, eps, activation),)


@kernel("MoeRoute")
def _moe_route(logits, correction_bias=None, *, top_k, num_groups, topk_group, renormalize, scaling, activation,
               has_correction_bias, shared_slot):
    return ops.moe_route(logits, correction_bias, top_k, num_groups, topk_group, bool(renormalize), scaling,
                         activation, bool(shared_slot))


@kernel("MoePermute")
def _moe_permute(x, ids, *, num_experts):
    return ops.moe_permute(x, ids, num_experts)


@kernel("MoeUnpermute")
def _moe_unpermute(y_sorted, weights, assignment_positions, shared=None, *, has_shared):
    return (ops.moe_unpermute(y_sorted, weights, assignment_positions, shared),)


@kernel("MoeGroupedMlp")
def _moe_grouped_mlp(x_sorted, expert_offsets, w1, w3, w2, **attrs):
    return (ops.moe_grouped_mlp(x_sorted, expert_offsets, w1, w3, w2, attrs["activation"], attrs["beta"],
                                _linear_beta(attrs)),)


@kernel("MoeGroupedMlpShared")
def _moe_grouped_mlp_shared(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2, **attrs):
    return (ops.moe_grouped_mlp_shared(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2,
                                       attrs["activation"], attrs["beta"], _linear_beta(attrs)),)


@kernel("MoeGroupedMlpMxfp4")
def _moe_grouped_mlp_mxfp4(x_sorted, expert_offsets, *packed_weights, **attrs):
    return (ops.moe_grouped_mlp_mxfp4(x_sorted, expert_offsets, *packed_weights, attrs["activation"], attrs["beta"],
                                      _linear_beta(attrs)),)


@kernel("MoeGatedActivation")
def _moe_gated_activation(gate, up, **attrs):
    return (ops.moe_gated_activation(gate, up, attrs["activation"], attrs["beta"], _linear_beta(attrs)),)


def session(path: str | Path):
    """An onnxruntime InferenceSession (CPU) over the interchange graph at `path`, custom nodes included."""
    import onnx
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    model = onnx.load(str(path))
    runnable = runnable_model(model)
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(runnable.SerializeToString(), options, providers=["CPUExecutionProvider"])


def runnable_model(model):
    """A copy of `model` whose `dayzero` nodes are PyOps of onnxruntime-extensions (registered here)."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    types = _element_types(model.graph)
    domains = set()
    for node in model.graph.node:
        if node.domain == ONNX_DOMAIN:
            node.domain = _register_pyop(node, types)
            domains.add(node.domain)
    imports = [i for i in model.opset_import if i.domain != ONNX_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend([*imports, *(onnx.helper.make_opsetid(domain, 1) for domain in sorted(domains))])
    return model


def _element_types(graph) -> dict[str, int]:
    """Element types of the graph's values; fp8 values travel between the Python ops as their bytes (uint8), so
    their declared types become uint8 in the runnable copy."""
    import onnx

    values = [*graph.input, *graph.output, *graph.value_info]
    for v in values:
        if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT8E4M3FN:
            v.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    types.update({t.name: t.data_type for t in graph.initializer})
    return types


_REGISTERED: set[str] = set()


def _register_pyop(node, types: dict[str, int]) -> str:
    """Register (once) the PyOp for this node's op type, element types and attributes; returns the domain it is
    registered in, one domain per PyOp. onnxruntime-extensions keeps a domain's PyOps in one std::vector and hands
    sessions pointers into it: a later registration in a domain that holds PyOps may move them, and every session
    made before then crashes when it is destroyed (in the garbage collector, tests later). A vector of one is never
    added to, so no pointer moves."""
    from onnxruntime_extensions import onnx_op

    if node.op_type not in KERNELS:
        raise DayzeroError(f"no ONNX Runtime kernel for dayzero::{node.op_type}: add one to dayzero/export/onnx_ort.py")
    inputs = [_pyop_type(types, name, node) for name in node.input]
    outputs = [_pyop_type(types, name, node) for name in node.output]
    attrs = {a.name: _pyop_attr_type(a) for a in node.attribute}
    key = repr((node.op_type, inputs, outputs, sorted(attrs.items())))
    domain = f"{ONNX_DOMAIN}.pyop.{hashlib.sha1(key.encode()).hexdigest()[:12]}"
    if domain not in _REGISTERED:
        onnx_op(op_type=f"{domain}::{node.op_type}", inputs=inputs, outputs=outputs, attrs=attrs)(
            _numpy_kernel(KERNELS[node.op_type]))
        _REGISTERED.add(domain)
    return domain


def _pyop_type(types: dict[str, int], name: str, node) -> int:
    import onnx
    from onnxruntime_extensions import PyCustomOpDef

    elem = types.get(name, onnx.TensorProto.UNDEFINED)
    pyop = {onnx.TensorProto.FLOAT: PyCustomOpDef.dt_float, onnx.TensorProto.INT32: PyCustomOpDef.dt_int32,
            onnx.TensorProto.INT64: PyCustomOpDef.dt_int64, onnx.TensorProto.UINT8: PyCustomOpDef.dt_uint8,
            onnx.TensorProto.FLOAT16: PyCustomOpDef.dt_float16, onnx.TensorProto.BOOL: PyCustomOpDef.dt_bool}
    if elem not in pyop:
        raise DayzeroError(f"dayzero::{node.op_type} value {name!r} has ONNX element type {elem}, which the ONNX "
                           "Runtime Python ops cannot carry (numpy has no bfloat16/fp8): export in float32")
    return pyop[elem]


def _pyop_attr_type(attribute) -> int:
    import onnx
    from onnxruntime_extensions import PyCustomOpDef

    kinds = {onnx.AttributeProto.FLOAT: PyCustomOpDef.dt_float, onnx.AttributeProto.INT: PyCustomOpDef.dt_int64,
             onnx.AttributeProto.STRING: PyCustomOpDef.dt_string}
    return kinds[attribute.type]


def _numpy_kernel(fn: Kernel) -> Callable:
    def run(*arrays, **attrs):
        inputs = [torch.from_numpy(np.array(a)) for a in arrays]
        with torch.inference_mode():
            outputs = fn(*inputs, **attrs)
        return tuple(o.contiguous().numpy() for o in outputs) if len(outputs) > 1 else outputs[0].numpy()

    return run
