"""The split combine inside the Gluon sparse MLA decode: the last split of a (token, head block) to finish merges
every split's (o, lse) partial, so no second kernel runs (an option of the launcher; bench/README.md, "Sparse MLA").

Each program writes its split's partial as before, then draws a ticket from its (token, head block)'s counter: an
acq_rel atomic at GPU scope, after a CTA barrier, so that every thread's stores are ordered before it. The program
that draws the last ticket therefore sees every other split's stores. It reads the partials back from L2 (.cg loads:
L1 is not coherent), writes o and lse with combine_kernel.py's arithmetic, and puts the counter back to 0: the next
call, or the next replay of a CUDA graph, finds it zeroed. The counters are one buffer per device, allocated zeroed
once and never replaced (a captured graph keeps its address), so two streams must not run this decode at once.
"""

from __future__ import annotations

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    HAS_GLUON = True
except ImportError:
    HAS_GLUON = False

# (token, head block) pairs one device's counters serve: 256 decode tokens (MAX_DECODE_TOKENS) x 16 head blocks
MAX_COUNTERS = 4096
# value columns combined at once: [64, 128] fp32, 32 values a thread on 8 warps
COLUMNS = gl.constexpr(128) if HAS_GLUON else 128
_COUNTERS: dict[torch.device, torch.Tensor] = {}


def split_counters(entries: int, device: torch.device) -> torch.Tensor | None:
    """The device's ticket counters (int32 [MAX_COUNTERS], zero between calls), or None when `entries` pairs do not
    fit them (the caller then combines in a second kernel)."""
    if entries > MAX_COUNTERS:
        return None
    if device not in _COUNTERS:
        _COUNTERS[device] = torch.zeros(MAX_COUNTERS, dtype=torch.int32, device=device)
    return _COUNTERS[device]


def _jit(fn):
    return gluon.jit(fn) if HAS_GLUON else fn


@_jit
def _split_weights(lse_part, rows, split, stride, top):
    """exp(lse_s - top) of split `split`'s rows (0 for a split that saw no key)."""
    return gl.exp(gl.load(lse_part + split * stride + rows, cache_modifier=".cg") - top)


@_jit
def _combine_rows(o, lse, o_part, lse_part, rows, stride, num_splits, DV: gl.constexpr, LAYOUT: gl.constexpr):
    """combine_kernel.py's merge of the num_splits partials of `rows` (flat token x head rows) into o and lse."""
    ROWS: gl.constexpr = gl.SliceLayout(1, LAYOUT)
    top = gl.full([rows.shape[0]], float("-inf"), gl.float32, ROWS)
    for split in range(num_splits):
        top = gl.maximum(top, gl.load(lse_part + split * stride + rows, cache_modifier=".cg"))
    top = gl.where(top == float("-inf"), 0.0, top)
    total = gl.zeros([rows.shape[0]], gl.float32, ROWS)
    for split in range(num_splits):
        total += _split_weights(lse_part, rows, split, stride, top)
    seen = total > 0
    total = gl.where(seen, total, 1.0)
    v = gl.arange(0, COLUMNS, layout=gl.SliceLayout(0, LAYOUT))
    for c in gl.static_range(DV // COLUMNS):
        columns = c * COLUMNS + v
        acc = gl.zeros([rows.shape[0], COLUMNS], gl.float32, LAYOUT)
        for split in range(num_splits):
            part = gl.load(o_part + (split * stride + rows)[:, None] * DV + columns[None, :], cache_modifier=".cg")
            acc += _split_weights(lse_part, rows, split, stride, top)[:, None] * part
        gl.store(o + rows[:, None] * DV + columns[None, :], (acc / total[:, None]).to(o.dtype.element_ty))
    gl.store(lse + rows, gl.where(seen, top + gl.log(total), float("-inf")))


@_jit
def combine_when_last(o, lse, o_part, lse_part, counters, token, head_block, num_tokens, num_heads, num_head_blocks,
                      num_splits, BLOCK_H: gl.constexpr, DV: gl.constexpr, NUM_WARPS: gl.constexpr):
    """After a program's partial stores: the last split of its (token, head block) merges all of them."""
    # every thread's partial stores come before the ticket (the atomic's release covers what the barrier ordered)
    gl.thread_barrier()
    counter = counters + token.to(gl.int64) * num_head_blocks + head_block
    ticket = gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if ticket == num_splits - 1:
        gl.store(counter, 0)
        LAYOUT: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [NUM_WARPS, 1], [1, 0])
        rows = (token.to(gl.int64) * num_heads + head_block * BLOCK_H
                + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LAYOUT)))
        _combine_rows(o, lse, o_part, lse_part, rows, num_tokens.to(gl.int64) * num_heads, num_splits, DV, LAYOUT)
