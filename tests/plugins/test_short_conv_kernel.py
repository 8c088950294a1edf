"""The Triton short-conv kernels (varlen prefill, slot-addressed decode) vs the reference: outputs, written windows
(exact: they are copies of pre-conv rows), untouched slots, padding rows and tokens past the last sequence."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.short_conv import reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, gpu_only, needs_triton, poisoned, sizes

pytestmark = needs_triton

TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1e-2}


def conv_inputs(shape, G, C, W, num_slots, dtype):
    return (torch.randn(*shape, G, C).to(dtype), (torch.randn(G, C, W) / W).to(dtype),
            torch.randn(num_slots, G, W - 1, C).to(dtype))


@pytest.mark.parametrize("B, L, G, C, W, dtype, activation", sizes(
    cpu=[(3, 3, 3, 24, 4, torch.bfloat16, "silu"), (4, 1, 3, 16, 4, torch.float32, "silu"),
         (2, 4, 2, 40, 2, torch.float32, "identity"), (1, 2, 3, 8, 5, torch.float32, "silu")],
    gpu=[(256, 1, 3, 4096, 4, torch.bfloat16, "silu"), (64, 4, 3, 12288, 4, torch.bfloat16, "silu"),
         (9, 3, 3, 1000, 3, torch.float32, "identity")],
))
def test_short_conv_decode_matches_reference(B, L, G, C, W, dtype, activation):
    from dayzero.plugins.short_conv.kernel import short_conv_decode_launcher

    num_slots = B * L + 2
    x, weight, conv_state = conv_inputs((B, L), G, C, W, num_slots, dtype)
    slots = torch.randperm(num_slots)[: B * L].view(B, L).to(torch.int32)
    num_accepted = torch.randint(1, L + 1, (B,), dtype=torch.int32)
    if B > 1:
        slots[B // 2] = -1
    if L > 2:
        slots[0, L - 1], num_accepted[0] = -1, 1
    expected = conv_state.clone()
    y_ref = reference.short_conv_decode(x, weight, expected, slots, num_accepted, activation)
    got = conv_state.to(DEVICE)
    out = poisoned(B, L, G, C, dtype=dtype)
    short_conv_decode_launcher(x.to(DEVICE), weight.to(DEVICE), got, slots.to(DEVICE), num_accepted.to(DEVICE),
                               activation, out=out)
    assert rel_err(out.cpu(), y_ref) < TOLERANCE[dtype]
    assert torch.equal(out.cpu()[slots[:, 0] < 0], torch.zeros_like(y_ref[slots[:, 0] < 0]))
    assert torch.equal(got.cpu(), expected)


def varlen(lengths, slots):
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return cu, torch.tensor(slots, dtype=torch.int32)


@pytest.mark.parametrize("lengths, slots, tail, C, W, dtype, block_t", sizes(
    cpu=[([5, 1, 2, 11], [3, 0, 6, -1], 0, 24, 4, torch.float32, 4),
         ([9, 3], [1, 2], 3, 16, 4, torch.bfloat16, 4),
         ([2, 7, 1], [-1, 4, 5], 0, 40, 3, torch.float32, 2),
         ([6], [0], 2, 8, 2, torch.float32, 32)],
    gpu=[([8192], [3], 0, 4096, 4, torch.bfloat16, 32),
         ([1, 2, 700, 3000, 33, 4000], [7, -1, 2, 0, 9, 4], 77, 12288, 4, torch.bfloat16, 32),
         ([5, 300, 1], [1, 2, 3], 0, 1000, 3, torch.float32, 32)],
))
def test_short_conv_prefill_matches_reference(lengths, slots, tail, C, W, dtype, block_t):
    """Varlen sequences with and without history (slot -1), shorter than the window, spanning many chunks, and
    `tail` tokens past the last sequence (zero output)."""
    from dayzero.plugins.short_conv.kernel import short_conv_prefill_launcher

    G, num_slots = 3, 10
    cu_seqlens, slot_ids = varlen(lengths, slots)
    x, weight, conv_state = conv_inputs((int(cu_seqlens[-1]) + tail,), G, C, W, num_slots, dtype)
    expected = conv_state.clone()
    y_ref = reference.short_conv_prefill(x, weight, expected, cu_seqlens, slot_ids)
    got = conv_state.to(DEVICE)
    out = poisoned(*x.shape, dtype=dtype)
    short_conv_prefill_launcher(x.to(DEVICE), weight.to(DEVICE), got, cu_seqlens.to(DEVICE), slot_ids.to(DEVICE),
                                out=out, block_t=block_t)
    assert rel_err(out.cpu(), y_ref) < TOLERANCE[dtype]
    assert torch.equal(out.cpu()[int(cu_seqlens[-1]):], torch.zeros_like(y_ref[int(cu_seqlens[-1]):]))
    assert torch.equal(got.cpu(), expected)


def test_prefill_reads_strided_slots():
    """The model passes state_slots[:, 0], a strided view."""
    from dayzero.plugins.short_conv.kernel import short_conv_prefill_launcher

    x, weight, conv_state = conv_inputs((7,), 3, 8, 4, 6, torch.float32)
    cu_seqlens = torch.tensor([0, 3, 7], dtype=torch.int32)
    state_slots = torch.tensor([[4, 0], [1, 2]], dtype=torch.int32)
    expected = conv_state.clone()
    y_ref = reference.short_conv_prefill(x, weight, expected, cu_seqlens, state_slots[:, 0])
    got = conv_state.to(DEVICE)
    y = short_conv_prefill_launcher(x.to(DEVICE), weight.to(DEVICE), got, cu_seqlens.to(DEVICE),
                                    state_slots.to(DEVICE)[:, 0])
    assert rel_err(y.cpu(), y_ref) < 1e-6 and torch.equal(got.cpu(), expected)


def test_registered_ops_dispatch_to_reference_on_cpu():
    from dayzero.plugins import short_conv

    x, weight, conv_state = conv_inputs((2, 3), 3, 4, 4, 8, torch.float32)
    slots, num_accepted = torch.tensor([[4, 5, 6], [-1, -1, -1]], dtype=torch.int32), torch.tensor([2, 1])
    expected = conv_state.clone()
    y_ref = reference.short_conv_decode(x, weight, expected, slots, num_accepted)
    assert torch.equal(short_conv.short_conv_decode(x, weight, conv_state, slots, num_accepted), y_ref)
    assert torch.equal(conv_state, expected)

    x = torch.randn(9, 3, 4)
    cu_seqlens, slot_ids = torch.tensor([0, 4, 9]), torch.tensor([1, -1])
    y_ref = reference.short_conv_prefill(x, weight, expected, cu_seqlens, slot_ids, "identity")
    assert torch.equal(short_conv.short_conv_prefill(x, weight, conv_state, cu_seqlens, slot_ids, "identity"), y_ref)
    assert torch.equal(conv_state, expected)


def test_onnx_translations_emit_one_dayzero_node():
    pytest.importorskip("onnxscript")
    building = pytest.importorskip("torch.onnx._internal.exporter._building")
    import onnxscript
    from onnxscript import ir

    from dayzero.plugins.short_conv.op import short_conv_decode_onnx, short_conv_prefill_onnx

    for fn, name in ((short_conv_decode_onnx, "short_conv_decode"), (short_conv_prefill_onnx, "short_conv_prefill")):
        recorder = building.OpRecorder(onnxscript.values.Opset("", 18), {})
        x = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT)) for i in range(5)]
        with onnxscript.evaluator.default_as(recorder):
            outputs = fn(*x, activation="silu")
        (node,) = recorder.nodes
        assert (node.domain, node.op_type, len(node.inputs), len(outputs)) == ("dayzero", name, 5, 2)
        assert node.attributes["activation"].value == "silu"


@pytest.mark.parametrize("dtype", [pytest.param(dt, marks=gpu_only) for dt in (torch.bfloat16, torch.float32)])
def test_registered_ops_run_the_kernels_on_gpu(dtype):
    """The triton_op path (wrap_triton launches) on CUDA tensors, the prefill slots a strided view as in the model."""
    from dayzero.plugins import short_conv

    x, weight, conv_state = conv_inputs((4, 2), 3, 4096, 4, 12, dtype)
    slots, num_accepted = torch.tensor([[3, 4], [-1, -1], [7, 8], [0, 1]], dtype=torch.int32), torch.tensor(
        [1, 1, 2, 2], dtype=torch.int32)
    expected = conv_state.clone()
    y_ref = reference.short_conv_decode(x, weight, expected, slots, num_accepted)
    got = conv_state.cuda()
    y = short_conv.short_conv_decode(x.cuda(), weight.cuda(), got, slots.cuda(), num_accepted.cuda())
    assert rel_err(y.cpu(), y_ref) < TOLERANCE[dtype] and torch.equal(got.cpu(), expected)

    x = torch.randn(300, 3, 4096).to(dtype)
    cu_seqlens = torch.tensor([0, 2, 290, 300], dtype=torch.int32)
    y_ref = reference.short_conv_prefill(x, weight, expected, cu_seqlens, slots[:3, 0])
    y = short_conv.short_conv_prefill(x.cuda(), weight.cuda(), got, cu_seqlens.cuda(), slots.cuda()[:3, 0])
    assert rel_err(y.cpu(), y_ref) < TOLERANCE[dtype] and torch.equal(got.cpu(), expected)
