"""The fused RMSNorm kernel (plain, zero-centered, gated) against the reference, the registered ops' Triton bodies
against their fakes and the CPU reference, and the model's norm modules against the expressions they run."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins import norm
from dayzero.plugins.norm import reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, needs_triton, poisoned, sizes

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


@needs_triton
def test_zero_rows_launch_nothing():
    from dayzero.plugins.norm.kernel import gated_rms_norm_launcher, rms_norm_launcher

    x = torch.empty(0, 4, 16, device=DEVICE)
    weight = torch.ones(16, device=DEVICE)
    assert rms_norm_launcher(x, weight, EPS).shape == (0, 4, 16)
    assert gated_rms_norm_launcher(x, x, weight, EPS, "silu").shape == (0, 4, 16)


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
    calls = {norm.rms_norm: (x, weight, EPS, True), norm.gated_rms_norm: (x, gate, weight, EPS, "silu")}
    for op, args in calls.items():
        body = op.dayzero_impls["cuda"](*args)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = op.dayzero_impls["fake"](*(mode.from_tensor(a) if torch.is_tensor(a) else a for a in args))
        assert (body.shape, body.stride(), body.dtype) == (fake.shape, fake.stride(), fake.dtype)
        expected = op(*(a.cpu() if torch.is_tensor(a) else a for a in args))
        assert rel_err(body.cpu(), expected) < TOLERANCE[torch.bfloat16]


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
