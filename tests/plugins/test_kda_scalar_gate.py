"""The KDA kernels with a per-head gate (g [.., H]) and grouped value heads (q, k on Hk < H key heads), gated
DeltaNet's form, against the reference: chunked prefill, the state-pool decodes (one-tile and pipelined), the
context-parallel summary and the fused gated DeltaNet decode step (interpreter on CPU, native on GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err
from tests.plugins.test_kda_recurrent_kernel import (
    TOLERANCE,
    assert_registered_pool_op_matches,
    check_pool,
    pool_slots,
)
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

pytestmark = needs_triton


def gate(shape, heads, dim_k, per_head):
    """A log-space gate [*shape, H] (per head) or [*shape, H, K] (per channel), mild enough to keep some memory."""
    width = (heads,) if per_head else (heads, dim_k)
    return R.gdn_gate(torch.randn(*shape, *width), torch.randn(width[-1]) * 0.5 - 1, torch.randn(width[-1]))


def varlen_inputs(lengths, Hk, H, K, V, dtype, per_head=True):
    T = sum(lengths)
    q, k, v = torch.randn(T, Hk, K).to(dtype), torch.randn(T, Hk, K).to(dtype), torch.randn(T, H, V).to(dtype)
    return q, k, v, gate((T,), H, K, per_head), torch.rand(T, H).to(dtype), torch.tensor([0, *lengths]).cumsum(0).int()


# ---- chunked prefill


BF16, FP32 = torch.bfloat16, torch.float32


@pytest.mark.parametrize("lengths, Hk, H, K, V, per_head, dtype, initial", sizes(
    cpu=[((70,), 1, 2, 16, 32, True, FP32, True), ((5, 64, 1), 1, 3, 16, 16, True, BF16, True),
         ((67,), 1, 2, 32, 16, False, FP32, True), ((33, 0, 1, 100), 2, 2, 32, 16, True, FP32, False),
         ((1, 70, 9), 2, 4, 16, 32, True, BF16, False), ((130, 1), 2, 4, 32, 16, True, FP32, True)],
    gpu=[((8192,), 16, 32, 128, 128, True, BF16, True), ((8192,), 16, 32, 128, 128, True, FP32, True),
         ((1000, 77, 4096, 1), 4, 12, 128, 128, True, BF16, True), ((333,), 16, 32, 64, 128, False, BF16, True),
         ((1000, 77, 1, 333), 16, 16, 128, 64, True, BF16, False), ((8191, 1), 16, 32, 128, 128, True, BF16, False)],
))
def test_chunk_matches_reference(lengths, Hk, H, K, V, per_head, dtype, initial):
    """Per-head gates at odd sizes: partial last chunks, sequences of one and of no token, Hv = Hk and Hv a multiple
    of Hk, K != V, with and without initial states."""
    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

    q, k, v, g, beta, cu = varlen_inputs(lengths, Hk, H, K, V, dtype, per_head)
    S0 = torch.randn(len(lengths), H, K, V) if initial else None
    on_device = None if S0 is None else S0.to(DEVICE)
    ref_o, ref_s = R.chunk_kda(*(x.float()[None].to(DEVICE) for x in (q, k, v, g, beta)),
                               initial_state=on_device, output_final_state=True, use_qk_l2norm_in_kernel=True,
                               cu_seqlens=cu.to(DEVICE))
    out, final = poisoned(sum(lengths), H, V, dtype=dtype), poisoned(len(lengths), H, K, V)
    dev = [x.to(DEVICE) for x in (q, k, v, g, beta)]
    chunk_kda_launcher(*dev, K ** -0.5, on_device, cu.to(DEVICE), True, True, out=out, final_out=final)
    tol = 2e-2 if dtype == torch.bfloat16 else (5e-3 if ON_GPU else 1e-5)
    assert rel_err(out.float().cpu(), ref_o[0].cpu()) < tol
    assert rel_err(final.cpu(), ref_s.cpu()) < tol


@pytest.mark.parametrize("decay_scale", [30.0, 300.0])
def test_chunk_strong_per_head_decay(decay_scale):
    """Per-head decays of tens to hundreds of nats a token: the pairwise decays underflow, never overflow."""
    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

    q, k, v, _, beta, cu = varlen_inputs((70, 3), 1, 2, 16, 16, torch.float32)
    g = -torch.rand(73, 2) * decay_scale
    ref_o, ref_s = R.chunk_kda(*(x[None] for x in (q, k, v, g, beta)), output_final_state=True,
                               use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o, s = chunk_kda_launcher(*(x.to(DEVICE) for x in (q, k, v, g, beta)), 0.25, None, cu.to(DEVICE), True, True)
    assert rel_err(o.cpu(), ref_o[0]) < (1e-5 if not ON_GPU else 5e-3)
    assert rel_err(s.cpu(), ref_s) < (1e-5 if not ON_GPU else 5e-3)


def test_chunk_unwritten_intermediates_never_reach_the_output(monkeypatch):
    """Every intermediate buffer starts as NaN: the per-head decay and chunk-decay buffers are read only where
    written."""
    real_empty = torch.empty

    def nan_empty(*shape, **kwargs):
        out = real_empty(*shape, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty", nan_empty)
    test_chunk_matches_reference((70, 5), 1, 2, 16, 16, True, torch.float32, True)


def test_chunk_op_wrapper_takes_batched_grouped_inputs():
    """The reference-signature wrapper over the registered op: [B, T, ..] inputs, no varlen, zero initial state."""
    from dayzero.plugins.kda import chunk_kda

    B, T, Hk, H, K, V = 2, 37, 1, 3, 16, 16
    q, k = torch.randn(B, T, Hk, K), torch.randn(B, T, Hk, K)
    v, g, beta = torch.randn(B, T, H, V), gate((B, T), H, K, True), torch.rand(B, T, H)
    ref_o, ref_s = R.chunk_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, s = chunk_kda(*(x.to(DEVICE) for x in (q, k, v, g, beta)), output_final_state=True,
                     use_qk_l2norm_in_kernel=True)
    assert o.shape == (B, T, H, V) and s.shape == (B, H, K, V)
    assert rel_err(o.cpu(), ref_o) < (1e-5 if not ON_GPU else 5e-3)
    assert rel_err(s.cpu(), ref_s) < (1e-5 if not ON_GPU else 5e-3)


# ---- state-pool decode


def pool_inputs(B, L, Hk, H, K, V, dtype, per_head, strided):
    """Recurrence inputs on DEVICE; with `strided`, q, k, v are views of one projection row per token
    [B, L, 2*Hk*K + H*V] (what a model with a fused input projection passes)."""
    if strided:
        x = torch.randn(B, L, 2 * Hk * K + H * V).to(device=DEVICE, dtype=dtype)
        q, k, v = x.split([Hk * K, Hk * K, H * V], dim=-1)
        q, k, v = q.unflatten(-1, (Hk, K)), k.unflatten(-1, (Hk, K)), v.unflatten(-1, (H, V))
    else:
        q, k = (torch.randn(B, L, Hk, K).to(device=DEVICE, dtype=dtype) for _ in range(2))
        v = torch.randn(B, L, H, V).to(device=DEVICE, dtype=dtype)
    return q, k, v, gate((B, L), H, K, per_head).to(DEVICE), torch.rand(B, L, H).to(DEVICE)


def run_pool(B, L, Hk, H, K, V, dtype, per_head=True, strided=False, block_v=None):
    from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

    q, k, v, g, beta = pool_inputs(B, L, Hk, H, K, V, dtype, per_head, strided)
    num_slots = B * L + 3
    state = torch.randn(num_slots, H, K, V)
    slots, num_accepted = pool_slots(B, L, num_slots)
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(*(x.cpu() for x in (q, k, v, g, beta)), expected, slots, num_accepted,
                                 use_qk_l2norm_in_kernel=True)
    got, out = state.to(DEVICE), poisoned(B, L, H, V, dtype=dtype)
    recurrent_kda_pool_launcher(q, k, v, g, beta, got, slots.to(DEVICE), num_accepted.to(DEVICE),
                                use_qk_l2norm_in_kernel=True, out=out, block_v=block_v)
    out_tol, state_tol = TOLERANCE[dtype]
    assert rel_err(out.cpu(), o_ref) < out_tol
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(o_ref[slots[:, 0] < 0]))
    check_pool(got, expected, state, slots, state_tol)


@pytest.mark.parametrize("B, L, Hk, H, K, V, dtype, per_head, strided", sizes(
    cpu=[(3, 3, 1, 2, 16, 32, torch.bfloat16, True, False), (4, 5, 1, 3, 16, 16, torch.float32, True, True),
         (2, 2, 2, 4, 32, 16, torch.float32, False, False)],
    gpu=[(33, 4, 16, 32, 128, 128, torch.bfloat16, True, True), (64, 1, 16, 32, 128, 128, torch.bfloat16, True, True),
         (7, 5, 2, 6, 64, 128, torch.float32, False, False)],
))
def test_pool_matches_reference(B, L, Hk, H, K, V, dtype, per_head, strided):
    run_pool(B, L, Hk, H, K, V, dtype, per_head, strided, block_v=32 if V >= 32 else 16)


@pytest.mark.parametrize("B, Hk, H, K, V, dtype", sizes(
    cpu=[(7, 1, 2, 16, 32, torch.bfloat16), (5, 1, 3, 32, 16, torch.float32)],
    gpu=[(1, 16, 32, 128, 128, torch.bfloat16), (16, 16, 32, 128, 128, torch.bfloat16)],
))
def test_pipelined_pool_step_matches_reference(B, Hk, H, K, V, dtype, monkeypatch):
    """One token a row on 16-wide V blocks runs the pipelined kernel."""
    from dayzero.plugins.kda import recurrent_kernel
    from tests.plugins.test_kda_recurrent_kernel import CountedLaunches

    pipelined = CountedLaunches(recurrent_kernel.pipelined_kda_pool_kernel)
    monkeypatch.setattr(recurrent_kernel, "pipelined_kda_pool_kernel", pipelined)
    run_pool(B, 1, Hk, H, K, V, dtype, block_v=16)
    assert pipelined.launches == 1


def test_pool_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda.recurrent_op import recurrent_kda_pool

    q, k, v, g, beta = (x.cpu() for x in pool_inputs(2, 2, 1, 2, 8, 4, torch.float32, True, False))
    state = torch.randn(5, 2, 8, 4)
    slots, accepted = torch.tensor([[0, 1], [-1, -1]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32)
    expected = state.clone()
    o_ref = R.recurrent_kda_pool(q, k, v, g, beta, expected, slots, accepted)
    o = recurrent_kda_pool(q, k, v, g, beta, state, slots, accepted)
    assert torch.equal(o, o_ref) and torch.equal(state, expected)


# ---- context-parallel summary


@pytest.mark.parametrize("lengths, Hk, H, K, V", sizes(
    cpu=[((70, 5), 1, 2, 16, 16), ((20,), 1, 3, 16, 32)],
    gpu=[((4096, 1000), 16, 32, 128, 128), ((777,), 4, 12, 64, 128)],
))
def test_summary_matches_reference(lengths, Hk, H, K, V):
    """K + V a chunk width (one launch on [0 | v]) and not (two launches)."""
    from dayzero.plugins.kda.summary_op import kda_summary_launcher

    _, k, v, g, beta, cu = varlen_inputs(lengths, Hk, H, K, V, torch.float32)
    # M holds a sequence's whole decay: keep it in fp32's normal range, where the GPU's flush of subnormals to zero
    # and the CPU's reference agree (an e^-200 decay would compare rounding noise near 1e-38)
    g = g * min(1.0, 40 / max(lengths))
    M_ref, B_ref = R.kda_summary(*(x[None].to(DEVICE) for x in (k, v, g, beta)), use_qk_l2norm_in_kernel=True,
                                 cu_seqlens=cu.to(DEVICE))
    final = poisoned(len(lengths), H, K, K + V)
    M, B = kda_summary_launcher(*(x.to(DEVICE) for x in (k, v, g, beta)), cu.to(DEVICE), True, final_out=final)
    # the GPU's TF32 dots: 5.5e-3 on an H100 over the 777-token sequence at K 64
    tol = 1e-4 if not ON_GPU else 1e-2
    assert rel_err(M.cpu(), M_ref.cpu()) < tol and rel_err(B.cpu(), B_ref.cpu()) < tol
    assert torch.equal(final.cpu(), torch.cat([M, B], dim=-1).cpu())


def test_summary_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda import kda_summary

    _, k, v, g, beta, cu = varlen_inputs((9, 4), 1, 2, 8, 4, torch.float32)
    M, B = kda_summary(k[None], v[None], g[None], beta[None], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    M_ref, B_ref = R.kda_summary(k[None], v[None], g[None], beta[None], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert torch.equal(M, M_ref) and torch.equal(B, B_ref)


# ---- fused gated DeltaNet decode step


def gdn_decode_inputs(B, L, Hk, H, K, V, W, dtype, num_slots):
    C = 2 * Hk * K + H * V
    return dict(
        qkv=torch.randn(B, L, C).to(dtype), conv_weight=(torch.randn(1, C, W) / W).to(dtype),
        conv_state=torch.randn(num_slots, 1, W - 1, C).to(dtype), a=torch.randn(B, L, H).to(dtype),
        A_log=torch.randn(H) * 0.5, dt_bias=torch.randn(H), b=torch.randn(B, L, H).to(dtype),
        state=torch.randn(num_slots, H, K, V),
    )


@pytest.mark.parametrize("B, L, Hk, H, K, V, W, dtype", sizes(
    cpu=[(3, 3, 1, 2, 16, 32, 4, torch.bfloat16), (4, 2, 1, 3, 16, 16, 4, torch.float32),
         (2, 1, 2, 4, 32, 16, 3, torch.float32), (3, 3, 1, 3, 16, 128, 4, torch.bfloat16)],
    gpu=[(1, 1, 16, 32, 128, 128, 4, torch.bfloat16), (64, 1, 16, 32, 128, 128, 4, torch.bfloat16),
         (33, 4, 16, 32, 128, 128, 4, torch.bfloat16), (5, 3, 2, 6, 64, 128, 2, torch.float32)],
))
def test_fused_gdn_decode_matches_reference(B, L, Hk, H, K, V, W, dtype):
    from dayzero.plugins.kda.gdn_decode_kernel import fused_gdn_decode_launcher

    num_slots = B * L + 3
    inputs = gdn_decode_inputs(B, L, Hk, H, K, V, W, dtype, num_slots)
    slots, num_accepted = pool_slots(B, L, num_slots)
    expected = {name: inputs[name].clone() for name in ("conv_state", "state")}
    o_ref = R.fused_gdn_decode_reference(**{**inputs, **expected}, state_slots=slots, num_accepted=num_accepted)
    got = {name: x.to(DEVICE) for name, x in inputs.items()}
    out = poisoned(B, L, H, V, dtype=dtype)
    fused_gdn_decode_launcher(**got, state_slots=slots.to(DEVICE), num_accepted=num_accepted.to(DEVICE), out=out)
    out_tol, state_tol = TOLERANCE[dtype]
    assert rel_err(out.cpu(), o_ref) < out_tol
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(o_ref[slots[:, 0] < 0]))
    check_pool(got["state"], expected["state"], inputs["state"], slots, state_tol)
    # the windows are copies of pre-conv rows: exact
    assert torch.equal(got["conv_state"].cpu(), expected["conv_state"])


@pytest.mark.parametrize("B, L", [(3, 2), (4, 1)])
def test_fused_gdn_decode_reads_views_of_the_fused_projection(B, L):
    """qkv, a and b as slices of one [B * L, N] projection output (GatedDeltaNet's in_proj): no copies, same
    result."""
    from dayzero.plugins.kda.gdn_decode_kernel import fused_gdn_decode_launcher

    Hk, H, K, V, W = 1, 2, 16, 32, 4
    C, num_slots = 2 * Hk * K + H * V, B * L + 3
    inputs = gdn_decode_inputs(B, L, Hk, H, K, V, W, torch.float32, num_slots)
    slots, num_accepted = pool_slots(B, L, num_slots)
    projection = torch.randn(B * L, C + 2 * H + 7).to(DEVICE)
    columns = {"qkv": (1, C), "b": (C + 3, H), "a": (C + 3 + H + 2, H)}
    views = {}
    for name, (start, width) in columns.items():
        projection[:, start : start + width] = inputs[name].reshape(B * L, width).to(DEVICE)
        views[name] = projection[:, start : start + width].view(B, L, width)
    assert not any(v.is_contiguous() for v in views.values())
    results = []
    for given in ({}, views):
        got = {name: x.to(DEVICE, copy=True) for name, x in inputs.items()}
        out = poisoned(B, L, H, V, dtype=torch.float32)
        fused_gdn_decode_launcher(**{**got, **given}, state_slots=slots.to(DEVICE),
                                  num_accepted=num_accepted.to(DEVICE), out=out)
        results.append((out.cpu(), got["state"].cpu(), got["conv_state"].cpu()))
    for contiguous, viewed in zip(*results):
        assert torch.equal(contiguous, viewed)


def test_fused_gdn_decode_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda import fused_gdn_decode

    inputs = gdn_decode_inputs(2, 2, 1, 2, 8, 4, 4, torch.float32, 5)
    slots, accepted = torch.tensor([[0, 1], [-1, -1]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32)
    expected = {name: inputs[name].clone() for name in ("conv_state", "state")}
    o_ref = R.fused_gdn_decode_reference(**{**inputs, **expected}, state_slots=slots, num_accepted=accepted)
    o = fused_gdn_decode(**inputs, state_slots=slots, num_accepted=accepted)
    assert torch.equal(o, o_ref)
    assert torch.equal(inputs["state"], expected["state"]) and torch.equal(inputs["conv_state"], expected["conv_state"])


def described(out) -> list:
    return [(tuple(x.shape), tuple(x.stride()), x.dtype) for x in (out if isinstance(out, tuple) else (out,))]


def test_fakes_match_the_triton_bodies():
    """Each op's fake describes what its Triton body returns (shapes, strides, dtypes) for grouped heads and
    per-head gates: AOTInductor plans the code around a body from its fake."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dayzero.plugins.kda.chunk_op import chunk_kda_op
    from dayzero.plugins.kda.recurrent_op import fused_gdn_decode_op, recurrent_kda_pool_op
    from dayzero.plugins.kda.summary_op import kda_summary_op

    q, k, v, g, beta, cu = (x.to(DEVICE) for x in varlen_inputs((9, 4), 1, 2, 16, 32, torch.float32))
    pool = [x.to(DEVICE) for x in pool_inputs(2, 1, 1, 2, 16, 32, torch.float32, True, False)]
    slots, accepted = torch.tensor([[0], [1]], dtype=torch.int32, device=DEVICE), torch.ones(2, dtype=torch.int32,
                                                                                             device=DEVICE)
    decode = {n: x.to(DEVICE) for n, x in gdn_decode_inputs(2, 1, 1, 2, 16, 32, 4, torch.bfloat16, 3).items()}
    calls = [(chunk_kda_op, (q, k, v, g, beta, 0.3, None, cu, True, True)),
             (kda_summary_op, (k, v, g, beta, cu, True)),
             (recurrent_kda_pool_op, (*pool, torch.randn(3, 2, 16, 32, device=DEVICE), slots, accepted, 0.3, True)),
             (fused_gdn_decode_op, (*decode.values(), slots, accepted, 0.3))]
    for op, args in calls:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            fake = op.dayzero_impls["fake"](*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
        assert described(op.dayzero_impls["cuda"](*args)) == described(fake), op


def test_onnx_runtime_kernel_returns_updated_copies_of_the_pools():
    """The ONNX Runtime (CPU) kernel of the fused_gdn_decode node: the reference's output and pools, inputs kept."""
    from dayzero.export import onnx_ort

    inputs = gdn_decode_inputs(2, 2, 1, 2, 8, 4, 4, torch.float32, 5)
    slots, accepted = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), torch.tensor([2, 1], dtype=torch.int32)
    pools = ("conv_state", "state")
    original, expected = ({name: inputs[name].clone() for name in pools} for _ in range(2))
    o, conv_state, state = onnx_ort.KERNELS["fused_gdn_decode"](*inputs.values(), slots, accepted, scale=0.3)
    o_ref = R.fused_gdn_decode_reference(**{**inputs, **expected}, state_slots=slots, num_accepted=accepted, scale=0.3)
    assert torch.equal(o, o_ref)
    assert torch.equal(state, expected["state"]) and torch.equal(conv_state, expected["conv_state"])
    assert all(torch.equal(inputs[name], original[name]) for name in pools)


def _gdn_steps(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four fused gated DeltaNet decode steps of the same rows on one pool, captured in a CUDA graph."""
    from dayzero.plugins.kda.gdn_decode_kernel import fused_gdn_decode_launcher
    from tests.plugins.test_dependent_launch import _graph_of

    torch.manual_seed(1)
    steps, num_slots = 4, 2 * batch
    inputs = {name: x.cuda() for name, x in gdn_decode_inputs(batch, steps, 16, 32, 128, 128, 4, torch.bfloat16,
                                                                 num_slots).items()}
    pools = {name: inputs[name] for name in ("conv_state", "state")}
    start = {name: x.clone() for name, x in pools.items()}
    slots = torch.randperm(num_slots)[:batch].to(torch.int32).view(batch, 1).cuda()
    accepted = torch.ones(batch, dtype=torch.int32, device="cuda")
    params = {name: inputs[name] for name in ("conv_weight", "A_log", "dt_bias")}
    per_step = [{name: inputs[name][:, t:t + 1].contiguous() for name in ("qkv", "a", "b")} for t in range(steps)]
    out = torch.empty(steps, batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)

    def step():
        for t in range(steps):
            fused_gdn_decode_launcher(**per_step[t], **params, **pools, state_slots=slots, num_accepted=accepted,
                                      out=out[t])

    graph = _graph_of(step)
    for name, x in pools.items():
        x.copy_(start[name])
    graph.replay()
    torch.cuda.synchronize()
    return out, pools["state"]


@pytest.mark.parametrize("batch", [pytest.param(b, marks=gpu_only) for b in (1, 64)])
def test_fused_gdn_decode_steps_with_pdl_match_plain_launches(batch, monkeypatch):
    from dayzero.plugins import dependent_launch
    from tests.plugins.test_dependent_launch import _pdl_taken

    _pdl_taken(monkeypatch, dependent_launch.EARLY)
    with_pdl = _gdn_steps(batch)
    _pdl_taken(monkeypatch, dependent_launch.OFF)
    without = _gdn_steps(batch)
    assert torch.equal(with_pdl[0], without[0]) and torch.equal(with_pdl[1], without[1])


def test_fused_gdn_decode_onnx_emits_one_dayzero_node():
    pytest.importorskip("onnxscript")
    building = pytest.importorskip("torch.onnx._internal.exporter._building")
    import onnxscript
    from onnxscript import ir

    from dayzero.plugins.kda.recurrent_op import fused_gdn_decode_onnx

    x = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT)) for i in range(10)]
    recorder = building.OpRecorder(onnxscript.values.Opset("", 18), {})
    with onnxscript.evaluator.default_as(recorder):
        outputs = fused_gdn_decode_onnx(*x, 0.1)
    (node,) = recorder.nodes
    assert (node.domain, node.op_type, len(node.inputs), len(outputs)) == ("dayzero", "fused_gdn_decode", 10, 3)


@pytest.mark.parametrize("per_head", [pytest.param(p, marks=gpu_only) for p in (True, False)])
def test_registered_ops_run_the_kernels_on_gpu(per_head):
    """The triton_op path (wrap_triton launches) of the pool, chunk and summary ops on CUDA tensors."""
    from dayzero.plugins.kda import chunk_kda, kda_summary

    B, L, Hk, H, K, V = 5, 3, 4, 8, 128, 128
    slots, num_accepted = pool_slots(B, L, B * L + 2)
    q, k, v, g, beta = pool_inputs(B, L, Hk, H, K, V, torch.bfloat16, per_head, True)
    assert_registered_pool_op_matches(q, k, v, g, beta, slots, num_accepted)
    q, k, v, g, beta = (x.reshape(1, B * L, *x.shape[2:]) for x in (q, k, v, g, beta))
    cu = torch.tensor([0, 4, 15], device="cuda", dtype=torch.int32)
    ro, rs = R.chunk_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o, s = chunk_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert rel_err(o.float(), ro.float()) < 2e-2 and rel_err(s, rs) < 2e-2
    rM, rB = R.kda_summary(k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    M, B_ = kda_summary(k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert rel_err(M, rM) < 2e-2 and rel_err(B_, rB) < 2e-2
