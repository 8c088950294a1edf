"""The two FP8 decodes of the MLA attention kernel (bit placement, e4m3_bits.py, for a bf16 query; conversion
instructions for an fp32 one) vs the reference: every e4m3 byte at extreme tile scales exactly, and whole attentions
with -1 indices, empty index rows, a value width that is not a power of two, and key-list splits."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.paged_cache.formats import fp8_latent_record_bytes, unpack_fp8_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from tests.plugins.test_sparse_mla_kernel import (
    BF16,
    FP32,
    assert_matches,
    random_indices,
    run_sparse,
    scenario,
    sparse_reference,
)
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned

pytestmark = needs_triton
# on the GPU these run with the `-m gpu` selection too: the bit decode's subnormals are a hardware question
ON_DEVICE = [pytest.mark.gpu] if ON_GPU else []

NOPE, ROPE = 256, 16
# tile scales the quantizer can write (2**ceil(log2(amax / 448)), amax >= 1e-4) and far past them
SCALE_EXPONENTS = (-22, -9, -1, 0, 3, 15, 40)


def every_byte_records() -> torch.Tensor:
    """One record per scale exponent (both tiles), its nope bytes every e4m3 value (NaN bytes written as +-0)."""
    values = torch.arange(256, dtype=torch.int32)
    values[values == 0x7F], values[values == 0xFF] = 0x00, 0x80
    records = []
    for e in SCALE_EXPONENTS:
        raw = values.to(torch.uint8)[torch.randperm(256)][:NOPE]
        scales = torch.full((NOPE // 128,), 2.0**e).view(torch.uint8)
        rope = torch.randn(ROPE).to(torch.bfloat16).view(torch.uint8)
        records.append(torch.cat([raw, scales, rope]))
    return torch.stack(records)


# the query dtype that takes each decode: bit placement for bf16, conversion instructions otherwise
DECODES = [pytest.param(BF16, id="bits", marks=ON_DEVICE), pytest.param(FP32, id="cvt", marks=ON_DEVICE)]


@pytest.mark.parametrize("q_dtype", DECODES)
def test_one_visible_key_returns_its_dequantized_row_exactly(q_dtype):
    """With one key the output is the value row itself: any decode error (a flushed subnormal, a scale off by a
    power of two) shows as an exact mismatch."""
    from dayzero.plugins.sparse_mla.kernel import sparse_mla_launcher

    records = every_byte_records()
    rows = records.shape[0]
    cache = torch.full((1, PAGE_SIZE, fp8_latent_record_bytes(NOPE, ROPE)), 255, dtype=torch.uint8)
    cache[0, :rows] = records
    heads, topk = 3, 5
    indices = torch.full((rows, topk), -1, dtype=torch.int32)
    indices[torch.arange(rows), torch.arange(rows) % topk] = torch.arange(rows, dtype=torch.int32)
    q = torch.randn(rows, heads, NOPE + ROPE).to(q_dtype)
    out = (poisoned(rows, heads, NOPE, dtype=q_dtype), poisoned(rows, heads))
    table = torch.zeros(1, 1, dtype=torch.int32)
    cu = torch.tensor([0, rows], dtype=torch.int32)
    o, lse = sparse_mla_launcher(*(t.to(DEVICE) for t in (q, cache, table, cu, indices)), sm_scale=0.1, v_dim=NOPE,
                                 out=out)
    expected = unpack_fp8_latent(records, ROPE)[:, :NOPE]
    assert torch.equal(o.cpu().float(), expected[:, None, :].expand(rows, heads, NOPE))
    assert torch.isfinite(lse).all()


# (context per sequence, new tokens per sequence, H, nope, topk, blank tokens, num_splits)
CASES = [
    ((150, 70, 5), (2, 1, 3), 20, 384, 64, (1,), None),
    ((90, 260), (1, 2), 5, 128, 96, (0, 2), 3),
    ((40,), (3,), 64, 256, 48, (), 2),
]


@pytest.mark.parametrize("q_dtype", DECODES)
@pytest.mark.parametrize("context, new, H, nope, topk, blank, num_splits", CASES,
                         ids=["-".join(map(str, c[:5])) for c in CASES])
def test_fp8_decodes_match_reference(request, q_dtype, context, new, H, nope, topk, blank, num_splits):
    if ON_GPU and q_dtype == FP32 and nope & (nope - 1) and H > 16:
        # compiled for sm_90, an fp32 query over an FP8 cache whose nope width is not a power of two writes -inf lse
        # and NaN outputs for every row once the heads take more than one 16-head block (H 17-32 at nope 384 fail,
        # H 16 and nope 128 / 256 / 512 pass, the BF16 cache passes); the interpreter computes it right
        request.applymarker(pytest.mark.xfail(strict=True, reason="fp32 query, FP8 cache, nope 384, H > 16 on sm_90"))
    sc = scenario(list(context), list(new), H, nope, 64, "fp8", q_dtype)
    indices = random_indices(sc, topk, blank_tokens=blank)
    got = run_sparse(sc, indices, nope, num_splits=num_splits)
    assert_matches(got, sparse_reference(sc, indices, nope), q_dtype)
