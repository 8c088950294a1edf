"""The paged decode indexer's split kernel in Gluon (Triton's explicit-layout dialect), for Hopper: MXFP8 query and
keys on the FP8 tensor cores, one query token a sequence, DI = 128, up to 64 heads. A candidate (decode_kernel
"gluon"), not the op's default until measured against decode_select_kernel.py (bench/README.md, "Paged indexer").

Same work and outputs as decode_select_kernel's split kernel, so that its merge kernel folds the sets: a program
(sequence, split) scores its range of keys 2048 at a time into a program-private scratch, then keeps the K best of
set + block (`keep_best`, register-resident, as select_kernel.py). What the explicit layouts change, from that
kernel's sm_90 SASS (bench/README.md): Triton moved each 32-wide block's key scales into the MMA's row layout through
shared memory (a store, two loads, two barriers per block, 4 blocks a tile) and waited for each block's wgmma before
issuing the next. Here a tile is one page (64 keys), its e4m3 codes (four [64, 32] block buffers) and scale words
come by cp.async through an NS-deep ring, the words are read from shared memory straight into the MMA's row layout,
and the four blocks' wgmmas are issued together with one wait.

Scores equal the select kernel's: each block's partial (exact e4m3 products, summed by the tensor core) times its
key scale and query scale, summed over blocks in fp32, relu, times the head weight, summed over heads, times
`scale`, as an order key (select_kernel.score_keys).
"""

from __future__ import annotations

import torch
import triton

from dayzero.plugins.paged_cache.reference import PAGE_SIZE

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    HAS_GLUON = True
except ImportError:
    HAS_GLUON = False

DI, MX, MAX_HEADS = 128, 32, 64
NUM_WARPS = 4
# key tiles in flight + 1: a stage is a page (8 KB of codes, 256 B of scale words)
STAGES = 4
# bytes of one page of an MXFP8 index cache: PAGE x DI codes, then PAGE int32 scale words (four E8M0 codes each)
PAGE_BYTES = PAGE_SIZE * (DI + DI // MX)


def _jit(fn):
    return gluon.jit(fn) if HAS_GLUON else fn


if HAS_GLUON:
    # [64, 32] e4m3 block tiles, 16 bytes a thread (one cp.async each)
    BLOCK_BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [16, 2], [NUM_WARPS, 1], [1, 0]))
    FP8_TILE = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=2))
    WORDS = gl.constexpr(gl.BlockedLayout([1], [32], [NUM_WARPS], [0]))
    FLAT = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    # the sizes above, as the kernels see them
    PAGE_KEYS = gl.constexpr(PAGE_SIZE)
    WIDTH = gl.constexpr(DI)
    BLOCK = gl.constexpr(MX)
    RING = gl.constexpr(STAGES)
    WARPS = gl.constexpr(NUM_WARPS)
    PAGE_STRIDE = gl.constexpr(PAGE_BYTES)


@_jit
def _sum_combine(a, b):
    return a + b


@_jit
def _bits_below_highest(x):
    """uint32 scalar -> every bit at and below its highest set bit (0 for 0)."""
    x = x | (x >> 1)
    x = x | (x >> 2)
    x = x | (x >> 4)
    x = x | (x >> 8)
    return x | (x >> 16)


@_jit
def _kth_key(keys, K, lower):
    """select_kernel.kth_key: t with #(keys >= t) >= K and either #(keys > t) < K or #(keys >= t) == K."""
    free = _bits_below_highest(lower ^ gl.max(keys, 0))
    t = lower & ~free
    done = (free == 0).to(gl.int32)
    for i in range(32):
        bit = gl.full([], 1 << 31, gl.uint32) >> i
        if ((free & bit) != 0) & (done == 0):
            candidate = t | bit
            count = gl.sum((keys >= candidate).to(gl.int32), 0)
            t = gl.where(count >= K, candidate, t)
            done = (count == K).to(gl.int32)
    return t


@_jit
def _keep_best(keys, positions, set_keys, set_positions, K, lower):
    """select_kernel.keep_best: the K best of keys / positions (position order, key 0: none) compacted in order into
    the set's memory -> (kept, t)."""
    num = gl.sum((keys > 0).to(gl.int32), 0)
    t = gl.zeros([], gl.uint32)
    need = num * 0
    kept = num
    if num > K:
        t = _kth_key(keys, K, lower)
        need = K - gl.sum((keys > t).to(gl.int32), 0)
        kept = num * 0 + K
    above = keys > t
    tied = (keys == t) & (keys > 0)
    scan = gl.associative_scan(above.to(gl.int32) + (tied.to(gl.int32) << 16), 0, _sum_combine)
    tied_rank = scan >> 16
    take = above | (tied & (tied_rank <= need))
    slot = (scan & 65535) + gl.minimum(tied_rank, need) - 1
    # every thread has loaded its entries before compacted ones may overwrite them (slots only move left)
    gl.thread_barrier()
    gl.store(set_keys + slot, keys.to(gl.int32, bitcast=True), mask=take)
    gl.store(set_positions + slot, positions, mask=take)
    return kept, t


@_jit
def _keep_block(set_keys, set_positions, count, lower, block, end, K, KP: gl.constexpr, U: gl.constexpr):
    """The set (count entries) + the block's score keys [block, end) at set_keys[KP:] -> (count, t)."""
    UNION: gl.constexpr = gl.BlockedLayout([U // (32 * WARPS)], [32], [WARPS], [0])
    lane = gl.arange(0, U, layout=UNION)
    in_set = lane < KP
    ok = gl.where(in_set, lane < count, block + lane - KP < end)
    # the block's keys were stored by other threads
    gl.thread_barrier()
    keys = gl.load(set_keys + lane, mask=ok, other=0, cache_modifier=".cg").to(gl.uint32, bitcast=True)
    positions = gl.load(set_positions + lane, mask=ok & in_set, other=0, cache_modifier=".cg")
    positions = gl.where(in_set, positions, block + lane - KP)
    return _keep_best(keys, positions, set_keys, set_positions, K, lower)


@_jit
def _quantile(set_keys, count, k_quantile, KP: gl.constexpr):
    """A key with k_quantile of the set's entries >= it; 0 where the set is smaller."""
    SET: gl.constexpr = gl.BlockedLayout([KP // (32 * WARPS)], [32], [WARPS], [0])
    quantile = gl.zeros([], gl.uint32)
    gl.thread_barrier()
    if count >= k_quantile:
        offs = gl.arange(0, KP, layout=SET)
        keys = gl.load(set_keys + offs, mask=offs < count, other=0, cache_modifier=".cg").to(gl.uint32, bitcast=True)
        quantile = _kth_key(keys, k_quantile, gl.zeros([], gl.uint32))
    return quantile


@_jit
def _score_keys(scores, visible):
    """select_kernel.score_keys: fp32 scores -> uint32 order keys >= 1 (0 where not visible)."""
    scores = gl.where(scores == 0.0, 0.0, scores)
    bits = scores.to(gl.int32, bitcast=True)
    unsigned = bits.to(gl.uint32, bitcast=True)
    keys = gl.where(bits >= 0, unsigned | 0x80000000, ~unsigned)
    return gl.where(visible, keys, 0)


@_jit
def _issue_tile(codes_rings, words_ring, slot, cache, table_row, start, end, TILE: gl.constexpr):
    """cp.async of keys [start, start + TILE) (those < end; TILE / 64 pages) into ring slot `slot`: their four
    [TILE, 32] code blocks and their scale words, as one group."""
    r = gl.arange(0, TILE, layout=gl.SliceLayout(1, BLOCK_BYTES))
    key = start + r
    ok = key < end
    page = gl.load(table_row + key // PAGE_KEYS, mask=ok, other=0).to(gl.int64)
    rows = cache + page * PAGE_STRIDE + (key % PAGE_KEYS) * WIDTH
    c = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, BLOCK_BYTES))
    codes = (rows[:, None] + c[None, :]).to(gl.pointer_type(gl.float8e4nv), bitcast=True)
    async_copy.async_copy_global_to_shared(codes_rings[0].index(slot), codes, mask=ok[:, None])
    async_copy.async_copy_global_to_shared(codes_rings[1].index(slot), codes + BLOCK, mask=ok[:, None])
    async_copy.async_copy_global_to_shared(codes_rings[2].index(slot), codes + 2 * BLOCK, mask=ok[:, None])
    async_copy.async_copy_global_to_shared(codes_rings[3].index(slot), codes + 3 * BLOCK, mask=ok[:, None])
    w = start + gl.arange(0, TILE, layout=WORDS)
    w_page = gl.load(table_row + w // PAGE_KEYS, mask=w < end, other=0).to(gl.int64)
    words = (cache + w_page * PAGE_STRIDE + PAGE_KEYS * WIDTH).to(gl.pointer_type(gl.int32), bitcast=True)
    async_copy.async_copy_global_to_shared(words_ring.index(slot), words + w % PAGE_KEYS, mask=w < end)
    async_copy.commit_group()


@_jit
def _e8m0(code):
    """E8M0 codes (int32) -> fp32 2^(code - 127) from the exponent bits (e8m0_kernel.e8m0_scale)."""
    return (code << 23).to(gl.float32, bitcast=True)


@_jit
def _score_tile(q_blocks, q_scales, w_cols, codes_rings, words_ring, slot, block_row, block, start, end, pos, scale,
                MMA: gl.constexpr, HP: gl.constexpr, TILE: gl.constexpr):
    """Keys [start, start + TILE) of ring slot `slot` -> their score keys at block_row + (s - block)."""
    zero = gl.zeros([TILE, HP], gl.float32, MMA)
    # the tile's codes and words, copied by every thread, have landed and are visible to the tensor cores
    fence_async_shared()
    gl.thread_barrier()
    p0 = warpgroup_mma(codes_rings[0].index(slot), q_blocks.index(0).permute((1, 0)), zero, use_acc=False,
                       is_async=True)
    p1 = warpgroup_mma(codes_rings[1].index(slot), q_blocks.index(1).permute((1, 0)), zero, use_acc=False,
                       is_async=True)
    p2 = warpgroup_mma(codes_rings[2].index(slot), q_blocks.index(2).permute((1, 0)), zero, use_acc=False,
                       is_async=True)
    p3 = warpgroup_mma(codes_rings[3].index(slot), q_blocks.index(3).permute((1, 0)), zero, use_acc=False,
                       is_async=True)
    words = words_ring.index(slot).load(gl.SliceLayout(1, MMA))
    p0, p1, p2, p3 = warpgroup_mma_wait(num_outstanding=0, deps=(p0, p1, p2, p3))
    qs0, qs1, qs2, qs3 = q_scales
    logits = p0 * _e8m0(words & 0xFF)[:, None] * qs0[None, :]
    logits += p1 * _e8m0((words >> 8) & 0xFF)[:, None] * qs1[None, :]
    logits += p2 * _e8m0((words >> 16) & 0xFF)[:, None] * qs2[None, :]
    logits += p3 * _e8m0((words >> 24) & 0xFF)[:, None] * qs3[None, :]
    scores = gl.sum(gl.maximum(logits, 0.0) * w_cols[None, :], 1) * scale
    s = start + gl.arange(0, TILE, layout=gl.SliceLayout(1, MMA))
    keys = _score_keys(scores, s <= pos)
    gl.store(block_row + (s - block), keys.to(gl.int32, bitcast=True), mask=s < end)


@_jit
def _score_block(q_blocks, q_scales, w_cols, codes_rings, words_ring, cache, table_row, block_row, block, end, pos,
                 scale, MMA: gl.constexpr, HP: gl.constexpr, TILE: gl.constexpr):
    """Score keys of [block, end) into block_row[s - block], TILE keys a tile through the RING-deep ring."""
    for j in gl.static_range(RING - 1):
        _issue_tile(codes_rings, words_ring, j, cache, table_row, block + j * TILE, end, TILE)
    for start in range(block, end, TILE):
        t = (start - block) // TILE
        # this thread's copies of tile t have landed (tiles t + 1 .. t + RING - 2 may be in flight)
        async_copy.wait_group(RING - 2)
        _score_tile(q_blocks, q_scales, w_cols, codes_rings, words_ring, t % RING, block_row, block, start, end,
                    pos, scale, MMA, HP, TILE)
        # the slot of tile t - 1, whose wgmmas every warp has waited for before the barrier in _score_tile
        _issue_tile(codes_rings, words_ring, (t + RING - 1) % RING, cache, table_row, start + (RING - 1) * TILE, end,
                    TILE)
    async_copy.wait_group(0)


@_jit
def _load_query(q, q_scales, w, row, q_blocks, HI: gl.constexpr, HP: gl.constexpr, MMA: gl.constexpr):
    """The row's e4m3 query blocks into q_blocks [4, HP, 32] (heads past HI zero) -> (its four block scales [HP],
    its head weights [HP]), in the MMA's column layout."""
    h = gl.arange(0, HP, layout=gl.SliceLayout(1, BLOCK_BYTES))
    c = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, BLOCK_BYTES))
    codes = q.to(gl.pointer_type(gl.float8e4nv), bitcast=True) + (row.to(gl.int64) * HI + h)[:, None] * WIDTH
    for b in gl.static_range(WIDTH // BLOCK):
        block = gl.load(codes + (b * BLOCK + c)[None, :], mask=(h < HI)[:, None], other=0.0)
        q_blocks.index(b).store(block)
    hc = gl.arange(0, HP, layout=gl.SliceLayout(0, MMA))
    head = row.to(gl.int64) * HI + hc
    scale_codes = q_scales + head * (WIDTH // BLOCK)
    scales = (gl.where(hc < HI, _e8m0(gl.load(scale_codes, mask=hc < HI, other=0).to(gl.int32)), 0.0),
              gl.where(hc < HI, _e8m0(gl.load(scale_codes + 1, mask=hc < HI, other=0).to(gl.int32)), 0.0),
              gl.where(hc < HI, _e8m0(gl.load(scale_codes + 2, mask=hc < HI, other=0).to(gl.int32)), 0.0),
              gl.where(hc < HI, _e8m0(gl.load(scale_codes + 3, mask=hc < HI, other=0).to(gl.int32)), 0.0))
    w_cols = gl.load(w + head, mask=hc < HI, other=0.0).to(gl.float32)
    # the stores above before the wgmmas' reads
    fence_async_shared()
    gl.thread_barrier()
    return scales, w_cols


@_jit
def _gluon_split_kernel(
    q, q_scales, w, cache, block_table, positions, cu_seqlens, set_keys, set_positions, counts, floors,
    num_splits_used, scale, num_splits, min_chunk, split_keys, table_stride, K,
    HI: gl.constexpr, HP: gl.constexpr, KP: gl.constexpr, U: gl.constexpr, TILE: gl.constexpr,
):
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                  instr_shape=[16, HP, 32])
    # a ring a 32-wide block: copies into one allocation get a barrier between them (the shared-memory barrier pass)
    codes_rings = (gl.allocate_shared_memory(gl.float8e4nv, [RING, TILE, BLOCK], FP8_TILE),
                   gl.allocate_shared_memory(gl.float8e4nv, [RING, TILE, BLOCK], FP8_TILE),
                   gl.allocate_shared_memory(gl.float8e4nv, [RING, TILE, BLOCK], FP8_TILE),
                   gl.allocate_shared_memory(gl.float8e4nv, [RING, TILE, BLOCK], FP8_TILE))
    words_ring = gl.allocate_shared_memory(gl.int32, [RING, TILE], FLAT)
    q_blocks = gl.allocate_shared_memory(gl.float8e4nv, [WIDTH // BLOCK, HP, BLOCK], FP8_TILE)
    seq = gl.program_id(0)
    split = gl.program_id(1)
    row = gl.load(cu_seqlens + seq)
    if row < gl.load(cu_seqlens + seq + 1):
        q_scales4, w_cols = _load_query(q, q_scales, w, row, q_blocks, HI, HP, MMA)
        table_row = block_table + seq.to(gl.int64) * table_stride
        pos = gl.load(positions + row).to(gl.int32)
        num_keys = pos + 1
        # decode_select_kernel's split_chunk over this kernel's 64-key tiles
        splits = gl.minimum(num_splits, gl.cdiv(num_keys, split_keys))
        chunk = gl.cdiv(gl.maximum(gl.cdiv(num_keys, splits), min_chunk), TILE) * TILE
        used = gl.cdiv(num_keys, chunk)
        lo = split * chunk
        hi = gl.minimum(lo + chunk, num_keys)
        which = row.to(gl.int64) * num_splits + split
        row_keys = set_keys + which * U
        row_positions = set_positions + which * KP
        count = num_keys * 0
        tau = gl.zeros([], gl.uint32)
        for block in range(lo, hi, U - KP):
            end = gl.minimum(block + U - KP, hi)
            _score_block(q_blocks, q_scales4, w_cols, codes_rings, words_ring, cache, table_row, row_keys + KP, block,
                         end, pos, scale, MMA, HP, TILE)
            lower = gl.where(count >= K, tau, 0)
            count, tau = _keep_block(row_keys, row_positions, count, lower, block, end, K, KP, U)
            # the selection has read the block before the next one overwrites it
            gl.thread_barrier()
        quantile = _quantile(row_keys, count, gl.cdiv(K, gl.maximum(used - 1, 1)), KP)
        gl.store(counts + which, count)
        gl.store(floors + 2 * which, tau.to(gl.int32, bitcast=True))
        gl.store(floors + 2 * which + 1, quantile.to(gl.int32, bitcast=True))
        if split == 0:
            gl.store(num_splits_used + row, used)


def gluon_select_applies(q: torch.Tensor, q_scales, key_quant: bool, rows_per_program: int) -> bool:
    """Whether this kernel can run a decode call: Gluon, an sm_90 GPU, an MXFP8 query (e4m3 bytes + E8M0 scales)
    and cache, DI = 128, at most MAX_HEADS heads, one query token a sequence."""
    return (HAS_GLUON and q.is_cuda and torch.cuda.get_device_capability(q.device)[0] == 9 and key_quant
            and q_scales is not None and q.dtype == torch.uint8 and q.shape[-1] == DI and q.shape[1] <= MAX_HEADS
            and rows_per_program == 1)


def gluon_tile_keys(num_heads: int) -> int:
    """Keys a tile: two pages up to 32 heads; one page above, where four [128, 64] fp32 partials would take 256
    registers a thread."""
    return 2 * PAGE_SIZE if num_heads <= 32 else PAGE_SIZE


def gluon_split_launch(q, q_scales, w, cache, block_table, positions, cu_seqlens, set_keys, set_positions, counts,
                       floors, used, scale, num_splits, min_chunk, split_keys, topk, kp, union):
    """One launch of the Gluon split kernel over decode_select_kernel's buffers (its merge kernel follows)."""
    num_seqs = cu_seqlens.shape[0] - 1
    num_heads = q.shape[1]
    tile = gluon_tile_keys(num_heads)
    assert min_chunk % tile == 0 and (union - kp) % tile == 0, f"chunks and blocks must be whole {tile}-key tiles"
    _gluon_split_kernel[(num_seqs, num_splits)](
        q, q_scales, w, cache, block_table, positions, cu_seqlens, set_keys, set_positions, counts, floors, used,
        scale, num_splits, min_chunk, split_keys, block_table.stride(0), topk,
        HI=num_heads, HP=max(16, triton.next_power_of_2(num_heads)), KP=kp, U=union, TILE=tile, num_warps=NUM_WARPS)

