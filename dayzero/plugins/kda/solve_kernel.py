"""X = (I + L)^{-1} per chunk for the strictly lower [64, 64] Akk of chunked KDA, by 16x16 blocks.

The four diagonal blocks are inverted by nilpotent squaring (N = -L_ii, N^16 = 0:
sum_n N^n = (I + N)(I + N^2)(I + N^4)(I + N^8)), then the off-diagonal blocks follow from
X_ij = -X_ii sum_{m=j}^{i-1} L_im X_mj. All dots are 16x16x16 in full fp32: the solve is a tiny share of the work
and the errors of X reach every output. `solve_kernel` reads the fp32 Akk that the pair kernel
(chunk_intra_kernel.py) stores; the solve stays out of the pair kernel so that neither holds the other's registers.
Under a per-head gate the Akk blocks come from plain dots, and gdn_intra_kernel.py inverts them in its registers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BC, BT, chunk_span


@triton.jit
def _dot32(a, b):
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def load_block(ptr, start, eos, h, H: tl.constexpr, i: tl.constexpr, j: tl.constexpr):
    """Block (i, j) of a chunk's [BT, BT] matrix stored as [T, H, BT] -> fp32 [BC, BC] (0 past eos)."""
    sub = tl.arange(0, BC)
    t = start + i * BC + sub
    offs = (t[:, None] * H + h) * BT + j * BC + sub[None, :]
    return tl.load(ptr + offs, mask=(t < eos)[:, None], other=0.0).to(tl.float32)


@triton.jit
def store_block(ptr, start, eos, h, H: tl.constexpr, i: tl.constexpr, j: tl.constexpr, block):
    sub = tl.arange(0, BC)
    t = start + i * BC + sub
    offs = (t[:, None] * H + h) * BT + j * BC + sub[None, :]
    tl.store(ptr + offs, block.to(ptr.dtype.element_ty), mask=(t < eos)[:, None])


@triton.jit
def store_lower_blocks(ptr, start, eos, h, H: tl.constexpr, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33):
    """The ten blocks on and below the diagonal; the blocks above it are never read (readers mask them)."""
    store_block(ptr, start, eos, h, H, 0, 0, X00)
    store_block(ptr, start, eos, h, H, 1, 0, X10)
    store_block(ptr, start, eos, h, H, 1, 1, X11)
    store_block(ptr, start, eos, h, H, 2, 0, X20)
    store_block(ptr, start, eos, h, H, 2, 1, X21)
    store_block(ptr, start, eos, h, H, 2, 2, X22)
    store_block(ptr, start, eos, h, H, 3, 0, X30)
    store_block(ptr, start, eos, h, H, 3, 1, X31)
    store_block(ptr, start, eos, h, H, 3, 2, X32)
    store_block(ptr, start, eos, h, H, 3, 3, X33)


@triton.jit
def inverse_unit_lower(L):
    """(I + L)^{-1} of a strictly lower [BC, BC] block."""
    sub = tl.arange(0, BC)
    power = -L
    X = tl.where(sub[:, None] == sub[None, :], 1.0, 0.0) + power
    for _ in tl.static_range(3):
        power = _dot32(power, power)
        X = X + _dot32(X, power)
    return X


@triton.jit
def invert_blocks(L00, L10, L11, L20, L21, L22, L30, L31, L32, L33):
    """The blocks of (I + L)^{-1} for the blocks of a strictly lower L (diagonal blocks strictly lower)."""
    return compose_inverse(inverse_unit_lower(L00), inverse_unit_lower(L11), inverse_unit_lower(L22),
                           inverse_unit_lower(L33), L10, L20, L21, L30, L31, L32)


@triton.jit
def compose_inverse(D0, D1, D2, D3, L10, L20, L21, L30, L31, L32):
    """The blocks of (I + L)^{-1} from its diagonal blocks D_i = (I + L_ii)^{-1} and L's blocks below the diagonal:
    X_ij = -D_i sum_{m=j}^{i-1} L_im X_mj."""
    X10 = -_dot32(D1, _dot32(L10, D0))
    X21 = -_dot32(D2, _dot32(L21, D1))
    X20 = -_dot32(D2, _dot32(L20, D0) + _dot32(L21, X10))
    X32 = -_dot32(D3, _dot32(L32, D2))
    X31 = -_dot32(D3, _dot32(L31, D1) + _dot32(L32, X21))
    X30 = -_dot32(D3, _dot32(L30, D0) + _dot32(L31, X10) + _dot32(L32, X20))
    return D0, X10, D1, X20, X21, D2, X30, X31, X32, D3


@triton.jit
def solve_kernel(akk, x_out, bounds, H: tl.constexpr):
    h = tl.program_id(1)
    start, eos, live = chunk_span(bounds, tl.program_id(0))
    if live:
        X00, X10, X11, X20, X21, X22, X30, X31, X32, X33 = invert_blocks(
            load_block(akk, start, eos, h, H, 0, 0), load_block(akk, start, eos, h, H, 1, 0),
            load_block(akk, start, eos, h, H, 1, 1), load_block(akk, start, eos, h, H, 2, 0),
            load_block(akk, start, eos, h, H, 2, 1), load_block(akk, start, eos, h, H, 2, 2),
            load_block(akk, start, eos, h, H, 3, 0), load_block(akk, start, eos, h, H, 3, 1),
            load_block(akk, start, eos, h, H, 3, 2), load_block(akk, start, eos, h, H, 3, 3),
        )
        store_lower_blocks(x_out, start, eos, h, H, X00, X10, X11, X20, X21, X22, X30, X31, X32, X33)
