"""Triton grouped GEMM over expert-sorted rows: c[rows of e] = a[rows of e] @ b[e]^T, b [E, N, K] (nn.Linear
layout), rows of expert e = expert_offsets[e]:expert_offsets[e+1]. The gated form multiplies by two weights
(gate w1, up w3) and applies the activation in the epilogue, writing act(a w1^T) * (a w3^T) directly.

Tiles: the grid's first axis walks N tiles (so the programs that share an A tile run together), the second walks
M tiles of all experts in order; a program finds its expert from the running sum of per-expert tile counts (all
E offsets fit in registers). The grid has an upper bound of M tiles, cdiv(M, BLOCK_M) + min(E, M); programs past
the last tile return at once. It runs where torch._grouped_mm is missing or the experts get few rows each (decode),
for MXFP4 weights, and under the CPU interpreter.

MXFP4 weights (W4A16): b is packed E2M1, uint8 [E, N, K/2] (low nibble = even k), with one E8M0 scale per 32 along
K, uint8 [E, N, K/32]. A program loads the packed [BLOCK_K/2, BLOCK_N] tile, dequantizes its low and high nibbles
into two tiles (the even and odd k), and takes two dots against the even and odd columns of the A tile, so decode
streams 4.25 bits a weight. Every dequantized value is exact in bf16, so the result is the dense GEMM's on
mxfp4_dequantize(b, b_scale) weights.

One extra dense expert (an always-on shared expert of the routed experts' shape) may join the launch without a
copy into the bank: b_extra (and b_up_extra) [N, K] are expert E's weights, E = the bank's expert count, and
expert_offsets then has E+2 entries; the programs of expert E read their tiles from the extra pointers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import device as device_info
from dayzero.plugins.moe.activation_kernel import ACTIVATION_CODES, gated_act
from dayzero.plugins.quant.reference import MX_BLOCK


@triton.jit
def _tile_rows(expert_offsets, tile, NUM_EXPERTS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr):
    """(expert, first row, end row) of M tile `tile`; expert == NUM_EXPERTS past the last tile."""
    e = tl.arange(0, BLOCK_E)
    starts = tl.load(expert_offsets + e, mask=e < NUM_EXPERTS, other=0)
    ends = tl.load(expert_offsets + e + 1, mask=e < NUM_EXPERTS, other=0)
    tiles = (ends - starts + BLOCK_M - 1) // BLOCK_M
    tiles_through = tl.cumsum(tiles, axis=0)
    expert = tl.sum((tiles_through <= tile).to(tl.int32), axis=0)
    mine = e == expert
    first_tile = tl.sum(tl.where(mine, tiles_through - tiles, 0), axis=0)
    row_start = tl.sum(tl.where(mine, starts, 0), axis=0) + (tile - first_tile) * BLOCK_M
    return expert, row_start, tl.sum(tl.where(mine, ends, 0), axis=0)


@triton.jit
def _dense_dots(a, b, b_up, expert, rows, row_mask, cols, col_mask, N, K, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GATED: tl.constexpr, PRECISION: tl.constexpr,
                UPCAST: tl.constexpr):
    """(a b[expert]^T, a b_up[expert]^T) over the tile's rows and columns, fp32 [BLOCK_M, BLOCK_N] each."""
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a + rows.to(tl.int64)[:, None] * K + ks[None, :]
    # [BLOCK_K, BLOCK_N] tile of b[expert]^T
    b_offs = expert.to(tl.int64) * N * K + cols.to(tl.int64)[None, :] * K + ks[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = ks + k0 < K
        a_tile = tl.load(a_ptrs + k0, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b_mask = k_mask[:, None] & col_mask[None, :]
        b_tile = tl.load(b + b_offs + k0, mask=b_mask, other=0.0)
        if UPCAST:
            a_tile, b_tile = a_tile.to(tl.float32), b_tile.to(tl.float32)
        acc = tl.dot(a_tile, b_tile, acc, input_precision=PRECISION)
        if GATED:
            up_tile = tl.load(b_up + b_offs + k0, mask=b_mask, other=0.0)
            if UPCAST:
                up_tile = up_tile.to(tl.float32)
            acc_up = tl.dot(a_tile, up_tile, acc_up, input_precision=PRECISION)
    return acc, acc_up


@triton.jit
def _e2m1_to_float(bits, scale):
    """E2M1 codes moved to fp16 bit positions (sign to bit 15, exponent and mantissa to bits 11-9) -> their values
    times `scale`, fp32."""
    # read as fp16 the codes are E2M1 * 2^-14, with 0 and 0.5 as fp16 zero and subnormal, which the conversion to
    # fp32 keeps exactly: no select per case, about half the integer work of building fp32 bits
    return bits.to(tl.float16, bitcast=True).to(tl.float32) * scale


@triton.jit
def _mxfp4_tiles(b, b_scale, b_offs, s_offs, b_mask, s_mask, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """The packed [BLOCK_K/2, BLOCK_N] tile at b_offs -> its even-k and odd-k rows dequantized, fp32 each."""
    packed = tl.load(b + b_offs, mask=b_mask, other=0).to(tl.uint16)
    # E8M0 s means 2^(s-127); the fp16 reading above needs 2^14 more. Scales past 2^113 (never in weights) overflow
    scale = ((tl.load(b_scale + s_offs, mask=s_mask, other=0).to(tl.uint32) + 14) << 23).to(tl.float32, bitcast=True)
    # packed row j holds k = 2j and 2j + 1, both in scale block j // 16
    scale = tl.reshape(tl.broadcast_to(scale[:, None, :], (BLOCK_K // 32, 16, BLOCK_N)), (BLOCK_K // 2, BLOCK_N))
    even = ((packed & 0x7) << 9) | ((packed & 0x8) << 12)
    odd = ((packed & 0x70) << 5) | ((packed & 0x80) << 8)
    return _e2m1_to_float(even, scale), _e2m1_to_float(odd, scale)


@triton.jit
def _mxfp4_dots(a, b, b_up, b_scale, b_up_scale, expert, rows, row_mask, cols, col_mask, N, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GATED: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """_dense_dots with MXFP4 b and b_up: packed [E, N, K/2], scales [E, N, K/32]; BLOCK_K a multiple of 64."""
    js = tl.arange(0, BLOCK_K // 2)
    blocks = tl.arange(0, BLOCK_K // 32)
    # the even and odd columns of the A tile, [BLOCK_M, BLOCK_K/2] each
    a_ptrs = a + rows.to(tl.int64)[:, None] * K + 2 * js[None, :]
    weight_rows = expert.to(tl.int64) * N + cols.to(tl.int64)
    b_offs = weight_rows[None, :] * (K // 2) + js[:, None]
    s_offs = weight_rows[None, :] * (K // 32) + blocks[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        j_mask = js + k0 // 2 < K // 2
        a_mask = row_mask[:, None] & j_mask[None, :]
        a_even = tl.load(a_ptrs + k0, mask=a_mask, other=0.0)
        a_odd = tl.load(a_ptrs + k0 + 1, mask=a_mask, other=0.0)
        if UPCAST:
            a_even, a_odd = a_even.to(tl.float32), a_odd.to(tl.float32)
        b_mask = j_mask[:, None] & col_mask[None, :]
        s_mask = (blocks + k0 // 32 < K // 32)[:, None] & col_mask[None, :]
        w_even, w_odd = _mxfp4_tiles(b, b_scale, b_offs + k0 // 2, s_offs + k0 // 32, b_mask, s_mask, BLOCK_K,
                                     BLOCK_N)
        acc = tl.dot(a_even, w_even.to(a_even.dtype), acc, input_precision=PRECISION)
        acc = tl.dot(a_odd, w_odd.to(a_odd.dtype), acc, input_precision=PRECISION)
        if GATED:
            up_even, up_odd = _mxfp4_tiles(b_up, b_up_scale, b_offs + k0 // 2, s_offs + k0 // 32, b_mask, s_mask,
                                           BLOCK_K, BLOCK_N)
            acc_up = tl.dot(a_even, up_even.to(a_even.dtype), acc_up, input_precision=PRECISION)
            acc_up = tl.dot(a_odd, up_odd.to(a_odd.dtype), acc_up, input_precision=PRECISION)
    return acc, acc_up


@triton.jit
def _mxfp4_scaled_dots(a, b, b_up, b_scale, b_up_scale, expert, rows, row_mask, cols, col_mask, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GATED: tl.constexpr):
    """_mxfp4_dots through tl.dot_scaled (a bf16): Triton's own E2M1 upcast before the bf16 MMA on Hopper, which
    lowers the decode to byte permutes rather than the per-element integer ops above (the bench picks one)."""
    ks = tl.arange(0, BLOCK_K)
    js = tl.arange(0, BLOCK_K // 2)
    blocks = tl.arange(0, BLOCK_K // 32)
    a_ptrs = a + rows.to(tl.int64)[:, None] * K + ks[None, :]
    weight_rows = expert.to(tl.int64) * N + cols.to(tl.int64)
    # packed [BLOCK_K/2, BLOCK_N] (K-major, as dot_scaled takes its rhs) and scales [BLOCK_N, BLOCK_K/32]
    b_offs = weight_rows[None, :] * (K // 2) + js[:, None]
    s_offs = weight_rows[:, None] * (K // 32) + blocks[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_tile = tl.load(a_ptrs + k0, mask=row_mask[:, None] & (ks + k0 < K)[None, :], other=0.0)
        b_mask = (js + k0 // 2 < K // 2)[:, None] & col_mask[None, :]
        s_mask = col_mask[:, None] & (blocks + k0 // 32 < K // 32)[None, :]
        packed = tl.load(b + b_offs + k0 // 2, mask=b_mask, other=0)
        scale = tl.load(b_scale + s_offs + k0 // 32, mask=s_mask, other=0)
        acc = tl.dot_scaled(a_tile, None, "bf16", packed, scale, "e2m1", acc)
        if GATED:
            packed_up = tl.load(b_up + b_offs + k0 // 2, mask=b_mask, other=0)
            scale_up = tl.load(b_up_scale + s_offs + k0 // 32, mask=s_mask, other=0)
            acc_up = tl.dot_scaled(a_tile, None, "bf16", packed_up, scale_up, "e2m1", acc_up)
    return acc, acc_up


@triton.jit
def _grouped_gemm_kernel(
    a, b, b_up, b_scale, b_up_scale, b_extra, b_up_extra, c, expert_offsets, N, K, beta, linear_beta,
    NUM_EXPERTS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GATED: tl.constexpr, ACTIVATION: tl.constexpr, HAS_LINEAR_BETA: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, MXFP4: tl.constexpr, SCALED_DOT: tl.constexpr,
    HAS_EXTRA: tl.constexpr,
):
    """NUM_EXPERTS counts the extra expert (the last) when HAS_EXTRA."""
    expert, row_start, row_end = _tile_rows(expert_offsets, tl.program_id(1), NUM_EXPERTS, BLOCK_E, BLOCK_M)
    if expert >= NUM_EXPERTS:
        return
    if HAS_EXTRA:
        if expert == NUM_EXPERTS - 1:
            # expert 0 of the one-expert weights at the extra pointers
            b, b_up, expert = b_extra, b_up_extra, expert - (NUM_EXPERTS - 1)
    rows = row_start + tl.arange(0, BLOCK_M)
    row_mask = rows < row_end
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if SCALED_DOT:
        acc, acc_up = _mxfp4_scaled_dots(a, b, b_up, b_scale, b_up_scale, expert, rows, row_mask, cols, col_mask,
                                         N, K, BLOCK_M, BLOCK_N, BLOCK_K, GATED)
    elif MXFP4:
        acc, acc_up = _mxfp4_dots(a, b, b_up, b_scale, b_up_scale, expert, rows, row_mask, cols, col_mask, N, K,
                                  BLOCK_M, BLOCK_N, BLOCK_K, GATED, PRECISION, UPCAST)
    else:
        acc, acc_up = _dense_dots(a, b, b_up, expert, rows, row_mask, cols, col_mask, N, K, BLOCK_M, BLOCK_N,
                                  BLOCK_K, GATED, PRECISION, UPCAST)
    out_ty = c.dtype.element_ty
    if GATED:
        # gate and up are rounded to the output dtype first, as the unfused reference stores them
        acc = gated_act(acc.to(out_ty).to(tl.float32), acc_up.to(out_ty).to(tl.float32), beta, linear_beta,
                        ACTIVATION, HAS_LINEAR_BETA)
    c_ptrs = c + rows.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(out_ty), mask=row_mask[:, None] & col_mask[None, :])


def _config(dtype: torch.dtype, gated: bool, device: torch.device) -> dict:
    if not device_info.on_gpu(device):
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    # bf16 on Hopper: shared memory per stage (64x64 + 2 x 64x128) x 2 B = 40 KB gated, so 4 stages fit in 228 KB
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4 if not gated else 8, num_stages=4)


# below this many rows per expert on average (decode) the MXFP4 GEMM streams weights and takes the narrow-M tile
MXFP4_FEW_ROWS_PER_EXPERT = 16


def _mxfp4_config(dtype: torch.dtype, gated: bool, few_rows: bool, device: torch.device) -> dict:
    """The H200's best of bench/bench_moe.py for a bf16 a: tl.dot_scaled tiles, whose E2M1 upcast beats the
    integer decode at both phases (decode: 6.14 against 7.33 ms on K3.1's 396 touched experts,
    0.79 against 0.93 on Kimi-Linear's 223; prefill of 8192 tokens: 30.8 against 111.8 ms, 4.5 against 21.2)."""
    if not device_info.on_gpu(device):
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=2)
    if few_rows:
        # decode: an expert's rows fit one M tile, so its weights stream once
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3, scaled_dot=True)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, scaled_dot=True)


def _launch_config(a: torch.Tensor, experts: int, gated: bool, mxfp4: bool) -> dict:
    if not mxfp4:
        return _config(a.dtype, gated, a.device)
    # no guard on a traced row count: only rows known to be few take the decode tile
    few_rows = statically_known_true(a.shape[0] < MXFP4_FEW_ROWS_PER_EXPERT * experts)
    return _mxfp4_config(a.dtype, gated, few_rows, a.device)


def _check_dense(a: torch.Tensor, b: torch.Tensor, b_up: torch.Tensor | None, b_up_scale: torch.Tensor | None):
    assert a.dim() == 2 and b.dim() == 3 and a.shape[1] == b.shape[2], f"a {tuple(a.shape)} vs b {tuple(b.shape)}"
    assert a.is_contiguous() and b.is_contiguous() and a.dtype == b.dtype, "grouped GEMM: contiguous, one dtype"
    assert b_up_scale is None, "grouped GEMM: b_up_scale without b_scale"
    if b_up is not None:
        assert b_up.shape == b.shape and b_up.is_contiguous() and b_up.dtype == b.dtype


def _check_mxfp4(a: torch.Tensor, b: torch.Tensor, b_up: torch.Tensor | None, b_scale: torch.Tensor,
                 b_up_scale: torch.Tensor | None):
    assert a.dim() == 2 and a.is_contiguous() and a.dtype in (torch.bfloat16, torch.float32), \
        f"MXFP4 grouped GEMM: a must be contiguous bf16 or fp32, got {a.dtype}"
    k = a.shape[1]
    assert k % MX_BLOCK == 0, f"MXFP4 weights: K = {k} must be a multiple of the scale block {MX_BLOCK}"
    assert (b_up is None) == (b_up_scale is None), "MXFP4 gated GEMM: give b_up and b_up_scale together"
    assert b_up is None or b_up.shape == b.shape, f"b_up {tuple(b_up.shape)} vs b {tuple(b.shape)}"
    for packed, scale in [(b, b_scale)] + ([(b_up, b_up_scale)] if b_up is not None else []):
        assert packed.dim() == 3 and packed.shape[2] * 2 == k, f"a {tuple(a.shape)} vs packed b {tuple(packed.shape)}"
        assert scale.shape == (*packed.shape[:2], k // MX_BLOCK), f"scales {tuple(scale.shape)}, K {k}"
        assert packed.dtype == scale.dtype == torch.uint8, "MXFP4 weights and scales are uint8"
        assert packed.is_contiguous() and scale.is_contiguous(), "MXFP4 weights and scales must be contiguous"


def _check_extra(b: torch.Tensor, b_up: torch.Tensor | None, b_extra: torch.Tensor | None,
                 b_up_extra: torch.Tensor | None, mxfp4: bool):
    assert (b_up_extra is not None) == (b_extra is not None and b_up is not None), \
        "grouped GEMM: the gated form's extra expert takes b_extra and b_up_extra"
    if b_extra is None:
        return
    assert not mxfp4, "grouped GEMM: the extra expert is dense"
    for w in [b_extra] + ([b_up_extra] if b_up_extra is not None else []):
        assert w.shape == b.shape[1:] and w.dtype == b.dtype and w.is_contiguous(), \
            f"extra expert {tuple(w.shape)} {w.dtype} vs bank {tuple(b.shape)} {b.dtype}, contiguous"


def grouped_gemm_launcher(
    a: torch.Tensor, b: torch.Tensor, expert_offsets: torch.Tensor, b_up: torch.Tensor | None = None,
    activation: str = "silu", beta: float = 1.0, linear_beta: float | None = None, out: torch.Tensor | None = None,
    launch=None, b_scale: torch.Tensor | None = None, b_up_scale: torch.Tensor | None = None,
    b_extra: torch.Tensor | None = None, b_up_extra: torch.Tensor | None = None,
) -> torch.Tensor:
    """a [M, K] expert-sorted, b (and b_up) [E, N, K], expert_offsets [E+1] int32 -> [M, N] in a's dtype (into
    `out` if given).

    With b_up: act(a b^T) * (a b_up^T) (SwiGLU or SiTU), the expert MLP's hidden activations.
    With b_scale: b (and b_up) are MXFP4, uint8 [E, N, K/2] E2M1 pairs with E8M0 scales b_scale (and b_up_scale)
    uint8 [E, N, K/32]; K a multiple of 32, a bf16 or fp32. Tiles from _launch_config, whose `scaled_dot` takes
    tl.dot_scaled for the MXFP4 tiles (bf16 a on the GPU).
    With b_extra (and b_up_extra for the gated form) [N, K], dense: one more expert E after the bank's, whose rows
    are expert_offsets[E]:expert_offsets[E+1] (expert_offsets [E+2]).
    """
    mxfp4 = b_scale is not None
    if mxfp4:
        _check_mxfp4(a, b, b_up, b_scale, b_up_scale)
    else:
        _check_dense(a, b, b_up, b_up_scale)
    _check_extra(b, b_up, b_extra, b_up_extra, mxfp4)
    (rows, k), (experts, n) = a.shape, b.shape[:2]
    experts += b_extra is not None
    assert expert_offsets.shape == (experts + 1,) and expert_offsets.dtype == torch.int32
    c = torch.empty(rows, n, dtype=a.dtype, device=a.device) if out is None else out
    assert c.shape == (rows, n) and c.dtype == a.dtype and c.is_contiguous(), "grouped GEMM output buffer mismatch"
    if rows == 0:
        return c
    cfg = _launch_config(a, experts, b_up is not None, mxfp4)
    assert not mxfp4 or cfg["BLOCK_K"] % 64 == 0, f"MXFP4 tiles: BLOCK_K {cfg['BLOCK_K']} is not a multiple of 64"
    assert not cfg.get("scaled_dot") or a.dtype == torch.bfloat16, "tl.dot_scaled takes a bf16 a"
    grid = (triton.cdiv(n, cfg["BLOCK_N"]), triton.cdiv(rows, cfg["BLOCK_M"]) + torch.sym_min(experts, rows))
    kernel = launch(_grouped_gemm_kernel) if launch else _grouped_gemm_kernel
    scale = b_scale if mxfp4 else b
    kernel[grid](
        a, b, b_up if b_up is not None else b, scale, b_up_scale if b_up_scale is not None else scale,
        b_extra if b_extra is not None else b, b_up_extra if b_up_extra is not None else b, c, expert_offsets, n, k,
        beta, 1.0 if linear_beta is None else linear_beta, experts,
        triton.next_power_of_2(experts), cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], b_up is not None,
        ACTIVATION_CODES[activation], linear_beta is not None, "ieee" if a.dtype == torch.float32 else "tf32",
        # the interpreter's bf16 dot is wrong (triton 3.9); it computes the tiles in fp32 instead
        not device_info.on_gpu(a.device), mxfp4, mxfp4 and cfg.get("scaled_dot", False), b_extra is not None,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c
