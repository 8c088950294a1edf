"""The shared expert run as expert E of the routed experts' Triton grouped GEMMs: the route's shared slot, the
grouped GEMM's extra expert (gated and down forms), the fused grouped MLP and ONNX node, and the MoE layer at decode
fused against unfused (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.moe import reference
from dayzero.plugins.moe.activation import activation_args, gated_activation
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = [needs_triton] + ([pytest.mark.gpu] if ON_GPU else [])

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
PARAMS = {"silu": {}, "situ": {"beta": 4.0, "linear_beta": 25.0}, "clamped_silu": {"limit": 0.9}}


def _weights(experts, rows, cols, dtype):
    return (torch.randn(experts, rows, cols, device=DEVICE) / cols ** 0.5).to(dtype)


def _sorted_rows(tokens, experts, top_k, dim, dtype):
    """x sorted over experts 0..E (E: the shared expert, one row a token) and expert_offsets [E+2]."""
    _, ids = reference.route(torch.randn(tokens, experts, device=DEVICE), None, top_k, shared_slot=True)
    x = torch.randn(tokens, dim, device=DEVICE).to(dtype)
    x_sorted, _, _, offsets = reference.permute(x, ids, experts + 1)
    return x_sorted, offsets


@pytest.mark.parametrize("tokens, experts, top_k, num_groups, topk_group, activation", sizes(
    cpu=[(1, 8, 2, 1, 1, "sigmoid"), (3, 12, 3, 4, 2, "softmax"), (17, 7, 7, 1, 1, "sigmoid")],
    gpu=[(1, 256, 8, 1, 1, "sigmoid"), (17, 256, 8, 8, 4, "sigmoid"), (333, 160, 6, 1, 1, "softmax")],
))
def test_route_shared_slot_appends_expert_e_with_weight_one(tokens, experts, top_k, num_groups, topk_group,
                                                            activation):
    from dayzero.plugins.moe.route_kernel import route_launcher

    logits = torch.randn(tokens, experts, device=DEVICE) * 2
    bias = torch.randn(experts, device=DEVICE) * 0.5
    args = (top_k, num_groups, topk_group, True, 2.5, activation)
    out = (poisoned(tokens, top_k + 1), torch.full((tokens, top_k + 1), -7, dtype=torch.int64, device=DEVICE))
    weights, ids = route_launcher(logits, bias, *args, out=out, shared_slot=True)
    expected_weights, expected_ids = reference.route(logits, bias, *args, shared_slot=True)
    plain_weights, plain_ids = reference.route(logits, bias, *args)
    assert torch.equal(expected_ids[:, :top_k], plain_ids) and torch.equal(expected_weights[:, :top_k], plain_weights)
    assert (expected_ids[:, -1] == experts).all() and (expected_weights[:, -1] == 1.0).all()
    assert torch.equal(ids, expected_ids)
    assert rel_err(weights, expected_weights) < 1e-6


def _expected_gated(x_sorted, offsets, bank, up_bank, activation, params):
    out = torch.zeros(x_sorted.shape[0], bank.shape[1], dtype=x_sorted.dtype, device=x_sorted.device)
    bounds = offsets.tolist()
    for e, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        rows = x_sorted[start:end]
        gate, up = rows @ bank[e].t(), rows @ up_bank[e].t()
        out[start:end] = gated_activation(gate, up, activation, **params).to(x_sorted.dtype)
    return out


def _expected_down(x_sorted, offsets, bank):
    out = torch.zeros(x_sorted.shape[0], bank.shape[1], dtype=x_sorted.dtype, device=x_sorted.device)
    bounds = offsets.tolist()
    for e, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        out[start:end] = x_sorted[start:end] @ bank[e].t()
    return out


GEMM_SIZES = sizes(
    cpu=[(1, 5, 2, 40, 24, torch.float32, "silu"), (3, 6, 3, 17, 9, torch.float32, "situ"),
         (17, 4, 4, 32, 20, torch.bfloat16, "clamped_silu"), (7, 3, 1, 24, 33, torch.float32, "silu")],
    gpu=[(1, 256, 8, 2304, 1024, torch.bfloat16, "silu"), (17, 256, 8, 2304, 1024, torch.bfloat16, "situ"),
         (64, 64, 8, 1000, 333, torch.float32, "clamped_silu"), (3, 7, 3, 33, 17, torch.float32, "silu")],
)


@pytest.mark.parametrize("tokens, experts, top_k, dim, inter, dtype, activation", GEMM_SIZES)
def test_grouped_gemm_extra_expert_gated_and_down_forms(tokens, experts, top_k, dim, inter, dtype, activation):
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    x_sorted, offsets = _sorted_rows(tokens, experts, top_k, dim, dtype)
    w1, w3, w2 = _weights(experts, inter, dim, dtype), _weights(experts, inter, dim, dtype), _weights(
        experts, dim, inter, dtype)
    # the shared expert's gate and up as the row halves of one stacked projection, as GatedMLP holds them
    gate_up = _weights(1, 2 * inter, dim, dtype)[0]
    shared_w1, shared_w3 = gate_up.chunk(2)
    shared_w2 = _weights(1, dim, inter, dtype)[0]
    params = PARAMS[activation]
    beta, linear_beta = activation_args(activation, params)
    h = grouped_gemm_launcher(x_sorted, w1, offsets, w3, activation, beta, linear_beta,
                              out=poisoned(x_sorted.shape[0], inter, dtype=dtype), b_extra=shared_w1,
                              b_up_extra=shared_w3)
    expected_h = _expected_gated(x_sorted, offsets, torch.cat([w1, shared_w1[None]]),
                                 torch.cat([w3, shared_w3[None]]), activation, params)
    assert rel_err(h, expected_h) < TOLERANCE[dtype]
    y = grouped_gemm_launcher(expected_h, w2, offsets, out=poisoned(x_sorted.shape[0], dim, dtype=dtype),
                              b_extra=shared_w2)
    assert rel_err(y, _expected_down(expected_h, offsets, torch.cat([w2, shared_w2[None]]))) < TOLERANCE[dtype]


@pytest.mark.parametrize("tokens, experts, top_k, dim, inter, dtype, activation", GEMM_SIZES)
def test_grouped_mlp_shared_matches_reference(tokens, experts, top_k, dim, inter, dtype, activation):
    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_shared_triton

    x_sorted, offsets = _sorted_rows(tokens, experts, top_k, dim, dtype)
    bank = (_weights(experts, inter, dim, dtype), _weights(experts, inter, dim, dtype),
            _weights(experts, dim, inter, dtype))
    shared = (_weights(1, inter, dim, dtype)[0], _weights(1, inter, dim, dtype)[0], _weights(1, dim, inter, dtype)[0])
    params = PARAMS[activation]
    got = grouped_mlp_shared_triton(x_sorted, offsets, *bank, *shared, activation,
                                    *activation_args(activation, params))
    expected = reference.grouped_mlp_shared(x_sorted, offsets, *bank, *shared, activation, **params)
    assert rel_err(got, expected) < TOLERANCE[dtype]


def _moe_layer(experts, top_k, dim, inter, dtype, **cfg):
    from dayzero.model.config import MoEConfig
    from dayzero.model.moe import MoE

    settings = dict(num_experts=experts, top_k=top_k, intermediate_size=inter, num_shared_experts=1) | cfg
    layer = MoE(dim, MoEConfig(**settings), 1e-6, "silu", {}).to(device=DEVICE, dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return layer


@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_moe_layer_at_decode_fused_equals_unfused(tokens, monkeypatch):
    from dayzero.model.moe import MoE

    layer = _moe_layer(9, 3, 40, 24, torch.float32)
    x = torch.randn(tokens, 40, device=DEVICE)
    assert layer._fuses_shared(x, decode=True) and not layer._fuses_shared(x, decode=False)
    fused = layer(x, decode=True)
    monkeypatch.setattr(MoE, "_fuses_shared", lambda self, x, decode: False)
    assert rel_err(fused, layer(x, decode=True)) < 1e-6


def test_moe_layer_fuses_from_stacked_gate_up_rows(monkeypatch):
    from dayzero.model.moe import MoE

    layer = _moe_layer(6, 2, 24, 16, torch.float32)
    mlp = layer.shared_experts
    mlp.gate_up_proj = torch.nn.Linear(24, 32, bias=False, device=DEVICE)
    with torch.no_grad():
        mlp.gate_up_proj.weight.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
    del mlp.gate_proj, mlp.up_proj
    x = torch.randn(5, 24, device=DEVICE)
    fused = layer(x, decode=True)
    monkeypatch.setattr(MoE, "_fuses_shared", lambda self, x, decode: False)
    assert rel_err(fused, layer(x, decode=True)) < 1e-6


@pytest.mark.parametrize("cfg", [dict(shared_expert_gate=True), dict(shared_intermediate_size=32),
                                 dict(num_shared_experts=0), dict(latent_size=16)])
def test_moe_layer_keeps_the_separate_shared_expert_where_fusing_is_not_exact(cfg):
    layer = _moe_layer(6, 2, 24, 16, torch.float32, **cfg)
    assert not layer._fuses_shared(torch.randn(3, 24, device=DEVICE), decode=True)


def test_moe_layer_keeps_the_separate_shared_expert_across_ranks():
    layer = _moe_layer(6, 2, 24, 16, torch.float32)
    layer.tp_group = "tp"
    assert not layer._fuses_shared(torch.randn(3, 24, device=DEVICE), decode=True)
    layer.tp_group, layer.first_expert = None, 0
    assert not layer._fuses_shared(torch.randn(3, 24, device=DEVICE), decode=True)


def test_fused_shared_expert_exports_as_onnx_nodes_that_onnx_runtime_runs(tmp_path):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort
    from dayzero.plugins import moe
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    class Layer(torch.nn.Module):
        def forward(self, x, logits, w1, w3, w2, s1, s3, s2):
            weights, ids = moe.route(logits, None, 2, shared_slot=True)
            return moe.moe_experts_with_shared(x, weights, ids, w1, w3, w2, s1, s3, s2, "silu")

    bank = [_weights(4, 6, 8, torch.float32).cpu(), _weights(4, 6, 8, torch.float32).cpu(),
            _weights(4, 8, 6, torch.float32).cpu()]
    args = (torch.randn(5, 8), torch.randn(5, 4), *bank, bank[0][0] + 1, bank[1][0] - 1, bank[2][0] * 2)
    program = torch.onnx.export(Layer().eval(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS)
    custom = [n.op_type for n in program.model_proto.graph.node if n.domain == ONNX_DOMAIN]
    assert custom == ["MoeRoute", "MoePermute", "MoeGroupedMlpShared", "MoeUnpermute"]
    path = tmp_path / "shared.onnx"
    program.save(path)
    session = onnx_ort.session(path)
    (got,) = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
    assert rel_err(torch.from_numpy(got), Layer()(*args)) < 1e-6


def test_fake_impls_give_the_triton_bodies_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_shared_triton
    from dayzero.plugins.moe.op import _grouped_mlp_shared_fake, _route_fake
    from dayzero.plugins.moe.route_kernel import route_launcher

    x_sorted, offsets = _sorted_rows(3, 5, 2, 17, torch.float32)
    weights = (_weights(5, 9, 17, torch.float32), _weights(5, 9, 17, torch.float32), _weights(5, 17, 9, torch.float32),
               _weights(1, 9, 17, torch.float32)[0], _weights(1, 9, 17, torch.float32)[0],
               _weights(1, 17, 9, torch.float32)[0])
    logits = torch.randn(3, 5, device=DEVICE)
    real = [grouped_mlp_shared_triton(x_sorted, offsets, *weights, "silu", 1.0, None),
            *route_launcher(logits, None, 2, shared_slot=True)]
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        args = [mode.from_tensor(t) for t in (x_sorted, offsets, *weights)]
        fake = [_grouped_mlp_shared_fake(*args, "silu", 1.0, None),
                *_route_fake(mode.from_tensor(logits), None, 2, 1, 1, True, 1.0, "sigmoid", True)]
    assert [(t.shape, t.stride(), t.dtype) for t in fake] == [(t.shape, t.stride(), t.dtype) for t in real]
