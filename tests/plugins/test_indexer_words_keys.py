"""MXFP8 keys loaded as int32 words (words_tiles_kernel.py: the decode kernel's loads where DI is a multiple of 128).

The word loader must return the very bytes of the cache on random caches, every byte value included (E8M0 0 and
255, e4m3 NaN codes), across a page boundary, with masked keys and a masked tail of words (DI 384 in DP 512); the
dequantized keys must be bit-identical to the byte loader's (tiles_kernel.py), and the decode Top-K equal to the
reference's, also at extreme scales and with an MXFP8 query.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize
from tests.plugins.test_indexer_kernel import assert_rows_follow_the_rule, assert_same_topk, build_case, run_kernel
from tests.plugins.triton_env import DEVICE, HAS_TRITON, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton

PAGE = 64
# loader -> the LOADER constexpr of the test kernels
LOADERS = {"bytes": 0, "words": 1}
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

    from dayzero.plugins.indexer.pages_kernel import key_pages
    from dayzero.plugins.indexer.tiles_kernel import load_keys, mxfp8_key_blocks
    from dayzero.plugins.indexer.words_tiles_kernel import load_keys_words, mxfp8_key_word_blocks

    @triton.jit
    def _blocks_kernel(cache, table_row, codes_out, scales_out, start, num_keys, DI: tl.constexpr,
                       DP: tl.constexpr, BS: tl.constexpr, LOADER: tl.constexpr):
        r = tl.arange(0, BS)
        s = start + r
        page = key_pages(table_row, s, s < num_keys, 64)
        if LOADER == 0:
            codes, scales = mxfp8_key_blocks(cache, page, s, s < num_keys, DI, 64, DP)
        else:
            codes, scales = mxfp8_key_word_blocks(cache, page, s, s < num_keys, DI, 64, DP)
        d = tl.arange(0, DP)
        tl.store(codes_out + r[:, None] * DP + d[None, :], tl.reshape(codes, (BS, DP)))
        b = tl.arange(0, DP // 32)
        tl.store(scales_out + r[:, None] * (DP // 32) + b[None, :], scales)

    @triton.jit
    def _keys_kernel(cache, table_row, k_out, start, num_keys, DI: tl.constexpr, DP: tl.constexpr, BS: tl.constexpr,
                     LOADER: tl.constexpr, DOT_FP32: tl.constexpr):
        r = tl.arange(0, BS)
        s = start + r
        d = tl.arange(0, DP)
        page = key_pages(table_row, s, s < num_keys, 64)
        if LOADER == 0:
            k = load_keys(cache, page, s, s < num_keys, d, DI, 64, True, DOT_FP32)
        else:
            k = load_keys_words(cache, page, s, s < num_keys, DI, 64, DP, DOT_FP32)
        tl.store(k_out + r[:, None] * DP + d[None, :], k.to(tl.float32))


def random_cache(num_pages, dim, seed):
    """Every byte random (never a zero cache): NaN e4m3 codes and E8M0 0 / 255 included."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_pages, PAGE * (dim + dim // 32)), generator=gen, dtype=torch.uint8)


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


def expected_blocks(cache, table, start, num_keys, block, dim, dp):
    """(codes [block, dp], scales [block, dp / 32]) read from the page-major layout; 0 where masked."""
    codes = torch.zeros(block, dp, dtype=torch.uint8)
    scales = torch.zeros(block, dp // 32, dtype=torch.uint8)
    for r, s in enumerate(range(start, min(start + block, num_keys))):
        page, offset = int(table[s // PAGE]), s % PAGE
        codes[r, :dim] = cache[page, offset * dim : (offset + 1) * dim]
        scales[r, : dim // 32] = cache[page, PAGE * dim + offset * dim // 32 : PAGE * dim + (offset + 1) * dim // 32]
    return codes, scales


# (DI, first key of the tile, keys in the sequence, keys per tile)
TILES = [(128, 40, 100, 64), (128, 0, 64, 64), (128, 192, 193, 16), (384, 50, 90, 32), (256, 100, 256, 64)]


@pytest.mark.parametrize("dim, start, num_keys, block", TILES, ids=lambda v: str(v))
@pytest.mark.parametrize("loader", list(LOADERS))
def test_loaded_blocks_are_the_cache_bytes(dim, start, num_keys, block, loader):
    dp = triton.next_power_of_2(dim)
    cache = random_cache(4, dim, seed=dim + start)
    table = torch.tensor([2, 0, 3, 1], dtype=torch.int32)
    codes, scales = poisoned(block, dp, dtype=torch.int32), poisoned(block, dp // 32, dtype=torch.int32)
    _blocks_kernel[(1,)](cache.to(DEVICE), table.to(DEVICE), codes, scales, start, num_keys, DI=dim, DP=dp, BS=block,
                         LOADER=LOADERS[loader])
    want_codes, want_scales = expected_blocks(cache, table, start, num_keys, block, dim, dp)
    assert torch.equal(codes.cpu(), want_codes.int())
    assert torch.equal(scales.cpu(), want_scales.int())


# E8M0 codes near 255 overflow the dequantized keys to inf (in both loaders alike)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("dim, start, num_keys, block", TILES[:1] + TILES[3:4], ids=lambda v: str(v))
@pytest.mark.parametrize("dot_fp32", [True, False], ids=["fp32", "bf16"])
def test_word_keys_are_bit_identical_to_the_byte_loaders(dim, start, num_keys, block, dot_fp32):
    dp = triton.next_power_of_2(dim)
    cache = random_cache(4, dim, seed=7).to(DEVICE)
    table = torch.tensor([1, 3, 0, 2], dtype=torch.int32, device=DEVICE)
    keys = {}
    for loader, code in LOADERS.items():
        keys[loader] = poisoned(block, dp)
        _keys_kernel[(1,)](cache, table, keys[loader], start, num_keys, DI=dim, DP=dp, BS=block, LOADER=code,
                           DOT_FP32=dot_fp32)
    bits = {loader: k.cpu().view(torch.int32) for loader, k in keys.items()}
    assert not bool(keys["bytes"].isnan().all())
    assert torch.equal(bits["words"], bits["bytes"])


@pytest.mark.parametrize("lengths, new, num_heads, topk", sizes(
    cpu=[((150, 70, 1), (2, 1, 1), 3, 12), ((64, 129), (1, 3), 2, 40)],
    gpu=[((8192 + 37, 20000, 130, 1), (1, 1, 1, 1), 64, 2048), ((33000, 4100), (4, 4), 32, 2048)],
))
def test_decode_with_word_keys_matches_the_reference(lengths, new, num_heads, topk):
    """Contexts off the page size and shorter than topk, 1 + d rows per sequence."""
    case = build_case(lengths, new, num_heads, 128, "mxfp8", torch.bfloat16, seed=len(lengths))
    got = run_kernel(case, topk, "decode")
    assert_same_topk(got, reference.index_topk_paged(**case, topk=topk), case, exact=not ON_GPU)
    assert_rows_follow_the_rule(got, case, topk)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_decode_with_word_keys_at_extreme_scales(scenario):
    """Block scales near both ends of E8M0 with large / tiny queries, heads 40 octaves apart."""
    case = extreme_case((140, 70), (2, 1), 2, 128, scenario, seed=2)
    got = run_kernel(case, 16, "decode")
    assert_same_topk(got, reference.index_topk_paged(**case, topk=16), case, exact=not ON_GPU)


def test_decode_with_word_keys_and_an_mxfp8_query():
    case = extreme_case((130, 90), (1, 2), 2, 128, "mid-scales-heads-40-octaves-apart", seed=4)
    values, q_scales = mxfp8_quantize(case["q"].float())
    quantized = {**case, "q": values}
    got = run_kernel(quantized, 16, "decode", q_scales=q_scales)
    expected = reference.index_topk_paged(**quantized, topk=16, q_scales=q_scales)
    assert_same_topk(got, expected, {**case, "q": mxfp8_dequantize(values, q_scales)}, exact=not ON_GPU)
