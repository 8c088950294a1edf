"""The fused RMSNorm kernel (plain, zero-centered, gated, after a residual add) against the reference, the registered
ops' Triton bodies against their fakes and the CPU reference, the residual add's ONNX node on ONNX Runtime, and the
model's norm modules against the expressions they run."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins import norm
from dayzero.plugins.norm import reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

# the CPU interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, hence the loose bf16 bound
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
EPS = 1e-6


def _rows(*shape: int, dtype=torch.float32, device=DEVICE) -> torch.Tensor:
    """Random rows of different scales and offsets (their RMS far from 1 and from each other)."""
    scale = torch.rand(*shape[:-1], 1, device=device) * 4 + 0.25
    return (torch.randn(*shape, device=device) * scale + 0.3 * scale).to(dtype)


def _weight(dim: int, zero_centered: bool, dtype, device=DEVICE) -> torch.Tensor:
    # a zero-centered weight is the offset from 1
    base = 0.0 if zero_centered else 1.0
    return (base + 0.5 * torch.randn(dim, device=device)).to(dtype)


def _heads_of_wider_rows(tokens: int, heads: int, dim: int, dtype) -> torch.Tensor:
    """[T, H, D] heads that are part of wider rows (a projection output with other columns): strided over T and H."""
    wide = _rows(tokens, heads, 2 * dim + 3, dtype=dtype)
    return wide[..., 3:dim + 3]


@needs_triton
@pytest.mark.parametrize("rows, dim, dtype, zero_centered", sizes(
    cpu=[(1, 33, torch.bfloat16, False), (5, 100, torch.float32, True), (37, 64, torch.bfloat16, True),
         (130, 33, torch.float32, False)],
    gpu=[(1, 2304, torch.bfloat16, False), (16, 2304, torch.bfloat16, True), (64, 2304, torch.bfloat16, False),
         (8192, 2304, torch.bfloat16, False), (333, 7168, torch.bfloat16, True), (1, 7168, torch.float32, False),
         (4097, 100, torch.float32, True)],
))
def test_rms_norm_matches_reference(rows, dim, dtype, zero_centered):
    from dayzero.plugins.norm.kernel import rms_norm_launcher

    x = _rows(rows, 1, dim, dtype=dtype)
    weight = _weight(dim, zero_centered, dtype)
    out = poisoned(rows, 1, dim, dtype=dtype)
    assert rms_norm_launcher(x, weight, EPS, zero_centered, out=out) is out
    expected = reference.rms_norm(x.cpu(), weight.cpu(), EPS, zero_centered)
    assert rel_err(out.cpu(), expected) < TOLERANCE[dtype]


@needs_triton
@pytest.mark.parametrize("tokens, heads, dim, dtype, gate_dtype, activation", sizes(
    cpu=[(1, 3, 33, torch.bfloat16, torch.bfloat16, "sigmoid"), (4, 5, 16, torch.float32, torch.float32, "silu"),
         (3, 2, 100, torch.float32, torch.bfloat16, "sigmoid"), (9, 6, 8, torch.bfloat16, torch.bfloat16, "silu")],
    gpu=[(1, 32, 128, torch.bfloat16, torch.bfloat16, "sigmoid"), (16, 32, 128, torch.bfloat16, torch.bfloat16, "silu"),
         (64, 32, 128, torch.bfloat16, torch.bfloat16, "sigmoid"), (8192, 32, 128, torch.bfloat16, torch.bfloat16,
                                                                    "silu"),
         (33, 16, 256, torch.float32, torch.bfloat16, "sigmoid")],
))
def test_gated_rms_norm_matches_reference(tokens, heads, dim, dtype, gate_dtype, activation):
    """The output rows x [T, H, D] contiguous, the gate heads split off wider projection rows."""
    from dayzero.plugins.norm.kernel import gated_rms_norm_launcher

    x = _rows(tokens, heads, dim, dtype=dtype)
    gate = _heads_of_wider_rows(tokens, heads, dim, gate_dtype)
    weight = _weight(dim, False, dtype)
    out = poisoned(tokens, heads, dim, dtype=dtype)
    assert gated_rms_norm_launcher(x, gate, weight, EPS, activation, out=out) is out
    expected = reference.gated_rms_norm(x.cpu(), gate.cpu(), weight.cpu(), EPS, activation)
    assert rel_err(out.cpu(), expected) < TOLERANCE[dtype]


@needs_triton
@pytest.mark.parametrize("zero_centered", [False, True], ids=["weight", "one-plus-weight"])
def test_rms_norm_reads_strided_heads(zero_centered):
    """q / k heads that are part of wider rows (a query next to its gate): no copy, each head normed."""
    from dayzero.plugins.norm.kernel import rms_norm_launcher

    x = _heads_of_wider_rows(7, 3, 24, torch.float32)
    weight = _weight(24, zero_centered, torch.float32)
    out = poisoned(7, 3, 24)
    rms_norm_launcher(x, weight, EPS, zero_centered, out=out)
    assert rel_err(out.cpu(), reference.rms_norm(x.cpu(), weight.cpu(), EPS, zero_centered)) < 1e-5


def _check_add_rms_norm(hidden, delta, weight, zero_centered, total, normed):
    """The sum is hidden + delta in hidden's dtype (bit for bit where the kernel rounds as torch does: fp32, and bf16
    on a GPU), its norm the plain kernel's of that sum bit for bit, and the reference's within the tolerance."""
    from dayzero.plugins.norm.kernel import rms_norm_launcher

    dtype = hidden.dtype
    expected_total, expected_normed = reference.add_rms_norm(hidden.cpu(), delta.cpu(), weight.cpu(), EPS,
                                                             zero_centered)
    if dtype == torch.float32 or ON_GPU:
        assert torch.equal(total.cpu(), expected_total)
    assert rel_err(total.cpu(), expected_total) < TOLERANCE[dtype]
    rows = total.reshape(-1, *total.shape[-2:])
    assert torch.equal(normed.reshape(rows.shape), rms_norm_launcher(rows, weight, EPS, zero_centered))
    assert rel_err(normed.cpu(), expected_normed) < TOLERANCE[dtype]


@needs_triton
@pytest.mark.parametrize("rows, dim, dtype, zero_centered", sizes(
    cpu=[(1, 33, torch.bfloat16, False), (5, 100, torch.float32, True), (37, 64, torch.bfloat16, True),
         (130, 33, torch.float32, False)],
    gpu=[(1, 2304, torch.bfloat16, False), (16, 2304, torch.bfloat16, True), (64, 7168, torch.bfloat16, False),
         (8192, 2304, torch.bfloat16, False), (333, 7168, torch.bfloat16, True), (1, 7168, torch.float32, False),
         (4097, 100, torch.float32, True)],
))
def test_add_rms_norm_matches_reference(rows, dim, dtype, zero_centered):
    from dayzero.plugins.norm.kernel import add_rms_norm_launcher

    hidden, delta = _rows(rows, 1, dim, dtype=dtype), _rows(rows, 1, dim, dtype=dtype)
    weight = _weight(dim, zero_centered, dtype)
    out = poisoned(rows, 1, dim, dtype=dtype), poisoned(rows, 1, dim, dtype=dtype)
    total, normed = add_rms_norm_launcher(hidden, delta, weight, EPS, zero_centered, out=out)
    assert total is out[0] and normed is out[1]
    _check_add_rms_norm(hidden, delta, weight, zero_centered, total, normed)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_reads_strided_rows_and_writes_contiguous_ones(dtype):
    """hidden heads split off wider rows, delta transposed over tokens and heads (each its own strides): the sum and
    the norm come out contiguous."""
    from dayzero.plugins.norm.kernel import add_rms_norm_launcher

    hidden = _heads_of_wider_rows(7, 3, 24, dtype)
    delta = _rows(3, 7, 24, dtype=dtype).transpose(0, 1)
    weight = _weight(24, True, dtype)
    total, normed = add_rms_norm_launcher(hidden, delta, weight, EPS, True)
    assert total.is_contiguous() and normed.is_contiguous() and total.shape == normed.shape == (7, 3, 24)
    _check_add_rms_norm(hidden, delta, weight, True, total, normed)


@pytest.mark.parametrize("tokens", [pytest.param(t, marks=gpu_only) for t in (1, 64)])
def test_add_rms_norm_compiled_and_replayed_is_the_add_then_the_norm_exactly(tokens):
    """torch.compile takes the op's kernel in (as the compiled engines do) and a CUDA graph replays it (a decode
    step): bit for bit torch's add and the rms_norm op, on the inputs the replay reads."""
    dim = 7168
    hidden, delta = _rows(tokens, dim, dtype=torch.bfloat16), _rows(tokens, dim, dtype=torch.bfloat16)
    weight = _weight(dim, True, torch.bfloat16)
    step = torch.compile(lambda h, d: norm.add_rms_norm(h, d, weight, EPS, True), fullgraph=True)
    step(hidden, delta)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        total, normed = step(hidden, delta)
    hidden.copy_(_rows(tokens, dim, dtype=torch.bfloat16))
    delta.copy_(_rows(tokens, dim, dtype=torch.bfloat16))
    graph.replay()
    assert torch.equal(total, hidden + delta)
    assert torch.equal(normed, norm.rms_norm(hidden + delta, weight, EPS, True))


@needs_triton
def test_zero_rows_launch_nothing():
    from dayzero.plugins.norm.kernel import add_rms_norm_launcher, gated_rms_norm_launcher, rms_norm_launcher

    x = torch.empty(0, 4, 16, device=DEVICE)
    weight = torch.ones(16, device=DEVICE)
    assert rms_norm_launcher(x, weight, EPS).shape == (0, 4, 16)
    assert gated_rms_norm_launcher(x, x, weight, EPS, "silu").shape == (0, 4, 16)
    assert [t.shape for t in add_rms_norm_launcher(x, x, weight, EPS)] == [(0, 4, 16)] * 2


def _layouts() -> dict[str, torch.Tensor]:
    """Inputs of every layout the ops accept: a vector, rows, heads of wider rows, 4-D, transposed (a copy)."""
    return {"vector": _rows(40), "rows": _rows(6, 40), "strided-heads": _heads_of_wider_rows(5, 3, 40, torch.float32),
            "4d": _rows(2, 3, 2, 40), "transposed": _rows(40, 6).t()}


@needs_triton
@pytest.mark.parametrize("layout", list(_layouts()))
def test_ops_triton_bodies_match_their_fakes_and_the_cpu_reference(layout):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = _layouts()[layout].to(torch.bfloat16)
    gate = _rows(*x.shape, dtype=torch.bfloat16)
    weight = _weight(40, False, torch.bfloat16)
    calls = {norm.rms_norm: (x, weight, EPS, True), norm.gated_rms_norm: (x, gate, weight, EPS, "silu"),
             norm.add_rms_norm: (x, gate, weight, EPS, True)}
    for op, args in calls.items():
        body = _as_tuple(op.dayzero_impls["cuda"](*args))
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = _as_tuple(op.dayzero_impls["fake"](*(mode.from_tensor(a) if torch.is_tensor(a) else a
                                                        for a in args)))
        expected = _as_tuple(op(*(a.cpu() if torch.is_tensor(a) else a for a in args)))
        assert len(body) == len(fake) == len(expected)
        for got, described, want in zip(body, fake, expected):
            assert (got.shape, got.stride(), got.dtype) == (described.shape, described.stride(), described.dtype)
            assert rel_err(got.cpu(), want) < TOLERANCE[torch.bfloat16]


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def test_add_rms_norm_on_cpu_is_the_add_then_the_norm_exactly():
    """The CPU op is today's two steps: `hidden + delta` in hidden's dtype, then rms_norm of that, bit for bit."""
    hidden, delta = _rows(5, 40, dtype=torch.bfloat16, device="cpu"), _rows(5, 40, dtype=torch.bfloat16, device="cpu")
    weight = _weight(40, False, torch.bfloat16, device="cpu")
    for zero_centered in (False, True):
        total, normed = norm.add_rms_norm(hidden, delta, weight, EPS, zero_centered)
        assert torch.equal(total, hidden + delta)
        assert torch.equal(normed, norm.rms_norm(hidden + delta, weight, EPS, zero_centered))


def test_add_rms_norm_is_one_onnx_node_that_onnx_runtime_runs(tmp_path):
    """One `dayzero` AddRmsNorm node with the sum and the norm as its two outputs; ONNX Runtime's kernel (the
    registered op's CPU reference) gives the op's results."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    class AddNorm(torch.nn.Module):
        def forward(self, hidden, delta, weight):
            return norm.add_rms_norm(hidden, delta, weight, EPS, True)

    args = (_rows(3, 40, device="cpu"), _rows(3, 40, device="cpu"), _weight(40, True, torch.float32, device="cpu"))
    program = torch.onnx.export(AddNorm().eval(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS)
    custom = [(n.op_type, len(n.input), len(n.output)) for n in program.model_proto.graph.node
              if n.domain == ONNX_DOMAIN]
    assert custom == [("AddRmsNorm", 3, 2)]
    path = tmp_path / "add_rms_norm.onnx"
    program.save(path)
    session = onnx_ort.session(path)
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    for got, expected in zip(session.run(None, feeds), norm.add_rms_norm(*args, EPS, True)):
        assert torch.equal(torch.from_numpy(got), expected)


def _normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_norms_on_cpu_are_their_torch_expressions_exactly(dtype):
    """The modules checkpoints load into run the ops; on the CPU the ops are the fp32 torch expressions, bit for bit."""
    from dayzero.model.norm import GatedRMSNorm, RMSNorm, ZeroCenteredRMSNorm

    x, gate = _rows(4, 3, 40, dtype=dtype, device="cpu"), _rows(4, 3, 40, dtype=dtype, device="cpu")
    weight = _weight(40, False, dtype, device="cpu")
    modules = RMSNorm(40, EPS), ZeroCenteredRMSNorm(40, EPS), GatedRMSNorm(40, EPS), GatedRMSNorm(40, EPS, gate="silu")
    for module in modules:
        module.weight.data = weight.clone()
    plain, centered, gated, gated_silu = modules
    normed, w, g = _normalized(x, EPS), weight.float(), gate.float()
    assert torch.equal(plain(x), (normed * w).to(dtype))
    assert torch.equal(centered(x), (normed * (1.0 + w)).to(dtype))
    assert torch.equal(gated(x, gate), (normed * w * torch.sigmoid(g)).to(dtype))
    assert torch.equal(gated_silu(x, gate), (normed * w * torch.nn.functional.silu(g)).to(dtype))
