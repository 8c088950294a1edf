"""Streaming exact Top-K selection in Triton for the prefill indexer kernel.

A candidate is one int64 *key*: the fp32 score mapped onto [0, 2^32) in its own order, shifted up 31 bits, with
2^31 - 1 - position in the low bits. Keys are unique within a row and their integer order is the reference order
(descending score, ties to the earlier position), so a threshold on keys is exact. -1 marks "no candidate".

Each query row owns a buffer of CAP keys in global memory (L2-resident, private to one program). Tiles of new keys
above the row's threshold `tau` are appended (prefix-sum compaction); when a row would overflow, it is shrunk in place
to a threshold that keeps between K and K + SLACK keys, found by a bitwise search over the key bits below the common
prefix of the row's smallest and largest key. The final shrink uses SLACK = 0 (exactly K kept), then the row's
positions are sorted ascending (the output order, reference.py). Keys below a threshold already have K better keys, so
nothing of the true Top-K is ever dropped.
"""

from __future__ import annotations

import triton
import triton.language as tl

INT64_MAX = tl.constexpr(9223372036854775807)
INT32_MAX = tl.constexpr(2147483647)


@triton.jit
def pack_keys(scores, positions, visible):
    """scores fp32 [R, C], positions int32 [1 or R, C], visible [R, C] -> int64 keys (-1 where not visible)."""
    # -0.0 and +0.0 are one score for the reference (relu zeros are frequent); one bit pattern keeps them tied
    scores = tl.where(scores == 0.0, 0.0, scores)
    bits = scores.to(tl.int32, bitcast=True).to(tl.int64)
    ordered = tl.where(bits >= 0, bits + 2147483648, -1 - bits)
    keys = (ordered << 31) | (2147483647 - positions.to(tl.int64))
    return tl.where(visible, keys, -1)


@triton.jit
def unpack_positions(keys):
    """int64 keys -> int32 positions (-1 for empty)."""
    return tl.where(keys >= 0, 2147483647 - (keys & 2147483647), -1).to(tl.int32)


@triton.jit
def _highest_bit(x):
    """Index of the highest set bit of an int64 scalar >= 0 (may read one too high; clamped to [0, 62])."""
    exponent = ((x.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 2047) - 1023
    return tl.minimum(tl.maximum(exponent, 0), 62)


@triton.jit
def _threshold(keys, K, SLACK):
    """keys [C] int64 (-1 empty), more than K valid -> t with K <= #(keys >= t) <= K + SLACK (t >= 0)."""
    lo = tl.min(tl.where(keys >= 0, keys, INT64_MAX))
    hi = tl.max(keys)
    one = tl.full([], 1, tl.int64)
    bit = _highest_bit(lo ^ hi)
    t = lo & ~(((one << bit) - 1) | (one << bit))
    todo = (tl.sum((keys >= 0).to(tl.int32)) > K + SLACK).to(tl.int32)
    while (bit >= 0) & (todo != 0):
        candidate = t | (one << bit)
        count = tl.sum((keys >= candidate).to(tl.int32))
        enough = count >= K
        t = tl.where(enough, candidate, t)
        todo = tl.where(enough & (count <= K + SLACK), 0, todo)
        bit -= 1
    return t


@triton.jit
def shrink_row(row, count, K, SLACK, CAP: tl.constexpr):
    """Compact the buffer `row` (count keys) in place to those >= a threshold t -> (new count, t)."""
    offs = tl.arange(0, CAP)
    # earlier appends by other threads of this program must be visible; loads bypass L1 for the same reason
    tl.debug_barrier()
    keys = tl.load(row + offs, mask=offs < count, other=-1, cache_modifier=".cg")
    t = _threshold(keys, K, SLACK)
    # compaction piece by piece (fewer live registers): a key only moves left, into pieces already read
    PIECE: tl.constexpr = CAP // 4 if CAP >= 64 else CAP
    part = tl.arange(0, PIECE)
    kept = count * 0
    for start in tl.static_range(0, CAP, PIECE):
        piece = tl.load(row + start + part, mask=start + part < count, other=-1, cache_modifier=".cg")
        keep = piece >= t
        slot = kept + tl.cumsum(keep.to(tl.int32), axis=0) - 1
        # every thread has read the piece before compacted keys may overwrite it
        tl.debug_barrier()
        tl.store(row + slot, piece, mask=keep)
        kept += tl.sum(keep.to(tl.int32), axis=0)
    return kept, t


@triton.jit
def shrink_rows(buf, row_offsets, count, tau, overflow, K, SLACK, CAP: tl.constexpr, R: tl.constexpr):
    """Shrink every row r with overflow[r]; count, tau [R] updated."""
    lane = tl.arange(0, R)
    for r in range(R):
        here = lane == r
        if tl.sum((here & overflow).to(tl.int32)) > 0:
            offset = tl.sum(tl.where(here, row_offsets, 0))
            new_count, t = shrink_row(buf + offset, tl.sum(tl.where(here, count, 0)), K, SLACK, CAP)
            count = tl.where(here, new_count, count)
            tau = tl.where(here, t, tau)
    return count, tau


@triton.jit
def append_keys(buf, row_offsets, keys, count, tau):
    """Append the keys [R, C] above each row's tau to its buffer (buf + row_offsets[r]; the caller guarantees
    room) -> count [R]."""
    take = keys > tau[:, None]
    slot = count[:, None] + tl.cumsum(take.to(tl.int32), axis=1) - 1
    tl.store(buf + row_offsets[:, None] + slot, keys, mask=take)
    return count + tl.sum(take.to(tl.int32), axis=1)


@triton.jit
def insert_keys(buf, row_offsets, keys, count, tau, K, SLACK, CAP: tl.constexpr, R: tl.constexpr):
    """append_keys, shrinking first the rows that would overflow their CAP keys (C <= CAP - K - SLACK)
    -> (count, tau) [R]."""
    take = keys > tau[:, None]
    grown = count + tl.sum(take.to(tl.int32), axis=1)
    if tl.max(grown) > CAP:
        count, tau = shrink_rows(buf, row_offsets, count, tau, grown > CAP, K, SLACK, CAP, R)
    return append_keys(buf, row_offsets, keys, count, tau), tau


@triton.jit
def write_topk_row(row, count, out_row, K, KP: tl.constexpr, CAP: tl.constexpr):
    """Reduce the buffer `row` to its K best keys and store their positions, ascending, -1 padded, to out_row[:K]."""
    if count > K:
        count, t = shrink_row(row, count, K, 0, CAP)
    offs = tl.arange(0, KP)
    tl.debug_barrier()
    keys = tl.load(row + offs, mask=offs < count, other=-1, cache_modifier=".cg")
    positions = unpack_positions(keys)
    store_ascending(positions, positions >= 0, out_row, K, KP)


@triton.jit
def store_ascending(positions, kept, out_row, width, KP: tl.constexpr):
    """The kept positions [KP] (int32) sorted ascending, -1 padded, into out_row[:width]: an int32 sort, the empty
    entries last."""
    offs = tl.arange(0, KP)
    ordered = tl.sort(tl.where(kept, positions, INT32_MAX))
    tl.store(out_row + offs, tl.where(ordered < INT32_MAX, ordered, -1), mask=offs < width)


def buffer_layout(topk: int, chunk: int) -> tuple[int, int, int]:
    """(KP, CAP, SLACK) for rows selecting `topk` from chunks of `chunk` keys appended between shrinks: KP the sort
    width (power of two), CAP the buffer length (power of two, >= KP + chunk), SLACK = CAP - chunk - topk the
    overshoot a streaming shrink may keep."""
    kp = max(16, triton.next_power_of_2(topk))
    cap = triton.next_power_of_2(kp + max(kp, chunk))
    return kp, cap, cap - chunk - topk
