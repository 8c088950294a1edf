"""The MXFP8 decode dot through one f16 accumulator (f16_dot_kernel.py; decode kernel "select-f16").

Its scores are the reference's up to the order of summation while a key's block scales lie within 22 octaves and a
query row's within 35, so its Top-K must equal the reference's (exactly under the interpreter) and the FP8 dot's:
on random MXFP8 queries and caches, 1 + d rows per sequence, contexts across pages and shorter than topk, block
scales near both ends of E8M0, heads 40 octaves apart and head weights near fp32's smallest normal.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize
from tests.plugins.test_indexer_kernel import assert_rows_follow_the_rule, assert_same_topk, build_case
from tests.plugins.test_indexer_words_keys import SCENARIOS, extreme_case, run_decode
from tests.plugins.triton_env import ON_GPU, needs_triton, sizes

pytestmark = needs_triton


def quantized_query(case):
    """The case with its query in MXFP8 -> (case, q_scales, the case with the dequantized query)."""
    values, q_scales = mxfp8_quantize(case["q"].float())
    return {**case, "q": values}, q_scales, {**case, "q": mxfp8_dequantize(values, q_scales)}


def assert_matches_reference_and_fp8_dot(case, topk):
    quantized, q_scales, dequantized = quantized_query(case)
    got = run_decode(quantized, topk, "select-f16", q_scales=q_scales)
    expected = reference.index_topk_paged(**quantized, topk=topk, q_scales=q_scales)
    assert_same_topk(got, expected, dequantized, exact=not ON_GPU)
    assert_same_topk(got, run_decode(quantized, topk, "select", q_scales=q_scales), dequantized, exact=not ON_GPU)
    assert_rows_follow_the_rule(got, case, topk)


@pytest.mark.parametrize("lengths, new, num_heads, topk", sizes(
    cpu=[((150, 70, 1), (2, 1, 1), 3, 12), ((64, 129), (1, 3), 2, 40), ((300,), (1,), 5, 7)],
    gpu=[((8192 + 37, 20000, 130, 1), (1, 1, 1, 1), 64, 2048), ((33000, 4100), (1, 1), 32, 2048),
         ((9000, 3000), (2, 2), 16, 2048)],
))
def test_f16_key_dot_matches_the_reference(lengths, new, num_heads, topk):
    """Contexts off the page size and shorter than topk, 1 + d rows per sequence."""
    assert_matches_reference_and_fp8_dot(build_case(lengths, new, num_heads, 128, "mxfp8", torch.bfloat16,
                                                    seed=len(lengths)), topk)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_f16_key_dot_at_extreme_scales(scenario):
    """Key block scales 22 octaves apart near both ends of E8M0, large / tiny queries, heads 40 octaves apart."""
    assert_matches_reference_and_fp8_dot(extreme_case((140, 70), (2, 1), 2, 128, scenario, seed=2), 16)


def test_f16_key_dot_with_head_weights_near_the_smallest_normal():
    """The query's factor is capped where it would push a head weight below fp32's normal numbers (uncapped, the
    weights would keep a few bits or none)."""
    case = build_case((200, 90), (1, 2), 3, 128, "mxfp8", torch.bfloat16, seed=6)
    case["w"] = case["w"] * torch.tensor([2.0 ** -126, 2.0 ** -125, 2.0 ** -127], device=case["w"].device)
    assert_matches_reference_and_fp8_dot(case, 24)


def test_f16_keys_need_an_mxfp8_query_and_128_wide_keys():
    case = build_case((70,), (1,), 2, 128, "mxfp8", torch.bfloat16)
    with pytest.raises(AssertionError, match="FP8 dot needs an MXFP8 query"):
        run_decode(case, 8, "select-f16")
    quantized, q_scales, _ = quantized_query(build_case((70,), (1,), 2, 64, "mxfp8", torch.bfloat16))
    with pytest.raises(AssertionError, match="f16_keys needs"):
        run_decode(quantized, 8, "select-f16", q_scales=q_scales)
