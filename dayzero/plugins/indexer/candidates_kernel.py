"""A Top-K set fed through a buffer of candidates: keys are filtered against the set's K-th key before any search.

A key can enter a full set only above the set's K-th key tau (an equal key comes later and loses the tie). So a
block of new keys is first compared with tau and its survivors appended, in position order, to a buffer of U - KP
candidates behind the set; the set and the buffer are folded (select_kernel.keep_best: one bitwise search, one
scan) only when the buffer would overflow, and once at the end. On random scores few keys beat a rising tau: most
blocks cost one compare and one scan instead of a search (a search is up to 32 block-wide counts).
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.indexer.select_kernel import keep_best


@triton.jit
def fold_candidates(set_keys, set_positions, cand_keys, cand_positions, count, tau, pending, K,
                    KP: tl.constexpr, U: tl.constexpr):
    """The set (count entries, K-th key tau where full) + `pending` candidates (later positions) -> (count, t), the
    K best kept in the set (keep_best)."""
    lane = tl.arange(0, U)
    in_set = lane < KP
    ok = tl.where(in_set, lane < count, lane - KP < pending)
    # the candidates were stored, and the previous fold's compaction done, by other threads
    tl.debug_barrier()
    keys = tl.where(in_set, tl.load(set_keys + lane, mask=ok & in_set, other=0, cache_modifier=".cg"),
                    tl.load(cand_keys + lane - KP, mask=ok & ~in_set, other=0, cache_modifier=".cg"))
    positions = tl.where(in_set, tl.load(set_positions + lane, mask=ok & in_set, other=0, cache_modifier=".cg"),
                         tl.load(cand_positions + lane - KP, mask=ok & ~in_set, other=0, cache_modifier=".cg"))
    lower = tl.where(count >= K, tau, 0)
    return keep_best(keys.to(tl.uint32, bitcast=True), positions, set_keys, set_positions, K, lower)


@triton.jit
def _block_keys(block_keys, lane, num):
    return tl.load(block_keys + lane, mask=lane < num, other=0, cache_modifier=".cg").to(tl.uint32, bitcast=True)


@triton.jit
def filter_block(block_keys, num, first_position, set_keys, set_positions, cand_keys, cand_positions, count, tau,
                 pending, K, KP: tl.constexpr, U: tl.constexpr, BLOCK: tl.constexpr):
    """The `num` keys at block_keys (positions first_position + i, after every entry so far) into the set ->
    (count, tau, pending)."""
    lane = tl.arange(0, BLOCK)
    # the block's keys were stored by other threads
    tl.debug_barrier()
    keys = _block_keys(block_keys, lane, num)
    if pending + tl.sum((keys > tl.where(count >= K, tau, 0)).to(tl.int32)) > U - KP:
        count, tau = fold_candidates(set_keys, set_positions, cand_keys, cand_positions, count, tau, pending, K, KP, U)
        pending = tl.zeros([], tl.int32)
        # loaded again (from the L1 / L2): the block is not held in registers through the fold
        keys = _block_keys(block_keys, lane, num)
    take = keys > tl.where(count >= K, tau, 0)
    slot = pending + tl.cumsum(take.to(tl.int32), axis=0) - 1
    tl.store(cand_keys + slot, keys.to(tl.int32, bitcast=True), mask=take)
    tl.store(cand_positions + slot, first_position + lane, mask=take)
    return count, tau, pending + tl.sum(take.to(tl.int32))


def filter_block_size(kp: int, union: int) -> int:
    """Keys a filter step reads: the largest power of two that fits the buffer of union - kp candidates."""
    return 1 << ((union - kp).bit_length() - 1)
