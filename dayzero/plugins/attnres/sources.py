"""Where an AttnRes kernel finds its sources: rows of a preallocated block buffer (one base pointer plus a block
stride) followed by separately allocated tensors passed as pointer slots `s0`..`s15` (unused slots repeat a valid
pointer and are never read)."""

from __future__ import annotations

import triton
import triton.language as tl

MAX_LISTED_SOURCES = 16


@triton.jit
def _pick_slot(i: tl.constexpr, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    # i is a compile-time constant, so the chain folds to a single pointer
    p = s0
    if i == 1:
        p = s1
    if i == 2:
        p = s2
    if i == 3:
        p = s3
    if i == 4:
        p = s4
    if i == 5:
        p = s5
    if i == 6:
        p = s6
    if i == 7:
        p = s7
    if i == 8:
        p = s8
    if i == 9:
        p = s9
    if i == 10:
        p = s10
    if i == 11:
        p = s11
    if i == 12:
        p = s12
    if i == 13:
        p = s13
    if i == 14:
        p = s14
    if i == 15:
        p = s15
    return p


@triton.jit
def source_pointers(first, COUNT: tl.constexpr, blocks, block_stride, NUM_BLOCKS: tl.constexpr,
                    NUM_SOURCES: tl.constexpr, ALIGNED: tl.constexpr,
                    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    """Base pointers of sources first .. first + COUNT - 1 ([COUNT], first a constexpr) and which of them exist.
    ALIGNED: every source starts 16-byte aligned (the launcher proves it), so a tile of gathered rows loads 16 bytes
    at a time; without the hint the compiler cannot see it through the per-row pointers and loads element by
    element."""
    idx = first + tl.arange(0, COUNT)
    # one base pointer per row: a row of the block buffer, or a listed source's own pointer
    ptrs = blocks + idx.to(tl.int64) * block_stride
    for i in tl.static_range(NUM_SOURCES - NUM_BLOCKS):
        if NUM_BLOCKS + i >= first:
            if NUM_BLOCKS + i < first + COUNT:
                ptrs = tl.where(idx == NUM_BLOCKS + i,
                                _pick_slot(i, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15),
                                ptrs)
    if ALIGNED:
        ptrs = tl.multiple_of(ptrs, 16)
    return ptrs, idx < NUM_SOURCES


@triton.jit
def source_pointers_at(first, COUNT: tl.constexpr, blocks, block_stride, NUM_BLOCKS: tl.constexpr,
                       NUM_SOURCES: tl.constexpr, ALIGNED: tl.constexpr,
                       s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    """source_pointers for a `first` known only at run time (a loop's tile index): every listed slot is a
    candidate of every row."""
    idx = first + tl.arange(0, COUNT)
    ptrs = blocks + idx.to(tl.int64) * block_stride
    for i in tl.static_range(NUM_SOURCES - NUM_BLOCKS):
        ptrs = tl.where(idx == NUM_BLOCKS + i,
                        _pick_slot(i, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15), ptrs)
    if ALIGNED:
        ptrs = tl.multiple_of(ptrs, 16)
    return ptrs, idx < NUM_SOURCES
