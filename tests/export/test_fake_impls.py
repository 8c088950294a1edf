"""Every plugin op's fake implementation describes what its Triton body returns: same shapes, strides and dtypes.

Under AOTInductor the Triton body is compiled into the graph while the code around it is planned from the fake
implementation, so a disagreement (a stride, a padded width) turns into wrong addressing on the GPU. Here the
model's prefill and decode steps run with every plugin op dispatched to its Triton body under the interpreter
(bf16, FP8 latent + MXFP8 index caches: the production formats), each call checked against the fake.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from dayzero.contract import allocate_flat_caches
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.step import contiguous_meta
from dayzero.plugins import registry
from tests.helpers import glm5_config_dict, layer_pattern, random_model, tiny_config_dict
from tests.plugins.triton_env import ON_GPU, needs_triton

pytestmark = [needs_triton, pytest.mark.skipif(ON_GPU, reason="the interpreter run is the CPU check"),
              pytest.mark.slow]


def _described(value):
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), tuple(value.stride()), value.dtype
    return value


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _checked(name: str, impls: dict, calls: list, mismatches: list):
    def kernel(*args):
        out = impls["cuda"](*args)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            fake = impls["fake"](*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
        calls.append(name)
        for index, (real, described) in enumerate(zip(_as_tuple(out), _as_tuple(fake))):
            if _described(real) != _described(described):
                mismatches.append((name, index, _described(real), _described(described)))
        return out

    return kernel


@pytest.fixture
def triton_bodies_on_cpu():
    """Dispatch every plugin op on CPU to its Triton body (interpreter), checked against its fake."""
    calls, mismatches = [], []
    for name, op in registry.PLUGIN_OPS.items():
        op.register_kernel("cpu", _checked(name, op.dayzero_impls, calls, mismatches))
    yield calls, mismatches
    for op in registry.PLUGIN_OPS.values():
        op.register_kernel("cpu", op.dayzero_impls["cpu"])


def test_fake_impls_match_the_triton_bodies_over_prefill_and_decode(triton_bodies_on_cpu):
    calls, mismatches = triton_bodies_on_cpu
    # three layers (KDA with the dense MLP, sparse MLA with MoE, KDA with MoE) reach every op of the six
    config = tiny_config_dict(kv_lora_rank=128, num_hidden_layers=3, linear_attn_config=layer_pattern("kmk"))
    model = random_model(config, dtype=torch.bfloat16)
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=4, max_len=128)
    engine = EagerEngine(model, manifest)
    caches = allocate_flat_caches(manifest, 9, 6)
    engine.prefill(torch.randint(0, 200, (12,)), contiguous_meta([0, 0, 0], [5, 4, 3], 3), caches)
    engine.decode(torch.randint(0, 200, (3, 1)), contiguous_meta([5, 4, 3], [1, 1, 1], 3, decode=True), caches)
    assert mismatches == []
    assert {"chunk_kda", "fused_kda_decode", "write_latent", "write_index_keys", "index_topk_paged",
            "sparse_mla_paged", "attnres_mix_norm", "moe_route", "moe_permute", "moe_grouped_mlp", "rms_norm",
            "gated_rms_norm"} <= set(calls)


def test_fake_impls_match_the_triton_bodies_of_a_plain_residual(triton_bodies_on_cpu):
    """Without AttnRes (Kimi-Linear's plain residual) each add runs with the norm after it: one KDA layer, the dense
    MLP."""
    calls, mismatches = triton_bodies_on_cpu
    config = tiny_config_dict(attn_res_block_size=None, num_hidden_layers=1, linear_attn_config=layer_pattern("k"))
    model = random_model(config, dtype=torch.bfloat16)
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=128)
    engine = EagerEngine(model, manifest)
    caches = allocate_flat_caches(manifest, 5, 4)
    engine.prefill(torch.randint(0, 200, (7,)), contiguous_meta([0, 0], [4, 3], 2), caches)
    engine.decode(torch.randint(0, 200, (2, 1)), contiguous_meta([4, 3], [1, 1], 2, decode=True), caches)
    assert mismatches == []
    assert {"add_rms_norm", "rms_norm", "chunk_kda", "fused_kda_decode"} <= set(calls)
    assert not {"attnres_mix", "attnres_mix_norm"} & set(calls)


def test_fake_impls_match_the_triton_bodies_of_glm5_next(triton_bodies_on_cpu):
    """Hyper-connections and pooled index keys (pools of 4, whole in pages: the Top-K kernels' case) over FP8 latent
    and MXFP8 pooled caches, in a prefill and a verify step of two tokens."""
    calls, mismatches = triton_bodies_on_cpu
    config = glm5_config_dict(num_hidden_layers=2, kv_lora_rank=128, index_head_dim=32, index_kpool=4,
                              layer_types=["indexed_attention", "indexed_attention"], indexer_types=["full", "shared"],
                              mlp_layer_types=["sparse", "dense"])
    model = random_model(config, dtype=torch.bfloat16)
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=4, max_len=128,
                              num_draft=1)
    engine = EagerEngine(model, manifest)
    caches = allocate_flat_caches(manifest, 9, 8)
    engine.prefill(torch.randint(0, 200, (17,)), contiguous_meta([0, 0], [9, 8], 3, 2), caches)
    engine.decode(torch.randint(0, 200, (2, 2)), contiguous_meta([9, 8], [2, 2], 3, 2, decode=True), caches)
    assert mismatches == []
    assert {"mhc_pre", "mhc_post", "write_pooled_index_keys_prefill", "write_pooled_index_keys_decode",
            "pooled_index_topk_paged", "sparse_mla_paged"} <= set(calls)
