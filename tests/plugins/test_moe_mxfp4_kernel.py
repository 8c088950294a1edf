"""The MXFP4 (W4A16) path of the Triton grouped expert GEMM and MLP vs the reference run on mxfp4_dequantize'd
weights (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from dayzero.plugins.moe import reference
from dayzero.plugins.moe.activation import gated_activation
from dayzero.plugins.quant.reference import mxfp4_dequantize
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = [needs_triton] + ([pytest.mark.gpu] if ON_GPU else [])

# the dense kernel tests' bounds: the dequantized weights are exact in bf16, so only the GEMM's rounding differs
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
SITU = {"beta": 4.0, "linear_beta": 25.0}
NONZERO_CODES = [code for code in range(16) if code not in (0, 8)]


def use_tiles(monkeypatch, **tiles):
    """The grouped GEMM's launch plan with `tiles` in place of its own (K tiles that span several scale blocks, the
    GPU's tl.dot_scaled path under the interpreter)."""
    from dayzero.plugins.moe import grouped_gemm_kernel

    plan = grouped_gemm_kernel._launch_config
    monkeypatch.setattr(grouped_gemm_kernel, "_launch_config", lambda *args: {**plan(*args), **tiles})


def _offsets(rows: int, experts: int) -> torch.Tensor:
    """Expert offsets [E+1] int32 of `rows` rows spread at random over all experts but the last (it gets none)."""
    counts = torch.bincount(torch.randint(0, experts - 1, (rows,)), minlength=experts)
    return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32).to(DEVICE)


def _mxfp4_weights(experts: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 weights: packed uint8 [E, N, K/2] of nonzero E2M1 codes, E8M0 scales uint8 [E, N, K/32] a few
    binades either side of the one that gives the values about unit variance over K."""
    codes = torch.tensor(NONZERO_CODES, dtype=torch.uint8)[torch.randint(len(NONZERO_CODES), (experts, n, k))]
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    center = 127 - round(math.log2(3 * math.sqrt(k)))
    scales = torch.randint(center - 3, center + 4, (experts, n, k // 32)).to(torch.uint8)
    return packed.to(DEVICE), scales.to(DEVICE)


def _act_args(activation: str) -> tuple[dict, float, float | None]:
    params = SITU if activation == "situ" else {}
    return params, params.get("beta", 1.0), params.get("linear_beta")


def _reference_gemm(a, offsets, w, w_up=None, activation="silu", **params) -> torch.Tensor:
    """Per expert a w^T, or act(a w^T) * (a w_up^T) with w_up, in a's dtype as the unfused reference MLP stores it."""
    out = torch.zeros(a.shape[0], w.shape[1], dtype=a.dtype, device=a.device)
    bounds = offsets.tolist()
    for expert, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        y = a[start:end] @ w[expert].t()
        if w_up is not None:
            y = gated_activation(y, a[start:end] @ w_up[expert].t(), activation, **params).to(a.dtype)
        out[start:end] = y
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_every_code_and_scale_block_dequantizes_exactly(dtype, monkeypatch):
    """All 256 packed bytes, scales differing per 32 along K: a = identity makes the GEMM return the weights."""
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    use_tiles(monkeypatch, BLOCK_K=128)
    n, k = 8, 128
    packed = torch.arange(256, device=DEVICE).repeat(2).to(torch.uint8).reshape(1, n, k // 2)
    scales = torch.randint(118, 136, (1, n, k // 32), device=DEVICE).to(torch.uint8)
    offsets = torch.tensor([0, k], dtype=torch.int32, device=DEVICE)
    eye = torch.eye(k, device=DEVICE, dtype=dtype)
    got = grouped_gemm_launcher(eye, packed, offsets, b_scale=scales, out=poisoned(k, n, dtype=dtype))
    assert torch.equal(got, mxfp4_dequantize(packed, scales, dtype=dtype)[0].t())


@pytest.mark.parametrize("rows, experts, n, k, dtype", sizes(
    cpu=[(23, 3, 48, 96, torch.float32), (9, 4, 20, 64, torch.bfloat16), (5, 2, 7, 32, torch.float32)],
    gpu=[(512, 256, 2304, 1024, torch.bfloat16), (4097, 32, 3584, 3072, torch.bfloat16),
         (33, 8, 100, 160, torch.float32)],
))
def test_mxfp4_gemm_matches_reference(rows, experts, n, k, dtype):
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    offsets = _offsets(rows, experts)
    a = torch.randn(rows, k, device=DEVICE).to(dtype)
    packed, scales = _mxfp4_weights(experts, n, k)
    got = grouped_gemm_launcher(a, packed, offsets, b_scale=scales, out=poisoned(rows, n, dtype=dtype))
    expected = _reference_gemm(a, offsets, mxfp4_dequantize(packed, scales, dtype=dtype))
    assert rel_err(got, expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("rows, experts, n, k, dtype, activation", sizes(
    cpu=[(21, 4, 40, 96, torch.float32, "silu"), (11, 3, 24, 64, torch.bfloat16, "situ"),
         (7, 5, 33, 160, torch.float32, "situ"), (6, 2, 16, 32, torch.bfloat16, "silu")],
    gpu=[(512, 256, 1024, 2304, torch.bfloat16, "silu"), (4097, 32, 3072, 3584, torch.bfloat16, "situ"),
         (97, 16, 200, 96, torch.float32, "situ")],
))
def test_mxfp4_gated_gemm_matches_reference(rows, experts, n, k, dtype, activation):
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    offsets = _offsets(rows, experts)
    a = torch.randn(rows, k, device=DEVICE).to(dtype)
    (w1, s1), (w3, s3) = _mxfp4_weights(experts, n, k), _mxfp4_weights(experts, n, k)
    params, beta, linear_beta = _act_args(activation)
    got = grouped_gemm_launcher(a, w1, offsets, w3, activation, beta, linear_beta, out=poisoned(rows, n, dtype=dtype),
                                b_scale=s1, b_up_scale=s3)
    expected = _reference_gemm(a, offsets, mxfp4_dequantize(w1, s1, dtype=dtype),
                               mxfp4_dequantize(w3, s3, dtype=dtype), activation, **params)
    assert rel_err(got, expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("rows, experts, n, k, block_k", sizes(
    cpu=[(11, 3, 24, 96, 64), (6, 2, 17, 224, 128), (9, 4, 32, 64, 64)],
    gpu=[(64, 256, 1024, 2304, 128), (4097, 32, 3072, 3584, 64), (33, 8, 100, 160, 64)],
))
def test_the_scaled_dot_path_matches_reference(rows, experts, n, k, block_k, monkeypatch):
    """tl.dot_scaled on the MXFP4 tiles (bf16 activations, the GPU's path), gated."""
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    use_tiles(monkeypatch, BLOCK_K=block_k, scaled_dot=True)
    offsets = _offsets(rows, experts)
    a = torch.randn(rows, k, device=DEVICE).to(torch.bfloat16)
    (w1, s1), (w3, s3) = _mxfp4_weights(experts, n, k), _mxfp4_weights(experts, n, k)
    got = grouped_gemm_launcher(a, w1, offsets, w3, "silu", out=poisoned(rows, n, dtype=torch.bfloat16),
                                b_scale=s1, b_up_scale=s3)
    expected = _reference_gemm(a, offsets, mxfp4_dequantize(w1, s1, dtype=torch.bfloat16),
                               mxfp4_dequantize(w3, s3, dtype=torch.bfloat16), "silu")
    assert rel_err(got, expected) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("block_k, k", [(128, 224), (256, 96), (64, 320)])
def test_mxfp4_tiles_of_several_scale_blocks(block_k, k, monkeypatch):
    """K tiles spanning 2 to 8 scale blocks, K not a multiple of the tile, a tile longer than K."""
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    use_tiles(monkeypatch, BLOCK_M=16, BLOCK_N=16, BLOCK_K=block_k)
    rows, experts, n = 13, 3, 24
    offsets = _offsets(rows, experts)
    a = torch.randn(rows, k, device=DEVICE)
    (w1, s1), (w3, s3) = _mxfp4_weights(experts, n, k), _mxfp4_weights(experts, n, k)
    got = grouped_gemm_launcher(a, w1, offsets, w3, "situ", SITU["beta"], SITU["linear_beta"],
                                out=poisoned(rows, n), b_scale=s1, b_up_scale=s3)
    expected = _reference_gemm(a, offsets, mxfp4_dequantize(w1, s1), mxfp4_dequantize(w3, s3), "situ", **SITU)
    assert rel_err(got, expected) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("rows, experts, dim, inter, dtype, activation", sizes(
    cpu=[(19, 5, 64, 96, torch.float32, "silu"), (9, 3, 96, 32, torch.bfloat16, "situ"),
         (15, 2, 32, 64, torch.float32, "situ"), (7, 4, 64, 64, torch.bfloat16, "silu")],
    gpu=[(512, 256, 2304, 1024, torch.bfloat16, "silu"), (2049, 32, 3584, 3072, torch.bfloat16, "situ"),
         (97, 16, 256, 96, torch.float32, "situ")],
))
def test_grouped_mlp_mxfp4_matches_reference(rows, experts, dim, inter, dtype, activation):
    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_mxfp4_cuda

    offsets = _offsets(rows, experts)
    x_sorted = torch.randn(rows, dim, device=DEVICE).to(dtype)
    (w1, s1), (w3, s3), (w2, s2) = (_mxfp4_weights(experts, inter, dim), _mxfp4_weights(experts, inter, dim),
                                    _mxfp4_weights(experts, dim, inter))
    params, beta, linear_beta = _act_args(activation)
    got = grouped_mlp_mxfp4_cuda(x_sorted, offsets, w1, s1, w3, s3, w2, s2, activation, beta, linear_beta,
                                 out=poisoned(rows, dim, dtype=dtype))
    dense = [mxfp4_dequantize(w, s, dtype=dtype) for w, s in ((w1, s1), (w3, s3), (w2, s2))]
    expected = reference.grouped_mlp(x_sorted, offsets, *dense, activation, **params)
    assert rel_err(got, expected) < TOLERANCE[dtype]


def test_grouped_mlp_mxfp4_of_no_rows():
    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_mxfp4_cuda

    (w1, s1), (w3, s3), (w2, s2) = _mxfp4_weights(3, 32, 64), _mxfp4_weights(3, 32, 64), _mxfp4_weights(3, 64, 32)
    offsets = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    got = grouped_mlp_mxfp4_cuda(torch.randn(0, 64, device=DEVICE), offsets, w1, s1, w3, s3, w2, s2, "silu", 1.0, None)
    assert got.shape == (0, 64)


@pytest.mark.parametrize("k, block_k, message", [(48, 64, "multiple of the scale block"),
                                                 (96, 96, "not a multiple of 64")], ids=["K48", "BLOCK_K96"])
def test_mxfp4_gemm_refuses_k_off_the_blocks(k, block_k, message, monkeypatch):
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    use_tiles(monkeypatch, BLOCK_K=block_k)
    packed = torch.zeros(2, 8, k // 2, dtype=torch.uint8, device=DEVICE)
    scales = torch.full((2, 8, k // 32), 127, dtype=torch.uint8, device=DEVICE)
    offsets = torch.tensor([0, 3, 5], dtype=torch.int32, device=DEVICE)
    with pytest.raises(AssertionError, match=message):
        grouped_gemm_launcher(torch.randn(5, k, device=DEVICE), packed, offsets, b_scale=scales)


def test_mxfp4_gated_gemm_needs_both_scales():
    from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

    packed, scales = _mxfp4_weights(2, 8, 64)
    offsets = torch.tensor([0, 3, 5], dtype=torch.int32, device=DEVICE)
    with pytest.raises(AssertionError, match="b_up and b_up_scale"):
        grouped_gemm_launcher(torch.randn(5, 64, device=DEVICE), packed, offsets, packed, b_scale=scales)


def test_the_registered_op_runs_the_kernel_and_its_fake_describes_the_result():
    """The op's GPU body (the Triton kernels) and its fake give the same shape, strides and dtype; on CPU the op
    dispatches to the reference, which the kernel matches."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dayzero.plugins.moe.op import moe_grouped_mlp_mxfp4

    offsets = _offsets(11, 3)
    x_sorted = torch.randn(11, 64, device=DEVICE).to(torch.bfloat16)
    weights = [t for w in (_mxfp4_weights(3, 32, 64), _mxfp4_weights(3, 32, 64), _mxfp4_weights(3, 64, 32))
               for t in w]
    args = (x_sorted, offsets, *weights, "silu", 1.0, None)
    body = moe_grouped_mlp_mxfp4.dayzero_impls["cuda"](*args)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = moe_grouped_mlp_mxfp4.dayzero_impls["fake"](*(mode.from_tensor(a) if isinstance(a, torch.Tensor)
                                                             else a for a in args))
    assert (fake.shape, fake.stride(), fake.dtype) == (body.shape, body.stride(), body.dtype)
    assert rel_err(body, moe_grouped_mlp_mxfp4(*args)) < TOLERANCE[torch.bfloat16]
