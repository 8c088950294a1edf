"""MXFP8 keys through the f16 key dot of the decode select kernel (f16_tiles_kernel.py) vs the reference.

The tile loaders must reproduce the dequantized keys and the query rows exactly (block scales within 22 octaves of
a key's largest, E8M0 codes near both ends, queries of tiny and large magnitudes); the decode Top-K must then equal
the reference's (exactly under the interpreter), and stay within the score tolerance where a key's block scales
spread further.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize
from tests.plugins.test_indexer_kernel import (
    assert_rows_follow_the_rule,
    assert_same_topk,
    build_case,
    reference_scores,
    run_kernel,
)
from tests.plugins.triton_env import DEVICE, HAS_TRITON, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton

# e4m3 bytes with exponent field <= 7: values below 2, so that keys under scales up to 2^127 stay finite in fp32
SMALL_E4M3 = 0x3F
# scenarios: (lowest E8M0 code of a key's blocks, octaves above it, e4m3 byte mask, query octave, head spread)
SCENARIOS = {
    "low-scales-large-q": (1, 22, 0xFF, 60, 6),
    "high-scales-tiny-q": (232, 22, SMALL_E4M3, -110, 6),
    "mid-scales-heads-40-octaves-apart": (110, 22, 0xFF, 0, 40),
}

if HAS_TRITON:
    import triton
    import triton.language as tl

    from dayzero.plugins.indexer.f16_tiles_kernel import KEY_HEADROOM, f16_query_rows, load_keys_f16

    @triton.jit
    def _keys_kernel(cache, table_row, k_out, tops_out, num_keys, DI: tl.constexpr, DP: tl.constexpr,
                     BS: tl.constexpr):
        s = tl.arange(0, BS)
        d = tl.arange(0, DP)
        k, tops = load_keys_f16(cache, table_row, s, s < num_keys, DI, 64, DP)
        tl.store(k_out + s[:, None] * DP + d[None, :], k.to(tl.float32))
        tl.store(tops_out + s, tops)

    @triton.jit
    def _query_kernel(q, w, q_out, w_out, M: tl.constexpr, DP: tl.constexpr):
        m = tl.arange(0, M)
        d = tl.arange(0, DP)
        q16, w16 = f16_query_rows(tl.load(q + m[:, None] * DP + d[None, :]), tl.load(w + m))
        tl.store(q_out + m[:, None] * DP + d[None, :], q16.to(tl.float32))
        tl.store(w_out + m, w16)


def random_e4m3(shape, mask, gen):
    """Random e4m3 bytes under `mask`, none of them NaN (0x7F / 0xFF)."""
    codes = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32) & mask
    return torch.where((codes & 0x7F) == 0x7F, codes - 1, codes).to(torch.uint8)


def fill_mxfp8_cache(cache, dim, lowest, octaves, value_mask, seed=0):
    """Every key of `cache` random: block scales in [lowest, lowest + octaves], e4m3 values under value_mask."""
    gen = torch.Generator().manual_seed(seed)
    num_pages = cache.shape[0]
    values = random_e4m3((num_pages, 64 * dim), value_mask, gen)
    scales = torch.randint(lowest, lowest + octaves + 1, (num_pages, 64 * dim // 32), generator=gen)
    cache.copy_(torch.cat([values, scales.to(torch.uint8)], dim=1).to(cache.device))


def extreme_case(lengths, new, num_heads, dim, scenario, seed=0):
    """build_case's sequences with the cache and the query magnitudes of `scenario` (a bf16 q)."""
    lowest, octaves, value_mask, q_octave, head_spread = SCENARIOS[scenario]
    case = build_case(lengths, new, num_heads, dim, "mxfp8", torch.float32, seed=seed)
    fill_mxfp8_cache(case["index_cache"], dim, lowest, octaves, value_mask, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    heads = torch.randint(-head_spread, head_spread + 1, (1, num_heads, 1), generator=gen).float()
    case["q"] = (case["q"].cpu() * torch.exp2(heads + q_octave)).to(torch.bfloat16).to(DEVICE)
    return case


def test_loaded_keys_times_their_scales_are_the_dequantized_keys():
    dim, num_keys, block = 96, 50, 64
    for lowest in (1, 110, 232):
        cache = torch.zeros(2, 64 * (dim + dim // 32), dtype=torch.uint8)
        fill_mxfp8_cache(cache, dim, lowest, 22, SMALL_E4M3 if lowest > 200 else 0xFF, seed=lowest)
        table = torch.tensor([1, 0], dtype=torch.int32)
        k_out, tops = poisoned(block, 128), poisoned(block, dtype=torch.int32)
        _keys_kernel[(1,)](cache.to(DEVICE), table.to(DEVICE), k_out, tops, num_keys, DI=dim, DP=128, BS=block)
        values = cache[1, : 64 * dim].view(64, dim)
        scales = cache[1, 64 * dim :].view(64, dim // 32)
        expected = mxfp8_dequantize(values.view(torch.float8_e4m3fn), scales).double()
        got = k_out.cpu().double() * torch.exp2(tops.cpu().double() - 127 - KEY_HEADROOM.value)[:, None]
        assert torch.equal(got[:num_keys, :dim], expected[:num_keys]), f"codes from {lowest}"
        assert torch.equal(k_out[:num_keys, dim:].cpu(), torch.zeros(num_keys, 128 - dim))
        assert torch.equal(k_out[num_keys:].cpu(), torch.zeros(block - num_keys, 128)), "masked keys are not 0"


def test_query_rows_in_f16_times_their_weights_are_exact():
    """Rows from 2^-100 to 2^110, a zero row, a one-value row: w' / w undoes each row's factor exactly; a row of
    2^-125 (its factor capped to keep w' normal) stays close."""
    gen = torch.Generator().manual_seed(0)
    octaves = torch.tensor([-100.0, -90, -60, -14, 0, 7, 15, -3, 100, 110, 0, 0, 2, -30, 30, -125])
    q = (torch.randn(16, 64, generator=gen) * torch.exp2(octaves)[:, None]).to(torch.bfloat16).float()
    q[10] = 0.0
    q[11, 1:] = 0.0
    w = torch.randn(16, generator=gen)
    q_out, w_out = poisoned(16, 64), poisoned(16)
    _query_kernel[(1,)](q.to(DEVICE), w.to(DEVICE), q_out, w_out, M=16, DP=64)
    q_out, w_out = q_out.cpu().double(), w_out.cpu().double()
    amax = q_out.abs().max(1).values
    assert bool((amax < 2.0 ** 15).all()), "a row over f16's range"
    assert bool((amax[:15] >= 2.0 ** 14)[q[:15].ne(0).any(1)].all()), "a row far below f16's range"
    assert bool((w_out.abs() >= 2.0 ** -126).all()), "a weight left fp32's normal range"
    restored = q_out * (w_out / w.double() * 2.0 ** KEY_HEADROOM.value)[:, None]
    assert torch.equal(restored[:15], q[:15].double())
    assert float((restored[15] - q[15]).abs().max()) <= 2.0 ** -10 * float(q[15].abs().max())


@pytest.mark.parametrize("lengths, new, num_heads, dim, topk", sizes(
    cpu=[((150, 70), (2, 1), 3, 64, 12)],
    gpu=[((9000, 4000), (1, 2), 64, 128, 2048)],
))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_decode_f16_keys_at_extreme_scales(lengths, new, num_heads, dim, topk, scenario):
    """Scores are normal fp32 numbers in every scenario, so the f16 path's products and sums are the reference's."""
    case = extreme_case(lengths, new, num_heads, dim, scenario)
    expected = reference.index_topk_paged(**case, topk=topk)
    for scores in reference_scores(case):
        assert bool(scores.isfinite().all()) and bool((scores.abs() >= 2.0 ** -126)[scores != 0].all())
    got = run_kernel(case, topk, "decode", f16_keys=True)
    assert_same_topk(got, expected, case, exact=not ON_GPU)
    assert_rows_follow_the_rule(got, case, topk)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_decode_f16_keys_with_an_mxfp8_query(scenario):
    case = extreme_case((140, 90), (2, 2), 2, 64, scenario, seed=3)
    values, q_scales = mxfp8_quantize(case["q"].float())
    quantized = {**case, "q": values}
    expected = reference.index_topk_paged(**quantized, topk=16, q_scales=q_scales)
    got = run_kernel(quantized, 16, "decode", q_scales=q_scales, f16_keys=True)
    assert_same_topk(got, expected, {**case, "q": mxfp8_dequantize(values, q_scales)}, exact=not ON_GPU)


def test_decode_f16_keys_with_block_scales_spread_over_60_octaves():
    """Blocks far below a key's largest round in f16 (or vanish): the picks stay within the score tolerance."""
    case = build_case((200, 90), (2, 1), 3, 64, "mxfp8", torch.bfloat16, seed=5)
    fill_mxfp8_cache(case["index_cache"], 64, 100, 60, 0xFF, seed=5)
    got = run_kernel(case, 16, "decode", f16_keys=True)
    assert_same_topk(got, reference.index_topk_paged(**case, topk=16), case, exact=False)
    assert_rows_follow_the_rule(got, case, 16)


def test_f16_keys_agree_with_the_default_dequantizing_path():
    """The f16 key path (also by its launcher name, select-f16) selects what the default dequantizing path does."""
    case = build_case((300, 40), (3, 3), 4, 32, "mxfp8", torch.bfloat16)
    f16 = run_kernel(case, 40, "decode", f16_keys=True)
    assert torch.equal(f16, run_kernel(case, 40, "decode", decode_kernel="select-f16"))
    assert_same_topk(f16, run_kernel(case, 40, "decode"), case, exact=not ON_GPU)
