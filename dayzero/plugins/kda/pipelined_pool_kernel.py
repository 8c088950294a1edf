"""One KDA decode step (L = 1) over a state pool through a software-pipelined loop of (row, head, V block) tiles.

The one-tile-per-program pool kernel (recurrent_kernel.py) loads its state tile, steps, and stores it: between its
load and its store it has nothing in flight, and a batch of a few thousand tiles leaves a partial last wave. Here a
fixed grid of one-warp programs walks the tiles in a flat loop that Triton pipelines two stages deep: the state tile
of the next iteration is copied asynchronously into shared memory (its slot loaded one stage earlier) while the
current one steps and is written back. With L = 1 a row's one slot is both its start and its write slot; a padding
row (slot -1) reads and writes no state and outputs zeros.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.kda.step_kernel import gate_offsets, kda_token, l2_normalize, state_decay


@triton.jit
def pipelined_kda_pool_kernel(
    q, k, v, g, beta, o, state, state_slots, num_tiles, scale, q_sb, k_sb, v_sb, g_sb, beta_sb,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr, PER_HEAD_GATE: tl.constexpr, STAGES: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    NV: tl.constexpr = V // BV
    ok = tl.arange(0, K)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), num_stages=STAGES):
        # a head's V blocks are neighbours in walking order, as in the one-tile kernel
        bh = tile // NV
        b = (bh // H).to(tl.int64)
        h = bh % H
        hk = h // (H // HK)
        ov = tile % NV * BV + tl.arange(0, BV)
        slot = tl.load(state_slots + b).to(tl.int64)
        live = slot >= 0
        # the row's liveness over the whole tile (uniform, so the loads stay vectorized)
        live_tile = (tl.zeros([K, BV], tl.int64) + slot) >= 0
        where = state + tl.maximum(slot, 0) * (H * K * V) + h * K * V + ok[:, None] * V + ov[None, :]
        S = tl.load(where, mask=live_tile, other=0.0)
        b_q = tl.load(q + b * q_sb + hk * K + ok).to(tl.float32)
        b_k = tl.load(k + b * k_sb + hk * K + ok).to(tl.float32)
        b_g = tl.load(g + b * g_sb + gate_offsets(h, ok, K, PER_HEAD_GATE)).to(tl.float32)
        b_v = tl.load(v + b * v_sb + h * V + ov).to(tl.float32)
        b_beta = tl.load(beta + b * beta_sb + h).to(tl.float32)
        if USE_QK_L2NORM:
            b_q = l2_normalize(b_q)
            b_k = l2_normalize(b_k)
        S, b_o = kda_token(S, b_q * scale, b_k, b_v, state_decay(b_g, PER_HEAD_GATE), b_beta)
        tl.store(o + (b * H + h) * V + ov, tl.where(live, b_o, 0.0).to(o.dtype.element_ty))
        tl.store(where, S, mask=live_tile)
