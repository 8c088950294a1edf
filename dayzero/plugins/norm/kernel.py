"""Triton RMSNorm over rows (reference.py): plain, zero-centered, gated, and after a residual add, one launch, fp32
math.

A program normalizes BLOCK_R rows, each held whole in one tile of BLOCK_D >= D columns: a row is read once, its
sum of squares and its scaling come from the same registers. Inputs are [A, H, D] with unit column stride and any
strides over A and H, so that heads split off a wider projection row (a gate next to its query, the latent next to
its rotary part) are read where they lie: row r is (r // H, r % H). The output is contiguous.

The second input (`other`, read at its own strides) is the gate of a gated norm, or the delta of a residual add:
then the kernel also writes x + delta rounded to x's dtype (contiguous) and normalizes that rounded sum, so that the
sum and its norm are those of an add followed by the plain norm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import dependent_launch
from dayzero.plugins import device as device_info
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.output_buffer import output_like

GATES = {"sigmoid": 1, "silu": 2}
# rows narrower than this many elements (heads) share a program, up to this many elements in all
TILE_ELEMENTS = 2048
# elements of a tile a thread holds, up to MAX_WARPS warps a program
ELEMENTS_PER_THREAD = 16
MAX_WARPS = 16
# one tile a row (32 elements a thread at 16 warps): wider rows would need a loop over column tiles
MAX_DIM = 16384


@triton.jit
def _activate(g, GATE: tl.constexpr):
    if GATE == 1:
        g = tl.sigmoid(g)
    elif GATE == 2:
        g = g * tl.sigmoid(g)
    return g


@triton.jit
def _row_offsets(rows, H, outer_stride, inner_stride):
    return (rows // H) * outer_stride + (rows % H) * inner_stride


@triton.jit(do_not_specialize=["R"])
def _rms_norm_kernel(
    x, other, weight, y, total, R, H, x_outer, x_inner, o_outer, o_inner, eps,
    D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, ZERO_CENTERED: tl.constexpr,
    GATE: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    c_mask = cols < D
    mask = (rows < R)[:, None] & c_mask[None, :]
    x_rows = _row_offsets(rows, H, x_outer, x_inner)
    xs = tl.load(x + x_rows[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    o_rows = _row_offsets(rows, H, o_outer, o_inner)
    if ADD:
        delta = tl.load(other + o_rows[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        # the norm reads the sum as stored (rounded to x's dtype), as an add then a norm would
        summed = (xs + delta).to(total.dtype.element_ty)
        tl.store(total + rows[:, None] * D + cols[None, :], summed, mask=mask)
        xs = summed.to(tl.float32)
    # AOTInductor passes Python floats as fp64 scalars: keep the math in fp32
    rstd = tl.rsqrt(tl.sum(xs * xs, axis=1) / D + tl.cast(eps, tl.float32))
    w = tl.load(weight + cols, mask=c_mask, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        w = 1.0 + w
    out = xs * rstd[:, None] * w[None, :]
    if GATE != 0:
        g = tl.load(other + o_rows[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        out = out * _activate(g, GATE)
    tl.store(y + rows[:, None] * D + cols[None, :], out.to(y.dtype.element_ty), mask=mask)


def row_plan(dim: int) -> tuple[int, int, int]:
    """(block_r rows, block_d columns, num_warps) of a program: a row's columns rounded up to a power of two, rows
    added up to TILE_ELEMENTS, ELEMENTS_PER_THREAD elements a thread."""
    block_d = triton.next_power_of_2(dim)
    block_r = max(1, TILE_ELEMENTS // block_d)
    return block_r, block_d, min(MAX_WARPS, max(1, block_r * block_d // (32 * ELEMENTS_PER_THREAD)))


def _check_rows(name: str, t: torch.Tensor, dim: int) -> None:
    assert t.dim() == 3 and t.shape[-1] == dim and t.stride(-1) == 1, (
        f"{name} must be [A, H, {dim}] with unit column stride, got {tuple(t.shape)} strides {t.stride()}")


def _launch(x, other, weight, y, eps, zero_centered, gate_mode, launch, total=None) -> None:
    """y = the norm of x, or with `total` of x + other (written to total); other is the gate under gate_mode. An
    input a variant does not read or write is passed as x (read-only), as the plain norm passes x for the gate."""
    outer, heads, dim = x.shape
    assert dim <= MAX_DIM, f"rows of {dim} > {MAX_DIM} elements are not supported"
    assert weight.shape == (dim,) and weight.is_contiguous(), f"weight must be a contiguous [{dim}] vector"
    rows = outer * heads
    if statically_known_true(rows == 0):
        return
    block_r, block_d, num_warps = row_plan(dim)
    programs = triton.cdiv(rows, block_r)
    # PDL where the call is one wave of programs (a decode step's latency)
    pdl = dependent_launch.pdl_mode(x, latency_bound=statically_known_true(
        programs <= device_info.num_sms(x.device, cpu_default=2)))
    kernel = launch(_rms_norm_kernel) if launch else _rms_norm_kernel
    kernel[(programs,)](
        x, other, weight, y, x if total is None else total, rows, heads, x.stride(0), x.stride(1), other.stride(0),
        other.stride(1), eps, dim, block_r, block_d, zero_centered, gate_mode, total is not None, pdl,
        num_warps=num_warps, **dependent_launch.launch_options(pdl))


def rms_norm_launcher(
    x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False, *,
    out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """x [A, H, D] (unit column stride), weight [D] -> y [A, H, D] contiguous in x's dtype."""
    _check_rows("x", x, x.shape[-1])
    y = output_like(out, x)
    _launch(x, x, weight, y, eps, zero_centered, 0, launch)
    return y


def gated_rms_norm_launcher(
    x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float, activation: str = "sigmoid", *,
    out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """x, gate [A, H, D] (unit column stride, each its own strides), weight [D] -> y [A, H, D] contiguous in x's
    dtype."""
    _check_rows("x", x, x.shape[-1])
    _check_rows("gate", gate, x.shape[-1])
    assert gate.shape == x.shape, f"gate {tuple(gate.shape)} must have x's shape {tuple(x.shape)}"
    assert activation in GATES, f"activation must be one of {sorted(GATES)}, got {activation!r}"
    y = output_like(out, x)
    _launch(x, gate, weight, y, eps, False, GATES[activation], launch)
    return y


def add_rms_norm_launcher(
    hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False, *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden, delta [A, H, D] (unit column stride, each its own strides), weight [D] -> (hidden + delta, its norm),
    both [A, H, D] contiguous in hidden's dtype; out: the (sum, norm) buffers."""
    _check_rows("hidden", hidden, hidden.shape[-1])
    _check_rows("delta", delta, hidden.shape[-1])
    assert delta.shape == hidden.shape, f"delta {tuple(delta.shape)} must have hidden's shape {tuple(hidden.shape)}"
    total, y = (None, None) if out is None else out
    total, y = output_like(total, hidden), output_like(y, hidden)
    _launch(hidden, delta, weight, y, eps, zero_centered, 0, launch, total=total)
    return total, y
