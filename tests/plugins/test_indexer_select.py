"""The register-resident Top-K sets of the decode indexer (select_kernel.py, decode_select_kernel.py).

keep_best against a sort by (key descending, position ascending) on keys with many ties and the full unsigned range;
the decode kernel on cases that stress the merge floors: scores sorted along the context (every split's candidates
are the best, or none but one split's are), many splits, contexts shorter than K, 1 + d rows per sequence.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from dayzero.plugins.indexer import decode_select_kernel, reference
from dayzero.plugins.indexer.decode_select_kernel import merge_strides
from dayzero.plugins.indexer.kernel import index_topk_paged_launcher
from dayzero.plugins.indexer.select_kernel import keep_best
from dayzero.plugins.paged_cache.formats import index_cache_shape, write_index_keys
from tests.plugins.recorded_launch import LaunchStopped, RecordedLaunch
from tests.plugins.test_indexer_kernel import assert_rows_follow_the_rule, build_case, run_kernel
from tests.plugins.test_indexer_sparse_mla_reference import paged_layout
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned

pytestmark = needs_triton


@triton.jit
def _keep_best_kernel(keys_in, positions_in, set_keys, set_positions, result, K, lower, U: tl.constexpr):
    lane = tl.arange(0, U)
    keys = tl.load(keys_in + lane).to(tl.uint32, bitcast=True)
    kept, t = keep_best(keys, tl.load(positions_in + lane), set_keys, set_positions, K,
                        tl.zeros([], tl.uint32) + lower.to(tl.uint32, bitcast=True))
    tl.store(result, kept)
    tl.store(result + 1, t.to(tl.int32, bitcast=True))


def expected_best(keys: torch.Tensor, positions: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k best entries (unsigned key descending, position ascending; key 0: none), position order."""
    unsigned = keys.long() & 0xFFFFFFFF
    valid = (unsigned > 0).nonzero().flatten().tolist()
    best = sorted(valid, key=lambda i: (-int(unsigned[i]), int(positions[i])))[:k]
    return torch.tensor(sorted(best, key=lambda i: int(positions[i])), dtype=torch.long)


@pytest.mark.parametrize("key_range, k, with_lower, seed", [
    ("ties", 10, False, 3), ("ties", 10, True, 3), ("full", 7, False, 3), ("full", 7, True, 3), ("ties", 100, False, 3),
    ("full", 1, False, 4), ("full", 31, True, 5), ("full", 50, False, 6), ("narrow", 20, True, 7),
    ("narrow", 3, False, 8)])
def test_keep_best_keeps_the_k_best_in_position_order(key_range, k, with_lower, seed):
    """`narrow`: keys that differ only in their lowest bits, where the K-th key's search starts late."""
    gen = torch.Generator().manual_seed(seed)
    union = 64
    if key_range == "ties":
        keys = torch.randint(0, 5, (union,), generator=gen, dtype=torch.int32)
    elif key_range == "narrow":
        keys = 0x6A5C0000 + torch.randint(0, 2**7, (union,), generator=gen, dtype=torch.int32)
    else:
        keys = torch.randint(-2**31, 2**31 - 1, (union,), generator=gen, dtype=torch.int32)
        keys[::9] = 0
    positions = torch.randint(1, 4, (union,), generator=gen).cumsum(0).int()
    wanted = expected_best(keys, positions, k)
    lower = 0
    if with_lower and len(wanted) == k:
        # any key with at least K entries above it: the smallest kept one, lowered a little
        lower = int(min(int(keys[i]) & 0xFFFFFFFF for i in wanted)) // 2
    set_keys, set_positions = poisoned(union, dtype=torch.int32), poisoned(union, dtype=torch.int32)
    result = poisoned(2, dtype=torch.int32)
    as_int32 = lower - 2**32 if lower >= 2**31 else lower
    _keep_best_kernel[(1,)](keys.to(DEVICE), positions.to(DEVICE), set_keys, set_positions, result, k, as_int32,
                            U=union)
    kept = int(result[0])
    assert kept == len(wanted)
    assert torch.equal(set_positions[:kept].cpu(), positions[wanted])
    assert torch.equal(set_keys[:kept].cpu(), keys[wanted])
    if kept == k:
        t = int(result[1]) & 0xFFFFFFFF
        assert sum(int(key) & 0xFFFFFFFF >= t for key in keys[wanted]) == k


def sorted_scores_case(length: int, order: str, cache_kind: str, num_heads: int = 2, dim: int = 32):
    """One sequence of `length` keys whose single query's scores rise (or fall) along the context."""
    gen = torch.Generator().manual_seed(5)
    dtype = torch.float32 if cache_kind == "fp32" else torch.bfloat16
    keys = torch.randn(length, dim, generator=gen).to(dtype)
    q = torch.randn(1, num_heads, dim, generator=gen).to(dtype)
    w = torch.rand(1, num_heads, generator=gen) + 0.1
    scores = reference.index_scores(q, keys, w)[0]
    keys = keys[scores.argsort(descending=order == "falling", stable=True)]
    num_pages = -(-length // 64) + 2
    table, rows = paged_layout([length], num_pages, 5)
    cache = torch.randn(index_cache_shape(num_pages, dim, False)).to(dtype)
    write_index_keys(cache, keys, rows)
    case = dict(q=q, w=w, index_cache=cache, block_table=table, cu_seqlens=torch.tensor([0, 1], dtype=torch.int32),
                positions=torch.tensor([length - 1]))
    return {name: t.to(DEVICE) for name, t in case.items()}


# the interpreter's few hundred keys would take few splits by the default rule: a split a key lets every row use the
# grid's splits, so that many-split merges run
SMALL = {} if ON_GPU else dict(block_keys=16, union_keys=64, min_chunk=48, split_keys=1)


@pytest.mark.parametrize("order", ["rising", "falling"])
@pytest.mark.parametrize("cache_kind", ["fp32", "bf16"])
def test_sorted_scores_across_many_splits(order, cache_kind):
    """Rising scores: the last split holds the whole Top-K (the quantile floor of the others is useless); falling:
    the first does (its K-th key drops every other split's candidates)."""
    length, topk = (300, 20) if not ON_GPU else (20000, 2048)
    case = sorted_scores_case(length, order, cache_kind)
    got = run_kernel(case, topk, "decode", num_splits=6, **SMALL)
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=topk).cpu())


@pytest.mark.parametrize("lengths, new, topk, splits", [
    ((5, 40, 130), (1, 2, 1), 64, 4),
    ((200, 97, 64), (4, 3, 4), 16, 5),
    ((500,), (2,), 24, 8),
])
def test_short_contexts_rows_per_sequence_and_many_splits(lengths, new, topk, splits):
    """Contexts shorter than K (every key kept, -1 padded), 1 + d rows per sequence of different lengths, splits
    whose sets never fill, and merges of many splits."""
    case = build_case(lengths, new, 3, 32, "fp32", torch.float32, seed=7)
    got = run_kernel(case, topk, "decode", num_splits=splits, **{**SMALL, "min_chunk": 16})
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=topk).cpu())
    assert_rows_follow_the_rule(got, case, topk)


def test_integer_ties_across_splits_and_blocks():
    """Scores from small integers tie in long runs that cross blocks and splits; the earlier position wins."""
    case = build_case((400, 150), (2, 1), 2, 16, "fp32", torch.float32, integer=True, seed=11)
    got = run_kernel(case, 40, "decode", num_splits=4, **{**SMALL, "min_chunk": 32})
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=40).cpu())



@pytest.mark.parametrize("split_keys, merge_sets", [(128, None), (1000, None), (128, 2), (50, 2)])
def test_row_split_counts_match_reference(split_keys, merge_sets):
    """Rows that use fewer splits than the grid has, by their keys: at 128 keys a split, 400 keys take 4 of the 8 and
    37 keys 1; at 1000, every row takes one. The merge still folds them exactly, also in a tree of two sets a program
    (merge_sets 2: levels at strides 1, 2, 4, where a row's groups hold one, two or no splits)."""
    case = build_case((400, 150, 37), (1, 2, 1), 3, 32, "fp32", torch.float32, seed=5)
    options = {**SMALL, "min_chunk": 16, "split_keys": split_keys, "merge_sets": merge_sets}
    got = run_kernel(case, 24, "decode", num_splits=8, **options)
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=24).cpu())
    assert_rows_follow_the_rule(got, case, 24)


@pytest.mark.parametrize("merge_sets", [2, 4, 16])
def test_merge_folds_several_sets_a_step(merge_sets):
    """Seven splits a row folded one (2), three (4) or all (16) new sets a merge step, in a tree of merge programs:
    the same rows, exactly."""
    case = build_case((400, 150, 37), (1, 2, 1), 3, 32, "fp32", torch.float32, seed=9)
    options = {**SMALL, "min_chunk": 16, "split_keys": 1, "merge_sets": merge_sets}
    got = run_kernel(case, 24, "decode", num_splits=7, **options)
    assert torch.equal(got.cpu(), reference.index_topk_paged(**case, topk=24).cpu())
    assert_rows_follow_the_rule(got, case, 24)


@pytest.mark.parametrize("num_splits, sets, strides", [
    (4, 4, [1]), (5, 4, [1, 4]), (16, 4, [1, 4]), (17, 4, [1, 4, 16]), (32, 4, [1, 4, 16]), (7, 2, [1, 2, 4]),
    (torch.SymInt, 4, [1, 4, 16])])
def test_merge_strides(num_splits, sets, strides):
    """Levels until the leaders left fit one program (a traced split count: MAX_SPLITS's)."""
    if num_splits is torch.SymInt:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        num_splits = ShapeEnv().create_unbacked_symint()
    assert merge_strides(num_splits, sets) == strides


@pytest.mark.parametrize("num_seqs, max_keys, splits", [
    (1, 131072, 64), (4, 131072, 64), (8, 131072, 33), (64, 131072, 4), (1, 32768, 16), (1, 1000, 1)])
def test_split_counts_fill_one_wave(monkeypatch, num_seqs, max_keys, splits):
    """On 132 SMs (two programs each): up to 64 splits a row."""
    monkeypatch.setattr(decode_select_kernel.device_info, "num_sms", lambda device, cpu_default: 132)
    assert decode_select_kernel.select_num_splits(num_seqs, max_keys, 2048, torch.device("cpu")) == splits


def test_merge_sets_must_be_a_power_of_two():
    case = build_case((100,), (1,), 2, 16, "fp32", torch.float32, seed=1)
    with pytest.raises(AssertionError, match="power of two"):
        run_kernel(case, 8, "decode", num_splits=3, **{**SMALL, "merge_sets": 3})


def test_traced_split_counts_launch_the_levels_they_need():
    """A traced split count launches every level MAX_SPLITS could need; the grid of a level no row needs is zero
    (AOTInductor skips that launch), so each count launches what it launches when concrete, with the same grids."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    traced = ShapeEnv().create_unbacked_symint()
    strides = merge_strides(traced, 4)
    for num_splits in range(1, decode_select_kernel.MAX_SPLITS + 1):
        launched = {}
        for level, stride in enumerate(strides):
            groups = decode_select_kernel.merge_groups(traced, 4, stride, level == len(strides) - 1)
            groups = int(groups.node.expr.subs(traced.node.expr, num_splits)) if isinstance(groups, torch.SymInt) \
                else groups
            if groups:
                launched[stride] = groups
        concrete = merge_strides(num_splits, 4)
        assert launched == {stride: decode_select_kernel.merge_groups(num_splits, 4, stride, stride == concrete[-1])
                            for stride in concrete}, num_splits


@pytest.mark.parametrize("num_heads, cache_kind, q_dtype, tile", [
    (32, "fp32", torch.float32, 32), (64, "fp32", torch.float32, 16), (8, "fp32", torch.float32, 64),
    (64, "bf16", torch.float32, 16), (64, "bf16", torch.bfloat16, 128)])
def test_fp32_dot_tiles_keep_their_logits_in_registers(monkeypatch, num_heads, cache_kind, q_dtype, tile):
    """The fp32 (FMA) dot's default key tile holds at most 1024 logits a program: 64 keys x 32 heads kept a 4.9 KB
    stack a thread in sm_90 SASS, local memory every launch reserves for all resident threads (enough to fail a
    launch out of memory beside other workers). The bf16 dot keeps its 128-key tiles."""
    recorder = RecordedLaunch(stop=True)
    monkeypatch.setattr(decode_select_kernel, "_decode_select_kernel", recorder)
    monkeypatch.setattr("dayzero.plugins.indexer.kernel._exact_bf16_dot",
                        lambda q, cache: q.dtype == torch.bfloat16 and cache.dtype == torch.bfloat16)
    case = build_case((300, 70), (1, 1), num_heads, 128, cache_kind, q_dtype)
    with pytest.raises(LaunchStopped):
        index_topk_paged_launcher(**case, topk=64)
    (_, constexprs), = recorder.calls
    assert constexprs["BS"] == tile
    assert constexprs["DOT_FP32"] == (tile != 128)
