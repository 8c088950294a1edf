"""The Triton FP8 block quantize / dequantize kernels vs the reference, bit for bit (interpreter on CPU, native on
the GPU), and the registered ops around them."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.quant import reference as Q
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

triton = pytest.importorskip("triton")
tl = triton.language
from dayzero.plugins.quant.kernel import cast_rne  # noqa: E402 (needs triton)

# on a GPU every test here runs under `pytest -m gpu` (the device-independent ones too: they are fast)
pytestmark = [needs_triton, *([pytest.mark.gpu] if ON_GPU else [])]

# (quantize, dequantize, block, scale dtype) of the two formats
FORMATS = {
    "mxfp8": (Q.mxfp8_quantize, Q.mxfp8_dequantize, Q.MX_BLOCK, torch.uint8),
    "fp8_block": (Q.fp8_block_quantize, Q.fp8_block_dequantize, Q.FP8_TILE, torch.float32),
}
E4M3_FINITE = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()


def wide_range(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """Random values spanning magnitudes 1e-6 .. 1e4 along each row (e4m3 subnormals inside blocks), with an
    all-zero row, an all-zero block and a negative-zero block."""
    x = torch.randn(rows, cols) * torch.logspace(-6, 4, cols)[torch.randperm(cols)]
    x[rows // 2] = 0.0
    x[0, :32] = 0.0
    x[-1, -32:] = -0.0
    return x.to(dtype)


def run_quantize(x: torch.Tensor, block: int, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    from dayzero.plugins.quant.kernel import quantize_launcher

    x = x.to(DEVICE)
    # 0x7F is the e4m3 NaN and 0xFF the E8M0 NaN: codes the quantizer never writes
    q = torch.full(x.shape, 0x7F, dtype=torch.uint8, device=DEVICE)
    scale_shape = (*x.shape[:-1], x.shape[-1] // block)
    scales = torch.full(scale_shape, 0xFF, dtype=torch.uint8, device=DEVICE) if scale_dtype == torch.uint8 else (
        poisoned(*scale_shape))
    quantize_launcher(x, q, scales)
    return q.cpu(), scales.cpu()


def assert_bits_equal(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal bit patterns (so -0 differs from +0), except that any NaN equals any NaN."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[got.element_size()]
    mismatch = got.view(as_int) != expected.view(as_int)
    if got.dtype.is_floating_point and got.element_size() > 1:
        mismatch &= ~(got.isnan() & expected.isnan())
    assert not mismatch.any(), f"{int(mismatch.sum())} of {got.numel()} differ, first {mismatch.nonzero()[0].tolist()}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rows, cols, dtype", sizes(
    cpu=[(7, 256, torch.float32), (5, 384, torch.bfloat16), (3, 128, torch.float16), (1, 128, torch.float32)],
    gpu=[(4096, 7168, torch.bfloat16), (8192, 512, torch.float32), (333, 4096, torch.bfloat16)],
))
def test_quantize_matches_reference(fmt, rows, cols, dtype):
    quantize, _, block, scale_dtype = FORMATS[fmt]
    x = wide_range(rows, cols, dtype)
    q, scales = run_quantize(x, block, scale_dtype)
    expected_q, expected_scales = quantize(x.to(DEVICE), block)
    assert_bits_equal(q, expected_q.view(torch.uint8).cpu())
    assert_bits_equal(scales, expected_scales.cpu())
    assert torch.isfinite(scales.float()).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_e4m3_rounding_at_every_tie(fmt):
    """Blocks whose amax is 448 have scale 1, so q is the plain e4m3 cast of every value: test the grid points,
    the midpoints between them (ties to even) and their fp32 neighbours, subnormals included."""
    _, _, block, scale_dtype = FORMATS[fmt]
    grid = E4M3_FINITE[torch.isfinite(E4M3_FINITE) & (E4M3_FINITE >= 0)].unique()
    mid = (grid[1:] + grid[:-1]) / 2
    values = torch.cat([grid, mid, mid.nextafter(torch.tensor(0.0)), mid.nextafter(torch.tensor(1e9)), grid * 0.9])
    values = torch.cat([values, -values])
    per_block = block - 1
    values = torch.cat([values, values.new_zeros(-values.numel() % per_block)]).view(-1, per_block)
    x = torch.cat([values.new_full((values.shape[0], 1), 448.0), values], dim=1).flatten().view(1, -1)
    q, scales = run_quantize(x, block, scale_dtype)
    expected_q, expected_scales = FORMATS[fmt][0](x.to(DEVICE), block)
    assert_bits_equal(q, expected_q.view(torch.uint8).cpu())
    assert_bits_equal(scales, expected_scales.cpu())


@pytest.mark.parametrize("fmt", FORMATS)
def test_scale_exponent_at_power_of_two_edges(fmt):
    """amax at and just above 448 * 2^k: there the fp32 log2 of the reference rounds down onto k for a few
    mantissas (and torch divides differently on CPU and CUDA); the kernels must pick the same scale."""
    _, _, block, scale_dtype = FORMATS[fmt]
    edge = torch.tensor(448.0) * torch.exp2(torch.arange(-30, 40).float())
    amax = [edge]
    for _ in range(12):
        amax.append(amax[-1].nextafter(torch.tensor(float("inf"))))
    amax.append(edge.nextafter(torch.tensor(0.0)))
    amax.append(torch.tensor([1e-4, 1.0001e-4, 0.9999e-4, 1e-30, 3e38]))
    amax = torch.cat(amax)
    x = torch.rand(amax.numel(), block) * amax[:, None] * 0.99
    x[:, 0] = amax * torch.where(torch.rand(amax.numel()) < 0.5, -1.0, 1.0)
    q, scales = run_quantize(x, block, scale_dtype)
    expected_q, expected_scales = FORMATS[fmt][0](x.to(DEVICE), block)
    assert_bits_equal(scales, expected_scales.cpu())
    assert_bits_equal(q, expected_q.view(torch.uint8).cpu())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", sizes(cpu=[(9,)], gpu=[(65536,)]))
def test_dequantize_matches_reference(fmt, out_dtype, rows):
    from dayzero.plugins.quant.kernel import dequantize_launcher

    _, dequantize, block, scale_dtype = FORMATS[fmt]
    # every e4m3 code (NaN included) under every E8M0 scale, or under random fp32 scales
    codes = torch.arange(256).repeat(rows * 2 * block // 256 + 1)[: rows * 2 * block].to(torch.uint8).view(rows, -1)
    if scale_dtype == torch.uint8:
        scales = torch.arange(rows * 2).remainder(256).to(torch.uint8).view(rows, 2)
    else:
        scales = torch.randn(rows, 2) * torch.logspace(-20, 20, rows * 2).view(rows, 2)
    out = poisoned(rows, 2 * block, dtype=out_dtype)
    q = codes.view(torch.float8_e4m3fn).to(DEVICE)
    dequantize_launcher(q, scales.to(DEVICE), out)
    assert_bits_equal(out.cpu(), dequantize(q, scales.to(DEVICE), block, dtype=out_dtype).cpu())


def test_round_trip_error_is_within_e4m3_precision():
    from dayzero.plugins.quant.kernel import dequantize_launcher

    x = wide_range(6, 256, torch.float32)
    q, scales = run_quantize(x, 32, torch.uint8)
    back = poisoned(6, 256)
    dequantize_launcher(q.to(DEVICE), scales.to(DEVICE), back)
    per_element = Q.e8m0_to_float(scales).repeat_interleave(32, dim=-1)
    bound = torch.maximum(x.abs() * 2.0 ** -4, per_element * 2.0 ** -10) * (1 + 1e-6)
    assert ((back.cpu() - x).abs() <= bound).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_registered_ops_match_reference(fmt):
    """The registered op on DEVICE (the kernel on CUDA, the reference on CPU), and its kernel body run directly."""
    from dayzero.plugins import quant

    op_quantize, op_dequantize = getattr(quant, f"{fmt}_quantize"), getattr(quant, f"{fmt}_dequantize")
    quantize, dequantize, block, _ = FORMATS[fmt]
    x = wide_range(2, 3 * block, torch.bfloat16).view(2, 3, block).to(DEVICE)
    expected_q, expected_scales = quantize(x, block)
    # the CUDA body of a triton_op, callable on any device (the interpreter runs it on the CPU)
    for run in (op_quantize, op_quantize._init_fn):
        q, scales = run(x, block)
        assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
        assert_bits_equal(q.view(torch.uint8), expected_q.view(torch.uint8))
        assert_bits_equal(scales, expected_scales)
    for run in (op_dequantize, op_dequantize._init_fn):
        assert_bits_equal(run(q, scales, block, torch.bfloat16), dequantize(q, scales, block, dtype=torch.bfloat16))


def test_registered_ops_pass_opcheck():
    from dayzero.plugins import quant

    x = torch.randn(3, 256)
    for op in (quant.mxfp8_quantize, quant.fp8_block_quantize):
        torch.library.opcheck(op, (x,), test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
        q, scales = op(x)
        dequantize = quant.mxfp8_dequantize if op is quant.mxfp8_quantize else quant.fp8_block_dequantize
        # test_schema compares inputs bitwise, which torch cannot do for float8 tensors
        torch.library.opcheck(dequantize, (q, scales), test_utils=("test_faketensor", "test_autograd_registration"))


def test_bad_width_is_rejected_by_op_and_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dayzero.plugins import quant

    with pytest.raises(ValueError, match="multiple of the block size"):
        quant.mxfp8_quantize(torch.randn(2, 40))
    with FakeTensorMode(), pytest.raises(ValueError, match="multiple of the block size"):
        quant.fp8_block_quantize(torch.empty(2, 200))


def test_onnx_translations_emit_dayzero_nodes():
    pytest.importorskip("onnxscript")
    from dayzero.plugins import quant
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    class RoundTrip(torch.nn.Module):
        def forward(self, x):
            q, scales = quant.mxfp8_quantize(x)
            q2, scales2 = quant.fp8_block_quantize(x)
            return quant.mxfp8_dequantize(q, scales, 32, torch.bfloat16), quant.fp8_block_dequantize(q2, scales2)

    program = torch.onnx.export(RoundTrip(), (torch.randn(4, 256),), dynamo=True, verbose=False,
                                custom_translation_table=ONNX_TRANSLATIONS)
    nodes = {node.op_type: node for node in program.model.graph if node.domain == "dayzero"}
    assert set(nodes) == {"Mxfp8Quantize", "Fp8BlockQuantize", "Mxfp8Dequantize", "Fp8BlockDequantize"}
    assert nodes["Mxfp8Quantize"].attributes["block"].value == 32 and len(nodes["Mxfp8Quantize"].outputs) == 2
    assert nodes["Mxfp8Dequantize"].attributes["dtype"].value == 16  # onnx BFLOAT16
    assert nodes["Fp8BlockDequantize"].attributes["block"].value == 128


@triton.jit
def _round_bits_kernel(bits, out, N: tl.constexpr):
    offsets = tl.arange(0, N)
    x = tl.load(bits + offsets).to(tl.float32, bitcast=True)
    tl.store(out + offsets, cast_rne(x, out.dtype.element_ty))


def test_bf16_rounding_keeps_every_nan_a_nan():
    # NaNs with every payload the GPU or the interpreter may produce (0x7FFFFFFF is the GPU's), Inf, the largest
    # finite fp32 (rounds to Inf in bf16), and ordinary values
    patterns = [0x7FFFFFFF, -1, 0x7FC00000, 0x7F800001, 0x7F800000, 0x7F7FFFFF, 0x3F800001, 0x7FBFFFFF]
    bits = torch.tensor(patterns, dtype=torch.int32, device=DEVICE)
    out = poisoned(len(patterns), dtype=torch.bfloat16)
    _round_bits_kernel[(1,)](bits, out, N=len(patterns))
    assert_bits_equal(out.cpu(), bits.cpu().view(torch.float32).to(torch.bfloat16))
