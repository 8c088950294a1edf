"""The Triton KDA decode kernels (state-pool recurrence, fused decode step) vs the reference, on outputs and on
both pools: written slots match, every other slot is untouched, padding rows read and write nothing."""

from __future__ import annotations

import os

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, gpu_only, needs_triton, poisoned, sizes

pytestmark = needs_triton

# the Triton interpreter (3.9) rounds fp32 -> bf16 toward zero, the GPU and torch to nearest even: the fused kernel
# rounds its conv outputs to bf16 like the unfused path, so under the interpreter its states drift by ~1e-3
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# (output, state) relative error
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 3e-3 if INTERPRETED else 1e-4)}


def pool_slots(batch: int, length: int, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct random slots per row, num_accepted in 1..L (both ends present), an unwritten position in each row
    when L > 2 (never the start one) and, for B > 1, a padding row."""
    slots = torch.randperm(num_slots)[: batch * length].view(batch, length).to(torch.int32)
    num_accepted = torch.randint(1, length + 1, (batch,), dtype=torch.int32)
    if batch > 2:
        num_accepted[0], num_accepted[-1] = 1, length
    if length > 2:
        for b in range(batch):
            t = int(num_accepted[b]) % (length - 1) + 1
            if t != int(num_accepted[b]) - 1:
                slots[b, t] = -1
    if batch > 1:
        slots[batch // 2] = -1
    return slots, num_accepted


def written_mask(slots: torch.Tensor, num_slots: int) -> torch.Tensor:
    live = slots[slots[:, 0] >= 0]
    mask = torch.zeros(num_slots, dtype=torch.bool)
    mask[live[live >= 0].long()] = True
    return mask


def check_pool(got: torch.Tensor, expected: torch.Tensor, before: torch.Tensor, slots: torch.Tensor, tol: float):
    written = written_mask(slots, before.shape[0])
    assert torch.equal(got.cpu()[~written], before[~written]), "a slot that is not written changed"
    assert rel_err(got.cpu()[written], expected.cpu()[written]) < tol


def kda_inputs(B, L, H, K, V, dtype, strided):
    """Random recurrence inputs on DEVICE; with `strided`, q/k/v are views of one fused projection [B, L, 3, H, D]
    (what the model passes; made on the device, since copying a view there would make it contiguous)."""
    if strided:
        q, k, v = torch.randn(B, L, 3, H, K).to(device=DEVICE, dtype=dtype).unbind(2)
    else:
        q, k, v = torch.randn(B, L, H, K).to(dtype), torch.randn(B, L, H, K).to(dtype), torch.randn(B, L, H, V)
        v = v.to(dtype)
    g = R.kda_gate(torch.randn(B, L, H, K), torch.randn(H), torch.randn(H * K))
    beta = torch.rand(B, L, H)
    return tuple(x.to(DEVICE) for x in (q, k, v, g, beta))


@pytest.mark.parametrize("B, L, H, K, V, dtype, l2norm, strided", sizes(
    cpu=[(3, 3, 2, 16, 32, torch.bfloat16, True, False), (4, 5, 1, 16, 16, torch.float32, False, False),
         (2, 1, 3, 32, 32, torch.float32, True, True), (1, 2, 2, 16, 64, torch.float32, True, False)],
    gpu=[(1, 1, 32, 128, 128, torch.bfloat16, True, False), (64, 1, 96, 128, 128, torch.bfloat16, True, True),
         (33, 4, 32, 128, 128, torch.bfloat16, True, False), (7, 5, 4, 64, 128, torch.float32, False, False)],
))
def test_recurrent_kda_pool_matches_reference(B, L, H, K, V, dtype, l2norm, strided):
    from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

    if strided and K != V:
        pytest.skip("a fused projection has K == V")
    q, k, v, g, beta = kda_inputs(B, L, H, K, V, dtype, strided)
    num_slots = B * L + 3
    state = torch.randn(num_slots, H, K, V)
    slots, num_accepted = pool_slots(B, L, num_slots)
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(*(x.cpu() for x in (q, k, v, g, beta)), expected, slots, num_accepted,
                                 use_qk_l2norm_in_kernel=l2norm)
    got = state.to(DEVICE)
    out = poisoned(B, L, H, V, dtype=dtype)
    recurrent_kda_pool_launcher(q, k, v, g, beta, got, slots.to(DEVICE), num_accepted.to(DEVICE),
                                use_qk_l2norm_in_kernel=l2norm, out=out)
    out_tol, state_tol = TOLERANCE[dtype]
    assert rel_err(out.cpu(), o_ref) < out_tol
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(o_ref[slots[:, 0] < 0]))
    check_pool(got, expected, state, slots, state_tol)


@pytest.mark.parametrize("block_v", [16, 32])
@pytest.mark.parametrize("B, L, H, K, V", sizes(cpu=[(2, 2, 2, 16, 32)], gpu=[(64, 2, 32, 128, 128)]))
def test_recurrent_kda_pool_block_configs(B, L, H, K, V, block_v):
    # both V block widths the launcher picks (16 for latency-bound calls, 32 from LATENCY_BOUND_PAIRS), on the GPU
    # at the decode shape (K = V = 128)
    from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

    q, k, v, g, beta = kda_inputs(B, L, H, K, V, torch.float32, False)
    state = torch.randn(B * L + 2, H, K, V)
    slots, num_accepted = pool_slots(B, L, state.shape[0])
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(*(x.cpu() for x in (q, k, v, g, beta)), expected, slots, num_accepted, scale=0.3)
    got = state.to(DEVICE)
    o = recurrent_kda_pool_launcher(q, k, v, g, beta, got, slots.to(DEVICE), num_accepted.to(DEVICE), scale=0.3,
                                    block_v=block_v)
    assert rel_err(o.cpu(), o_ref) < 1e-5 and rel_err(got.cpu(), expected) < 1e-5


class CountedLaunches:
    """A kernel whose launches are counted."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("B, H, K, V, dtype", sizes(
    cpu=[(7, 2, 16, 32, torch.bfloat16), (3, 3, 32, 16, torch.float32), (13, 1, 16, 64, torch.float32)],
    gpu=[(31, 32, 128, 128, torch.bfloat16), (7, 96, 128, 128, torch.bfloat16), (7, 4, 64, 128, torch.float32),
         (1, 32, 128, 128, torch.bfloat16)],
))
def test_pipelined_pool_step_matches_reference(B, H, K, V, dtype, monkeypatch):
    # one token a row of a latency-bound call runs the pipelined kernel: programs walking several tiles each (more
    # tiles than programs where the grid is full), a padding row, a start slot that is also the write slot
    from dayzero.plugins.kda import recurrent_kernel
    from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

    pipelined = CountedLaunches(recurrent_kernel.pipelined_kda_pool_kernel)
    monkeypatch.setattr(recurrent_kernel, "pipelined_kda_pool_kernel", pipelined)

    q, k, v, g, beta = kda_inputs(B, 1, H, K, V, dtype, False)
    num_slots = B + 3
    state = torch.randn(num_slots, H, K, V)
    slots, num_accepted = pool_slots(B, 1, num_slots)
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(*(x.cpu() for x in (q, k, v, g, beta)), expected, slots, num_accepted,
                                 use_qk_l2norm_in_kernel=True)
    got = state.to(DEVICE)
    out = poisoned(B, 1, H, V, dtype=dtype)
    recurrent_kda_pool_launcher(q, k, v, g, beta, got, slots.to(DEVICE), num_accepted.to(DEVICE),
                                use_qk_l2norm_in_kernel=True, out=out)
    assert pipelined.launches == 1
    out_tol, state_tol = TOLERANCE[dtype]
    assert rel_err(out.cpu(), o_ref) < out_tol
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(o_ref[slots[:, 0] < 0]))
    check_pool(got, expected, state, slots, state_tol)


def fused_inputs(B, L, H, K, W, dtype, num_slots):
    C = H * K
    return dict(
        qkv=torch.randn(B, L, 3, C).to(dtype), conv_weight=(torch.randn(3, C, W) / W).to(dtype),
        conv_state=torch.randn(num_slots, 3, W - 1, C).to(dtype), z=torch.randn(B, L, H, K).to(dtype),
        A_log=torch.randn(H), dt_bias=torch.randn(C), beta_logits=torch.randn(B, L, H).to(dtype),
        state=torch.randn(num_slots, H, K, K),
    )


@pytest.mark.parametrize("B, L, H, K, W, dtype, lower_bound", sizes(
    cpu=[(3, 3, 2, 16, 4, torch.bfloat16, None), (4, 5, 1, 16, 4, torch.float32, -5.0),
         (2, 1, 2, 32, 3, torch.float32, None), (1, 2, 1, 16, 2, torch.float32, -2.5)],
    gpu=[(1, 1, 32, 128, 4, torch.bfloat16, None), (64, 1, 96, 128, 4, torch.bfloat16, -5.0),
         (33, 4, 32, 128, 4, torch.bfloat16, None), (5, 3, 8, 64, 3, torch.float32, -5.0)],
))
def test_fused_kda_decode_matches_reference(B, L, H, K, W, dtype, lower_bound):
    from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher

    num_slots = B * L + 3
    inputs = fused_inputs(B, L, H, K, W, dtype, num_slots)
    slots, num_accepted = pool_slots(B, L, num_slots)
    expected = {name: inputs[name].clone() for name in ("conv_state", "state")}
    o_ref = R.fused_kda_decode_reference(**{**inputs, **expected}, lower_bound=lower_bound, state_slots=slots,
                                         num_accepted=num_accepted)
    got = {name: x.to(DEVICE) for name, x in inputs.items()}
    out = poisoned(B, L, H, K, dtype=dtype)
    fused_kda_decode_launcher(**got, lower_bound=lower_bound, state_slots=slots.to(DEVICE),
                              num_accepted=num_accepted.to(DEVICE), out=out)
    out_tol, state_tol = TOLERANCE[dtype]
    assert rel_err(out.cpu(), o_ref) < out_tol
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(o_ref[slots[:, 0] < 0]))
    check_pool(got["state"], expected["state"], inputs["state"], slots, state_tol)
    # the windows are copies of pre-conv rows: exact
    assert torch.equal(got["conv_state"].cpu(), expected["conv_state"])


@pytest.mark.parametrize("B, L", [(3, 2), (4, 1), (1, 3)])
def test_fused_kda_decode_reads_views_of_the_fused_projection(B, L):
    """qkv and beta_logits as slices of one [B * L, N] projection output (KDAttention's in_proj): no copies, same
    result."""
    from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher
    from dayzero.plugins.token_rows import has_flat_token_rows

    H, K, W = 2, 16, 4
    C, num_slots = H * K, B * L + 3
    inputs = fused_inputs(B, L, H, K, W, torch.float32, num_slots)
    slots, num_accepted = pool_slots(B, L, num_slots)
    projection = torch.randn(B * L, 3 * C + H + 5).to(DEVICE)
    projection[:, 2 : 2 + 3 * C] = inputs["qkv"].reshape(B * L, 3 * C).to(DEVICE)
    projection[:, 3 * C + 4 : 3 * C + 4 + H] = inputs["beta_logits"].reshape(B * L, H).to(DEVICE)
    views = {"qkv": projection[:, 2 : 2 + 3 * C].view(B, L, 3, C),
             "beta_logits": projection[:, 3 * C + 4 : 3 * C + 4 + H].reshape(B, L, H)}
    assert all(has_flat_token_rows(v) and not v.is_contiguous() for v in views.values())
    results = []
    for given in ({}, views):
        got = {name: x.to(DEVICE, copy=True) for name, x in inputs.items()}
        out = poisoned(B, L, H, K, dtype=torch.float32)
        fused_kda_decode_launcher(**{**got, **given}, lower_bound=None, state_slots=slots.to(DEVICE),
                                  num_accepted=num_accepted.to(DEVICE), out=out)
        results.append((out.cpu(), got["state"].cpu(), got["conv_state"].cpu()))
    for contiguous, viewed in zip(*results):
        assert torch.equal(contiguous, viewed)


def test_fused_decode_equals_unfused_steps():
    """Decoding token by token with the fused kernel follows the composition it replaces."""
    from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher

    B, H, K, W, steps = 2, 2, 16, 4, 3
    inputs = fused_inputs(B, steps, H, K, W, torch.float32, 4)
    slots, num_accepted = torch.tensor([[1], [3]], dtype=torch.int32), torch.ones(B, dtype=torch.int32)
    ref_pools = {name: inputs[name].clone() for name in ("conv_state", "state")}
    got_pools = {name: inputs[name].to(DEVICE) for name in ("conv_state", "state")}
    for t in range(steps):
        step = {name: inputs[name][:, t : t + 1].contiguous() for name in ("qkv", "z", "beta_logits")}
        common = dict(conv_weight=inputs["conv_weight"], A_log=inputs["A_log"], dt_bias=inputs["dt_bias"])
        o_ref = R.fused_kda_decode_reference(**step, **common, **ref_pools, lower_bound=None, state_slots=slots,
                                             num_accepted=num_accepted)
        o = fused_kda_decode_launcher(**{n: x.to(DEVICE) for n, x in {**step, **common}.items()}, **got_pools,
                                      lower_bound=None, state_slots=slots.to(DEVICE),
                                      num_accepted=num_accepted.to(DEVICE))
        assert rel_err(o.cpu(), o_ref) < 1e-5
    assert rel_err(got_pools["state"].cpu(), ref_pools["state"]) < 1e-5


def test_registered_ops_dispatch_to_reference_on_cpu():
    from dayzero.plugins.kda.recurrent_op import fused_kda_decode, recurrent_kda_pool

    B, L, H, K = 2, 2, 2, 8
    q, k, v, g, beta = (x.cpu() for x in kda_inputs(B, L, H, K, K, torch.float32, False))
    state = torch.randn(5, H, K, K)
    slots, num_accepted = torch.tensor([[0, 1], [-1, -1]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32)
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(q, k, v, g, beta, expected, slots, num_accepted, use_qk_l2norm_in_kernel=True)
    o = recurrent_kda_pool(q, k, v, g, beta, state, slots, num_accepted, use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, o_ref) and torch.equal(state, expected)

    inputs = fused_inputs(B, L, H, K, 4, torch.float32, 5)
    expected = {name: inputs[name].clone() for name in ("conv_state", "state")}
    o_ref = R.fused_kda_decode_reference(**{**inputs, **expected}, lower_bound=-5.0, state_slots=slots,
                                         num_accepted=num_accepted)
    o = fused_kda_decode(**inputs, lower_bound=-5.0, state_slots=slots, num_accepted=num_accepted)
    assert torch.equal(o, o_ref)
    assert torch.equal(inputs["state"], expected["state"]) and torch.equal(inputs["conv_state"], expected["conv_state"])


def test_onnx_translations_emit_one_dayzero_node():
    pytest.importorskip("onnxscript")
    building = pytest.importorskip("torch.onnx._internal.exporter._building")
    import onnxscript
    from onnxscript import ir

    from dayzero.plugins.kda.recurrent_op import fused_kda_decode_onnx, recurrent_kda_pool_onnx

    def record(fn, *args, **kwargs):
        recorder = building.OpRecorder(onnxscript.values.Opset("", 18), {})
        with onnxscript.evaluator.default_as(recorder):
            outputs = fn(*args, **kwargs)
        (node,) = recorder.nodes
        return node, outputs

    x = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT)) for i in range(10)]
    node, outputs = record(recurrent_kda_pool_onnx, *x[:8], 0.1, True)
    assert (node.domain, node.op_type, len(node.inputs), len(outputs)) == ("dayzero", "recurrent_kda_pool", 8, 2)
    assert node.attributes["use_qk_l2norm"].value == 1
    for lower_bound in (None, -5.0):
        node, outputs = record(fused_kda_decode_onnx, *x[:6], lower_bound, *x[6:], 0.1)
        assert (node.domain, node.op_type, len(node.inputs), len(outputs)) == ("dayzero", "fused_kda_decode", 10, 3)
        assert ("lower_bound" in node.attributes) == (lower_bound is not None)


def assert_registered_pool_op_matches(q, k, v, g, beta, slots, num_accepted):
    """recurrent_kda_pool through its registered op on CUDA against the reference (q, k L2-normed in the kernel)."""
    from dayzero.plugins.kda.recurrent_op import recurrent_kda_pool

    state = torch.randn(slots.numel() + 2, v.shape[2], k.shape[3], v.shape[3])
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(*(x.cpu() for x in (q, k, v, g, beta)), expected, slots, num_accepted,
                                 use_qk_l2norm_in_kernel=True)
    got = state.cuda()
    o = recurrent_kda_pool(q, k, v, g, beta, got, slots.cuda(), num_accepted.cuda(), use_qk_l2norm_in_kernel=True)
    assert rel_err(o.cpu(), o_ref) < 1e-2 and rel_err(got.cpu(), expected) < 1e-4


@pytest.mark.parametrize("lower_bound", [pytest.param(lb, marks=gpu_only) for lb in (None, -5.0)])
def test_registered_ops_run_the_kernels_on_gpu(lower_bound):
    """The triton_op path (wrap_triton launches) on CUDA tensors, strided q/k/v views included."""
    from dayzero.plugins.kda.recurrent_op import fused_kda_decode

    B, L, H, K = 5, 3, 8, 128
    slots, num_accepted = pool_slots(B, L, B * L + 2)
    q, k, v, g, beta = kda_inputs(B, L, H, K, K, torch.bfloat16, True)
    assert_registered_pool_op_matches(q, k, v, g, beta, slots, num_accepted)

    inputs = fused_inputs(B, L, H, K, 4, torch.bfloat16, B * L + 2)
    expected = {name: inputs[name].clone() for name in ("conv_state", "state")}
    o_ref = R.fused_kda_decode_reference(**{**inputs, **expected}, lower_bound=lower_bound, state_slots=slots,
                                         num_accepted=num_accepted)
    got = {name: x.cuda() for name, x in inputs.items()}
    o = fused_kda_decode(**got, lower_bound=lower_bound, state_slots=slots.cuda(), num_accepted=num_accepted.cuda())
    assert rel_err(o.cpu(), o_ref) < 1e-2 and rel_err(got["state"].cpu(), expected["state"]) < 1e-4
    assert torch.equal(got["conv_state"].cpu(), expected["conv_state"])
