"""The KDA affine summary on the Triton chunk kernel vs the reference, and the context-parallel fold it serves:
summaries of the earlier segments give the entry state that continues the sequence exactly."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

pytestmark = needs_triton


def inputs(lengths, H, K, V, dtype):
    """Token-major q, k, v [T, H, *] in `dtype`, g [T, H, K] fp32 (log space), beta [T, H], cu_seqlens int32."""
    T = sum(lengths)
    q, k, v = torch.randn(T, H, K), torch.randn(T, H, K), torch.randn(T, H, V)
    g = -torch.nn.functional.softplus(torch.randn(T, H, K))
    beta = torch.rand(T, H)
    cu = torch.tensor([0, *lengths]).cumsum(0).int()
    return [x.to(dtype) for x in (q, k, v)], g, beta.to(dtype), cu


def tolerance(dtype) -> float:
    return 2e-2 if dtype == torch.bfloat16 else (5e-3 if ON_GPU else 1e-5)


@pytest.mark.parametrize("lengths, H, K, V", sizes(
    # K + V = 32 and 64 take the one-launch path [0 | v]; 16 + 32 = 48 is no chunk width, so two launches
    cpu=[((70,), 2, 16, 16), ((5, 64, 1), 1, 16, 32), ((129,), 1, 32, 32)],
    gpu=[((8192,), 32, 128, 128), ((1000, 77, 4096, 1), 8, 128, 128), ((333,), 16, 128, 64)],
))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_launcher_matches_reference(lengths, H, K, V, dtype):
    from dayzero.plugins.kda.summary_op import kda_summary_launcher

    (_, k, v), g, beta, cu = inputs(lengths, H, K, V, dtype)
    ref_M, ref_B = R.kda_summary(*(x.float()[None] for x in (k, v, g, beta)), use_qk_l2norm_in_kernel=True,
                                 cu_seqlens=cu)
    final = poisoned(len(lengths), H, K, K + V)
    M, B = kda_summary_launcher(*(x.to(DEVICE) for x in (k, v, g, beta, cu)), True, final_out=final)
    assert M.shape == ref_M.shape and B.shape == ref_B.shape
    assert rel_err(M.cpu(), ref_M) < tolerance(dtype) and rel_err(B.cpu(), ref_B) < tolerance(dtype)
    assert torch.equal(final.cpu(), torch.cat([M, B], dim=-1).cpu())


def test_without_l2norm():
    from dayzero.plugins.kda.summary_op import kda_summary_launcher

    (_, k, v), g, beta, cu = inputs((37, 3), 2, 16, 16, torch.float32)
    k = k * 0.3
    ref_M, ref_B = R.kda_summary(k[None], v[None], g[None], beta[None], cu_seqlens=cu)
    M, B = kda_summary_launcher(*(x.to(DEVICE) for x in (k, v, g, beta, cu)), False)
    assert rel_err(M.cpu(), ref_M) < tolerance(torch.float32) and rel_err(B.cpu(), ref_B) < tolerance(torch.float32)


def test_segment_summaries_continue_the_sequence():
    """One varlen summary call over three segments (cuts off the chunk grid); folding all but the last from S0
    gives the entry state with which the last segment's chunk KDA equals the whole sequence's (outputs and final
    state), and composing all of them maps S0 to the final state."""
    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher
    from dayzero.plugins.kda.summary_op import kda_summary_launcher

    lengths, H, K, V = (21, 50, 30), 2, 16, 16
    (q, k, v), g, beta, cu = (x.to(DEVICE) if torch.is_tensor(x) else [t.to(DEVICE) for t in x]
                              for x in inputs(lengths, H, K, V, torch.float32))
    T, scale = sum(lengths), K ** -0.5
    S0 = torch.randn(1, H, K, V, device=DEVICE)
    whole = torch.tensor([0, T], dtype=torch.int32, device=DEVICE)
    o_all, s_all = chunk_kda_launcher(q, k, v, g, beta, scale, S0, whole, True, True)
    M, B = kda_summary_launcher(k, v, g, beta, cu, True)
    summaries = [(M[n], B[n]) for n in range(len(lengths))]
    entry = R.fold(summaries[:-1], S0[0])
    start = T - lengths[-1]
    tail = [x[start:].contiguous() for x in (q, k, v, g, beta)]
    o_tail, s_tail = chunk_kda_launcher(*tail, scale, entry[None], whole.new_tensor([0, lengths[-1]]), True, True)
    tol = 5e-3 if ON_GPU else 1e-4
    assert rel_err(o_tail.cpu(), o_all[start:].cpu()) < tol and rel_err(s_tail.cpu(), s_all.cpu()) < tol
    total = summaries[0]
    for later in summaries[1:]:
        total = R.compose(later, total)
    assert rel_err((total[0] @ S0[0] + total[1]).cpu(), s_all[0].cpu()) < tol


def test_registered_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda import kda_summary

    (_, k, v), g, beta, cu = inputs((20, 9), 2, 8, 8, torch.float32)
    got = kda_summary(k[None], v[None], g[None], beta[None], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    ref = R.kda_summary(k[None], v[None], g[None], beta[None], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    batched = [x.view(2, 10, *x.shape[1:]) for x in (k[:20], v[:20], g[:20], beta[:20])]
    got, ref = kda_summary(*batched), R.kda_summary(*batched)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_fake_matches_the_cpu_op():
    """opcheck's schema and fake-tensor checks (its AOT-dispatch check traces the Triton body, which the
    interpreter cannot run on fake tensors; the chunk op fails it the same way on a CPU-only machine)."""
    from dayzero.plugins.kda.summary_op import kda_summary_op

    (_, k, v), g, beta, cu = inputs((20, 9, 1), 2, 16, 32, torch.float32)
    for check in ("test_schema", "test_faketensor"):
        assert torch.library.opcheck(kda_summary_op, (k, v, g, beta, cu, True), test_utils=check) == {
            check: "SUCCESS"}


def test_onnx_translation_emits_one_dayzero_node():
    pytest.importorskip("onnxscript")
    building = pytest.importorskip("torch.onnx._internal.exporter._building")
    import onnxscript
    from onnxscript import ir

    from dayzero.plugins.kda.summary_op import kda_summary_onnx, kda_summary_op
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    assert ONNX_TRANSLATIONS[kda_summary_op._opoverload] is kda_summary_onnx
    recorder = building.OpRecorder(onnxscript.values.Opset("", 18), {})
    x = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT)) for i in range(5)]
    with onnxscript.evaluator.default_as(recorder):
        outputs = kda_summary_onnx(*x, True)
    (node,) = recorder.nodes
    assert (node.domain, node.op_type, len(node.inputs), len(outputs)) == ("dayzero", "kda_summary", 5, 2)
    assert node.attributes["use_qk_l2norm"].value == 1


@pytest.mark.parametrize("V", [pytest.param(v, marks=gpu_only) for v in (128, 64)])
def test_registered_op_runs_the_kernel_on_gpu(V):
    """The triton_op path (wrap_triton launches) on CUDA tensors, both launch paths, batched bf16 inputs."""
    from dayzero.plugins.kda import kda_summary

    (_, k, v), g, beta, _ = inputs((3 * 700,), 8, 128, V, torch.bfloat16)
    batched = [x.view(3, 700, *x.shape[1:]) for x in (k, v, g, beta)]
    ref_M, ref_B = R.kda_summary(*(x.float() for x in batched), use_qk_l2norm_in_kernel=True)
    M, B = kda_summary(*(x.cuda() for x in batched), use_qk_l2norm_in_kernel=True)
    assert rel_err(M.cpu(), ref_M) < 2e-2 and rel_err(B.cpu(), ref_B) < 2e-2
