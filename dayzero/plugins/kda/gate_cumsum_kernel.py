"""G = in-chunk cumsum of the per-channel log-space gate g, one program per (K tile, chunk, head), stored in fp32.

Computed once here because a Triton scan along the token axis is slow and the pair and WY kernels need G in
several programs per chunk (on the H200 the pair kernel with its own scans takes 1.3 ms at T8192 H32). A per-head
gate is cumulated inside gdn_intra_kernel.py, one [64] scan a program."""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BT, chunk_span, load_rows


@triton.jit
def gate_cumsum_kernel(g, g_cum, bounds, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    h = tl.program_id(2)
    start, eos, live = chunk_span(bounds, tl.program_id(1))
    if live:
        t = start + tl.arange(0, BT)
        valid = t < eos
        kc = tl.program_id(0) * BK + tl.arange(0, BK)
        G = tl.cumsum(load_rows(g, t, valid, h, H, K, kc), axis=0)
        tl.store(g_cum + (t[:, None] * H + h) * K + kc[None, :], G, mask=valid[:, None] & (kc[None, :] < K))
