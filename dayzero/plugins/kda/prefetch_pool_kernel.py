"""One KDA decode step (L = 1) over a state pool, each program walking tiles with the next one's loads in flight.

The one-tile-per-program pool kernel (recurrent_kernel.py) has nothing in flight between its state load and its
store, and waits on the slot before it can issue the state load. Here a fixed grid of one-warp programs walks the
(row, head, V block) tiles; before a tile steps, the next tile's state and vectors are loaded into registers and the
slot of the tile after that is read, so every step overlaps the next tile's memory round trips. Two tiles live in
registers at once, so the V blocks are narrow (16 wide on K = 128: 64 state registers a tile). With L = 1 a row's
one slot is its start and its write slot; a padding row (slot -1) reads and writes no state and outputs zeros.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.recurrent_kernel import kda_token, l2_normalize


@triton.jit
def _slot(state_slots, tile, num_tiles, NV: tl.constexpr, H: tl.constexpr):
    """The state slot of tile `tile` (-1 past the last tile: nothing read or written)."""
    return tl.load(state_slots + tile // NV // H, mask=tile < num_tiles, other=-1).to(tl.int64)


@triton.jit
def _state_where(state, slot, tile, ok, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    """Addresses of tile `tile`'s [K, BV] state block at `slot`, and their mask (all off when slot < 0)."""
    h = tile // (V // BV) % H
    ov = tile % (V // BV) * BV + tl.arange(0, BV)
    live = (tl.zeros([K, BV], tl.int64) + slot) >= 0
    return state + tl.maximum(slot, 0) * (H * K * V) + h * K * V + ok[:, None] * V + ov[None, :], live


@triton.jit
def _state_tile(state, slot, tile, ok, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    where, live = _state_where(state, slot, tile, ok, H, K, V, BV)
    return tl.load(where, mask=live, other=0.0)


@triton.jit
def _vectors(q, k, g, v, beta, tile, num_tiles, ok, q_sb, k_sb, v_sb, g_sb, beta_sb,
             H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    """Tile `tile`'s q, k, g [K], v [BV] and beta as stored (past the last tile: the last tile's, never used)."""
    NV: tl.constexpr = V // BV
    tile = tl.minimum(tile, num_tiles - 1)
    b = (tile // NV // H).to(tl.int64)
    h = tile // NV % H
    ov = tile % NV * BV + tl.arange(0, BV)
    return (tl.load(q + b * q_sb + h * K + ok), tl.load(k + b * k_sb + h * K + ok),
            tl.load(g + b * g_sb + h * K + ok), tl.load(v + b * v_sb + h * V + ov),
            tl.load(beta + b * beta_sb + h))


@triton.jit
def prefetch_kda_pool_kernel(
    q, k, v, g, beta, o, state, state_slots, num_tiles, scale, q_sb, k_sb, v_sb, g_sb, beta_sb,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
):
    NV: tl.constexpr = V // BV
    ok = tl.arange(0, K)
    grid = tl.num_programs(0)
    tile = tl.program_id(0)
    strides = (q_sb, k_sb, v_sb, g_sb, beta_sb)
    slot = _slot(state_slots, tile, num_tiles, NV, H)
    S = _state_tile(state, slot, tile, ok, H, K, V, BV)
    b_q, b_k, b_g, b_v, b_beta = _vectors(q, k, g, v, beta, tile, num_tiles, ok, *strides, H, K, V, BV)
    next_slot = _slot(state_slots, tile + grid, num_tiles, NV, H)
    for _ in tl.range(tl.program_id(0), num_tiles, grid):
        upcoming = tile + grid
        # the next tile's loads go out before this one steps; the slot after it is read a tile ahead, so the next
        # state load never waits on its slot
        n_S = _state_tile(state, next_slot, upcoming, ok, H, K, V, BV)
        n_q, n_k, n_g, n_v, n_beta = _vectors(q, k, g, v, beta, upcoming, num_tiles, ok, *strides, H, K, V, BV)
        after_slot = _slot(state_slots, upcoming + grid, num_tiles, NV, H)
        fq = b_q.to(tl.float32)
        fk = b_k.to(tl.float32)
        if USE_QK_L2NORM:
            fq = l2_normalize(fq)
            fk = l2_normalize(fk)
        S, b_o = kda_token(S, fq * scale, fk, b_v.to(tl.float32), b_g.to(tl.float32), b_beta.to(tl.float32))
        where, live = _state_where(state, slot, tile, ok, H, K, V, BV)
        tl.store(where, S, mask=live)
        b = (tile // NV // H).to(tl.int64)
        ov = tile % NV * BV + tl.arange(0, BV)
        tl.store(o + (b * H + tile // NV % H) * V + ov, tl.where(slot >= 0, b_o, 0.0).to(o.dtype.element_ty))
        tile, slot, next_slot = upcoming, next_slot, after_slot
        S = n_S
        b_q, b_k, b_g, b_v, b_beta = n_q, n_k, n_g, n_v, n_beta
