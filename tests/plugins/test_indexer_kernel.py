"""The fused indexer kernels (paged decode split-N + merge; varlen prefill) vs the reference index_topk_paged.

Random inputs: indices equal exactly (under the interpreter; on the GPU, where sums run in another order, rows may
differ only between keys whose scores agree to fp32 rounding). Integer-valued inputs make exact ties, where the
rule (earlier position first) must hold bit for bit on every device.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.paged_cache.formats import gather_index_keys, index_cache_shape, write_index_keys
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize
from tests.plugins.test_indexer_sparse_mla_reference import paged_layout
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton

# tiny tiles under the interpreter so that a few hundred keys cross tiles, blocks, shrinks, splits and the merge
CPU_DECODE = dict(block_keys=16, union_keys=64, num_splits=3, min_chunk=32, split_keys=1)
CPU_PREFILL = dict(block_rows=16, block_keys=16, max_programs=2)
CACHE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "mxfp8": torch.uint8}


def build_case(lengths, new, num_heads, dim, cache_kind, q_dtype, integer=False, seed=0):
    """Sequences of `lengths` cached keys whose last `new` tokens are the queries; a shuffled block table."""
    gen = torch.Generator().manual_seed(seed)
    num_pages = sum(-(-n // 64) for n in lengths) + 3
    table, rows = paged_layout(list(lengths), num_pages, seed)
    if integer:
        keys = torch.randint(-2, 3, (sum(lengths), dim), generator=gen).float()
        q = torch.randint(-2, 3, (sum(new), num_heads, dim), generator=gen).float()
        w = torch.randint(-1, 3, (sum(new), num_heads), generator=gen).float()
    else:
        keys = torch.randn(sum(lengths), dim, generator=gen)
        q = torch.randn(sum(new), num_heads, dim, generator=gen)
        w = torch.randn(sum(new), num_heads, generator=gen)
    quantized = cache_kind == "mxfp8"
    shape = index_cache_shape(num_pages, dim, quantized)
    cache = torch.randint(0, 256, shape, dtype=torch.uint8) if quantized else torch.randn(shape).to(
        CACHE_DTYPES[cache_kind])
    write_index_keys(cache, keys, rows)
    cu = torch.tensor([0, *new]).cumsum(0).to(torch.int32)
    positions = torch.cat([torch.arange(n - m, n) for n, m in zip(lengths, new)])
    case = dict(q=q.to(q_dtype), w=w, index_cache=cache, block_table=table, cu_seqlens=cu, positions=positions)
    return {name: t.to(DEVICE) for name, t in case.items()}


def run_kernel(case, topk, phase, q_scales=None, **extra):
    """The fused op into a poisoned output; the case's shape must choose `phase`."""
    from dayzero.plugins.indexer.kernel import index_topk_paged_launcher, is_decode_step

    num_tokens, num_seqs = case["q"].shape[0], case["cu_seqlens"].shape[0] - 1
    assert is_decode_step(num_tokens, num_seqs) == (phase == "decode"), f"the case is not a {phase} step"
    out = poisoned(num_tokens, topk, dtype=torch.int32)
    options = {} if ON_GPU else CPU_PREFILL if phase == "prefill" else CPU_DECODE
    return index_topk_paged_launcher(**case, topk=topk, q_scales=q_scales, out=out, **{**options, **extra})


def reference_scores(case, q=None):
    """Unmasked reference scores of each query row over its sequence's keys: list of [rows, keys]."""
    q = case["q"] if q is None else q
    out, cu = [], case["cu_seqlens"].tolist()
    for n, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
        if b > a:
            keys = gather_index_keys(case["index_cache"], case["block_table"][n],
                                     torch.arange(int(case["positions"][a:b].max()) + 1, device=q.device), q.shape[-1])
            out.append(reference.index_scores(q[a:b], keys, case["w"][a:b]))
    return out


def assert_same_topk(got, expected, case, exact, tolerance=1e-5):
    """Equal index rows; on the GPU rows may swap keys whose reference scores agree to fp32 rounding (to `tolerance`
    of the row's largest score): the two rows' scores, each sorted, then agree."""
    got, expected = got.cpu(), expected.cpu()
    if exact or torch.equal(got, expected):
        assert torch.equal(got, expected), f"{(got != expected).any(1).sum()} rows differ"
        return
    assert torch.equal(got < 0, expected < 0), "a different number of keys per row"
    row = 0
    for scores in reference_scores(case, case["q"].float()):
        for s in scores.cpu():
            picked, wanted = got[row][got[row] >= 0].long(), expected[row][expected[row] >= 0].long()
            assert picked.unique().numel() == picked.numel() and (picked < s.numel()).all()
            assert torch.allclose(s[picked].sort().values, s[wanted].sort().values, rtol=0,
                                  atol=tolerance * float(s.abs().max())), f"row {row}"
            row += 1


def assert_rows_follow_the_rule(got, case, topk):
    """K = min(topk, pos + 1) causal positions per row, ascending (so distinct), -1 padding at the end."""
    for row, pos in zip(got.cpu(), case["positions"].cpu().tolist()):
        valid = row[row >= 0]
        assert valid.numel() == min(topk, pos + 1) and bool((row[valid.numel():] == -1).all())
        assert bool((valid <= pos).all()) and bool((valid[1:] > valid[:-1]).all())


@pytest.mark.parametrize("lengths, new, num_heads, dim, topk, cache_kind, q_dtype", sizes(
    cpu=[((70, 200, 5), (1, 1, 1), 4, 32, 8, "fp32", torch.float32),
         ((130, 64, 1), (2, 2, 1), 2, 32, 8, "mxfp8", torch.float32),
         ((65, 257), (4, 4), 3, 64, 12, "bf16", torch.bfloat16),
         ((300, 40), (3, 3), 4, 32, 40, "mxfp8", torch.bfloat16),
         ((20, 9), (2, 2), 2, 16, 40, "fp32", torch.float32)],
    gpu=[((8192 + 37, 20000, 130, 1), (1, 1, 1, 1), 64, 128, 2048, "mxfp8", torch.bfloat16),
         ((33000, 4100, 2500), (4, 4, 4), 32, 128, 2048, "mxfp8", torch.bfloat16),
         ((16384, 3000), (2, 2), 64, 128, 2048, "bf16", torch.bfloat16),
         ((9000, 700), (1, 1), 32, 128, 512, "fp32", torch.float32)],
))
def test_decode_matches_reference(lengths, new, num_heads, dim, topk, cache_kind, q_dtype):
    """1 + d query tokens per sequence (speculative verify), contexts across page boundaries, topk > context."""
    case = build_case(lengths, new, num_heads, dim, cache_kind, q_dtype)
    got = run_kernel(case, topk, "decode")
    assert_same_topk(got, reference.index_topk_paged(**case, topk=topk), case, exact=not ON_GPU)
    assert_rows_follow_the_rule(got, case, topk)


@pytest.mark.parametrize("lengths, new, num_heads, dim, topk, cache_kind, q_dtype", sizes(
    cpu=[((70, 150, 5), (30, 40, 5), 3, 32, 8, "fp32", torch.float32),
         ((90, 33), (90, 17), 2, 32, 12, "mxfp8", torch.bfloat16),
         ((45,), (45,), 4, 16, 64, "bf16", torch.bfloat16)],
    gpu=[((3000, 4500), (3000, 2500), 32, 128, 2048, "mxfp8", torch.bfloat16),
         ((5000, 77), (5000, 77), 32, 128, 2048, "bf16", torch.bfloat16),
         ((2100,), (1000,), 16, 64, 256, "fp32", torch.float32)],
))
def test_prefill_matches_reference(lengths, new, num_heads, dim, topk, cache_kind, q_dtype):
    """Varlen prefill, fresh and chunked (queries after cached context), with odd lengths."""
    case = build_case(lengths, new, num_heads, dim, cache_kind, q_dtype)
    got = run_kernel(case, topk, "prefill")
    assert_same_topk(got, reference.index_topk_paged(**case, topk=topk), case, exact=not ON_GPU)
    assert_rows_follow_the_rule(got, case, topk)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("cache_kind, q_dtype", [("bf16", torch.bfloat16), ("mxfp8", torch.bfloat16),
                                                 ("fp32", torch.float32)])
def test_ties_go_to_the_earlier_position(phase, cache_kind, q_dtype):
    """Small integers: scores are exact, so many tie (relu zeros above all); the rule must hold exactly."""
    new = (2, 3) if phase == "decode" else (60, 37) if ON_GPU else (24, 13)
    lengths = (260, 97) if ON_GPU or phase == "decode" else (60, 50)
    case = build_case(lengths, new, 2, 32, cache_kind, q_dtype, integer=True)
    topk = 24
    expected = reference.index_topk_paged(**case, topk=topk)
    scores = reference_scores(case)
    assert any(r.unique().numel() < r.numel() for s in scores for r in s), "the case has no ties"
    got = run_kernel(case, topk, phase)
    assert torch.equal(got.cpu(), expected.cpu())


@pytest.mark.parametrize("lengths, new, num_heads, dim, topk", sizes(
    cpu=[((150, 70), (2, 1), 2, 64, 16), ((200, 9), (1, 2), 3, 128, 24)],
    gpu=[((150, 70), (2, 1), 2, 64, 16), ((20000, 4100, 77), (1, 1, 1), 64, 128, 2048),
         ((33000, 2500), (2, 2), 32, 128, 2048), ((9000, 3000), (4, 4), 32, 128, 2048)],
))
@pytest.mark.parametrize("phase", ["decode", "decode-wide", "prefill"])
def test_prequantized_mxfp8_query(lengths, new, num_heads, dim, topk, phase):
    """q given as e4m3 values + E8M0 scales per 32 (the MXFP8 path, in decode the FP8 dot) == the reference on the
    same q. On the GPU the FP8 tensor cores sum a block's 32 products at reduced precision: picks may swap keys whose
    reference scores agree to 1e-3 of the row's largest. `wide`: key tiles of 128, two pages each."""
    phase, _, wide = phase.partition("-")
    extra = {"block_keys": 128} if wide else {}
    # prefill: up to 512 queries a sequence on the GPU (the reference holds [queries, heads, keys] scores), 24 in the
    # interpreter (a query row costs it about as much as the whole decode case)
    new = new if phase == "decode" else tuple(min(n // 2, 512 if ON_GPU else 24) for n in lengths)
    case = build_case(lengths, new, num_heads, dim, "mxfp8", torch.float32)
    values, q_scales = mxfp8_quantize(case["q"])
    quantized = {**case, "q": values}
    expected = reference.index_topk_paged(**quantized, topk=topk, q_scales=q_scales)
    got = run_kernel(quantized, topk, phase, q_scales=q_scales, **extra)
    assert_same_topk(got, expected, {**case, "q": mxfp8_dequantize(values, q_scales)}, exact=not ON_GPU,
                     tolerance=1e-3 if phase == "decode" else 1e-5)
    assert_rows_follow_the_rule(got, case, topk)


def test_fp8_dot_is_taken_for_mxfp8_query_and_keys_up_to_64_dot_rows():
    from dayzero.plugins.indexer.fp8_dot_kernel import FP8_DOT_MAX_ROWS, mxfp8_dot_applies

    scales = torch.zeros(1)
    assert mxfp8_dot_applies(True, scales, 64) and FP8_DOT_MAX_ROWS == 64
    assert not mxfp8_dot_applies(True, scales, 128)
    assert not mxfp8_dot_applies(True, None, 32) and not mxfp8_dot_applies(False, scales, 32)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_tokens_outside_sequences_and_empty_sequences(phase):
    """Sequences with no new token are skipped; tokens after cu_seqlens[-1] get -1 rows, like the reference."""
    new = (1, 0, 2) if phase == "decode" else (20, 0, 18)
    case = build_case((80, 10, 40), new, 2, 32, "fp32", torch.float32)
    num_tokens = case["q"].shape[0]
    case["cu_seqlens"][-1] -= 1
    expected = reference.index_topk_paged(**case, topk=8)
    got = run_kernel(case, 8, phase)
    assert torch.equal(got.cpu(), expected.cpu()) and bool((got[num_tokens - 1] == -1).all())


def test_phase_is_chosen_by_tokens_per_sequence():
    from dayzero.plugins.indexer.kernel import DECODE_MAX_ROWS, _decode_rows

    assert _decode_rows(64, 64, 64) == 1 and _decode_rows(256, 64, 64) == 4 and _decode_rows(512, 64, 64) == 4
    assert DECODE_MAX_ROWS >= 4


def test_registered_op_dispatches_to_reference_on_cpu():
    from dayzero.plugins.indexer import index_topk_paged

    case = {name: t.cpu() for name, t in build_case((70, 9), (3, 2), 2, 16, "fp32", torch.float32).items()}
    got = index_topk_paged(case["q"], case["w"], case["index_cache"], case["block_table"], case["cu_seqlens"],
                           case["positions"], 8)
    assert torch.equal(got, reference.index_topk_paged(**case, topk=8))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fake = index_topk_paged(torch.empty(5, 2, 16), torch.empty(5, 2), torch.empty(3, 64, 16),
                                torch.empty(2, 3, dtype=torch.int32), torch.empty(3, dtype=torch.int32),
                                torch.empty(5, dtype=torch.long), 2048)
    assert fake.shape == (5, 2048) and fake.dtype == torch.int32


@pytest.mark.skipif(ON_GPU, reason="the ONNX export runs on the CPU machine")
def test_onnx_export_emits_one_custom_node():
    pytest.importorskip("onnxscript")
    from dayzero.plugins.indexer import index_topk_paged
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    class Step(torch.nn.Module):
        def forward(self, q, w, cache, table, cu, pos):
            return index_topk_paged(q, w, cache, table, cu, pos, 4)

    args = (torch.randn(3, 2, 32), torch.randn(3, 2), torch.zeros(2, 64 * 33, dtype=torch.uint8),
            torch.zeros(1, 2, dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32), torch.arange(3))
    program = torch.onnx.export(Step(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS,
                                optimize=False, verbose=False)
    nodes = [n for n in program.model_proto.graph.node if n.domain == "dayzero"]
    assert [n.op_type for n in nodes] == ["IndexTopkPaged"] and len(nodes[0].input) == 6
    assert {a.name: a.i for a in nodes[0].attribute} == {"topk": 4}
    assert program.model_proto.graph.output[0].type.tensor_type.elem_type == 6  # int32
