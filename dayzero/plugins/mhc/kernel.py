"""Fused Triton kernels of manifold-constrained hyper-connections (reference.py), launched as plan.py plans them: the
sublayer's input from the streams (`mhc_pre`, two kernels) and the streams after the sublayer (`mhc_post`, one).

mhc_pre. _mhc_project_kernel multiplies the flattened streams [T, K = HC * D] by fn [M, K] and sums their squares,
K cut into `splits` slices whose partial results it writes ([splits, T, M], [splits, T] fp32): at decode sizes the
slices spread the read of fn (M x K, larger than the tokens' streams) over the SMs; at prefill sizes each program
takes a block of 64 tokens, so that fn is read once per block. _mhc_finish_kernel adds a token's partials, scales them
by the token's rsqrt(mean square + eps), turns them into pre / post / comb (sigmoids, softmax, Sinkhorn on [HC, HC])
and collapses the token's streams: at decode sizes one program per column tile (each recomputes the token's
coefficients rather than waiting for them through memory), at prefill sizes one program per token.
mhc_post. _mhc_post_kernel, one program per token and column tile: new x_j = post_j * o + sum_i comb[i, j] x_i.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import dependent_launch
from dayzero.plugins import device as device_info
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.mhc.plan import INTERPRETER_SMS, finish_plan, is_decode, mix_width, post_plan, project_plan
from dayzero.plugins.output_buffer import output_buffer, output_like
from dayzero.plugins.triton_utils import INTERPRETED


@triton.jit
def _project(xs, ws, acc, SAME_DTYPE: tl.constexpr):
    """acc + xs @ ws^T in fp32: 16-bit operands of one dtype go to the tensor cores as they are (their products are
    exact in fp32); fp32 ones (fp32 streams or an fp32 fn) as three TF32 products, about fp32's precision."""
    if INTERPRETED:
        out = tl.dot(xs.to(tl.float32), tl.trans(ws.to(tl.float32)), acc, input_precision="ieee")
    elif SAME_DTYPE:
        out = tl.dot(xs, tl.trans(ws), acc)
    else:
        out = tl.dot(xs.to(tl.float32), tl.trans(ws.to(tl.float32)), acc, input_precision="tf32x3")
    return out


@triton.jit
def _mhc_project_kernel(
    x, fn, mix_part, sq_part, T, K, k_split,
    M: tl.constexpr, MP: tl.constexpr, BT: tl.constexpr, KB: tl.constexpr, SAME_DTYPE: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    split = tl.program_id(0)
    tokens = tl.program_id(1) * BT + tl.arange(0, BT)
    t_mask = tokens < T
    rows = tl.arange(0, MP)
    x_rows = x + tokens.to(tl.int64)[:, None] * K
    acc = tl.zeros([BT, MP], tl.float32)
    squares = tl.zeros([BT], tl.float32)
    start = split * k_split
    for k0 in range(start, start + k_split, KB):
        k = k0 + tl.arange(0, KB)
        k_mask = k < K
        xs = tl.load(x_rows + k[None, :], mask=t_mask[:, None] & k_mask[None, :], other=0.0)
        ws = tl.load(fn + rows[:, None] * K + k[None, :], mask=(rows[:, None] < M) & k_mask[None, :], other=0.0)
        acc = _project(xs, ws, acc, SAME_DTYPE)
        xf = xs.to(tl.float32)
        squares += tl.sum(xf * xf, axis=1)
    row = split.to(tl.int64) * T + tokens
    tl.store(mix_part + row[:, None] * M + rows[None, :], acc, mask=t_mask[:, None] & (rows < M)[None, :])
    tl.store(sq_part + row, squares, mask=t_mask)


@triton.jit
def _token_partials(mix_part, sq_part, t, T, num_splits, HC: tl.constexpr, HCP: tl.constexpr, SP: tl.constexpr,
                    M: tl.constexpr):
    """Token t's projection summed over its splits: (pre [HCP], post [HCP], comb [HCP, HCP] columns of mix, sum of
    squares), zero past HC."""
    s = tl.arange(0, SP)
    i = tl.arange(0, HCP)
    s_mask = s < num_splits
    i_mask = i < HC
    rows = (s.to(tl.int64) * T + t) * M
    squares = tl.sum(tl.load(sq_part + s.to(tl.int64) * T + t, mask=s_mask, other=0.0), axis=0)
    vec_mask = s_mask[:, None] & i_mask[None, :]
    pre_w = tl.sum(tl.load(mix_part + rows[:, None] + i[None, :], mask=vec_mask, other=0.0), axis=0)
    post_w = tl.sum(tl.load(mix_part + rows[:, None] + HC + i[None, :], mask=vec_mask, other=0.0), axis=0)
    mat = 2 * HC + i[:, None] * HC + i[None, :]
    mat_mask = s_mask[:, None, None] & (i_mask[:, None] & i_mask[None, :])[None, :, :]
    comb_w = tl.sum(tl.load(mix_part + rows[:, None, None] + mat[None, :, :], mask=mat_mask, other=0.0), axis=0)
    return pre_w, post_w, comb_w, squares


@triton.jit
def _coefficients(pre_w, post_w, comb_w, squares, base, scale, K, norm_eps, hc_eps, HC: tl.constexpr,
                  HCP: tl.constexpr, ITERS: tl.constexpr):
    """pre, post [HCP] and the doubly stochastic comb [HCP, HCP] (zero past HC) from one token's projection."""
    i = tl.arange(0, HCP)
    i_mask = i < HC
    valid = i_mask[:, None] & i_mask[None, :]
    rstd = tl.rsqrt(squares / K + norm_eps)
    pre_b = tl.load(base + i, mask=i_mask, other=0.0).to(tl.float32)
    post_b = tl.load(base + HC + i, mask=i_mask, other=0.0).to(tl.float32)
    comb_b = tl.load(base + 2 * HC + i[:, None] * HC + i[None, :], mask=valid, other=0.0).to(tl.float32)
    pre_s = tl.load(scale).to(tl.float32)
    post_s = tl.load(scale + 1).to(tl.float32)
    comb_s = tl.load(scale + 2).to(tl.float32)
    pre = tl.sigmoid(pre_w * rstd * pre_s + pre_b) + hc_eps
    post = 2 * tl.sigmoid(post_w * rstd * post_s + post_b)
    logits = tl.where(valid, comb_w * rstd * comb_s + comb_b, float("-inf"))
    # rows past HC are all -inf: their max is taken as 0 so that they stay 0, not NaN
    row_max = tl.where(i_mask, tl.max(logits, axis=1), 0.0)
    p = tl.exp(logits - row_max[:, None])
    comb = tl.where(valid, p / tl.where(i_mask, tl.sum(p, axis=1), 1.0)[:, None] + hc_eps, 0.0)
    comb = comb / (tl.sum(comb, axis=0)[None, :] + hc_eps)
    for _ in range(ITERS - 1):
        comb = comb / (tl.sum(comb, axis=1)[:, None] + hc_eps)
        comb = comb / (tl.sum(comb, axis=0)[None, :] + hc_eps)
    return pre, post, comb


@triton.jit
def _load_tile(x, t, tile, D: tl.constexpr, HC: tl.constexpr, HCP: tl.constexpr, BLOCK_D: tl.constexpr):
    """Column tile `tile` of token t's streams: [HCP, BLOCK_D], zero past HC and D."""
    i = tl.arange(0, HCP)
    cols = tile * BLOCK_D + tl.arange(0, BLOCK_D)
    return tl.load(x + (t * HC + i[:, None]) * D + cols[None, :], mask=(i[:, None] < HC) & (cols[None, :] < D),
                   other=0.0)


@triton.jit
def _store_collapsed(collapsed, pre, xs, t, tile, D: tl.constexpr, BLOCK_D: tl.constexpr):
    cols = tile * BLOCK_D + tl.arange(0, BLOCK_D)
    out = tl.sum(pre[:, None] * xs.to(tl.float32), axis=0)
    tl.store(collapsed + t * D + cols, out.to(collapsed.dtype.element_ty), mask=cols < D)


@triton.jit
def _mhc_finish_kernel(
    mix_part, sq_part, base, scale, x, collapsed, post, comb, T, K, num_splits, norm_eps, hc_eps,
    D: tl.constexpr, HC: tl.constexpr, HCP: tl.constexpr, SP: tl.constexpr, M: tl.constexpr,
    BLOCK_D: tl.constexpr, TILES: tl.constexpr, ITERS: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    t = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * TILES
    i = tl.arange(0, HCP)
    i_mask = i < HC
    # the first tile of the streams is loaded first: its bytes are in flight while the coefficients are computed
    xs = _load_tile(x, t, first, D, HC, HCP, BLOCK_D)
    pre_w, post_w, comb_w, squares = _token_partials(mix_part, sq_part, t, T, num_splits, HC, HCP, SP, M)
    # AOTInductor passes Python floats as fp64 scalars: keep the math in fp32
    pre, post_c, comb_c = _coefficients(pre_w, post_w, comb_w, squares, base, scale, K,
                                        tl.cast(norm_eps, tl.float32), tl.cast(hc_eps, tl.float32), HC, HCP, ITERS)
    if first == 0:
        tl.store(post + t * HC + i, post_c, mask=i_mask)
        tl.store(comb + (t * HC + i[:, None]) * HC + i[None, :], comb_c, mask=i_mask[:, None] & i_mask[None, :])
    _store_collapsed(collapsed, pre, xs, t, first, D, BLOCK_D)
    for tile in range(first + 1, tl.minimum(first + TILES, tl.cdiv(D, BLOCK_D))):
        _store_collapsed(collapsed, pre, _load_tile(x, t, tile, D, HC, HCP, BLOCK_D), t, tile, D, BLOCK_D)


@triton.jit
def _mhc_post_kernel(
    out, residual, post, comb, streams, D: tl.constexpr, HC: tl.constexpr, HCP: tl.constexpr,
    BLOCK_D: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    c_mask = cols < D
    j = tl.arange(0, HCP)
    j_mask = j < HC
    dtype = streams.dtype.element_ty
    o = tl.load(out + t * D + cols, mask=c_mask, other=0.0).to(tl.float32)
    # the coefficients rounded to the streams' dtype, as the model applies them
    p = tl.load(post + t * HC + j, mask=j_mask, other=0.0).to(dtype).to(tl.float32)
    acc = p[:, None] * o[None, :]
    for src in tl.static_range(HC):
        r = tl.load(residual + (t * HC + src) * D + cols, mask=c_mask, other=0.0).to(tl.float32)
        c = tl.load(comb + (t * HC + src) * HC + j, mask=j_mask, other=0.0).to(dtype).to(tl.float32)
        acc += c[:, None] * r[None, :]
    tl.store(streams + (t * HC + j[:, None]) * D + cols[None, :], acc.to(dtype),
             mask=j_mask[:, None] & c_mask[None, :])


def _check_streams(streams: torch.Tensor) -> tuple[int, int, int]:
    assert streams.dim() == 3 and streams.is_contiguous(), (
        f"streams must be a contiguous [T, HC, D] tensor, got {tuple(streams.shape)}")
    return streams.shape


def _launcher(kernel, launch):
    return launch(kernel) if launch else kernel


def _pdl(like: torch.Tensor, tokens) -> tuple[int, dict]:
    # PDL where a call is a few programs' latency
    pdl = dependent_launch.pdl_mode(like, latency_bound=is_decode(tokens))
    return pdl, dependent_launch.launch_options(pdl)


def _check_fn(fn: torch.Tensor, hc: int, dim: int) -> int:
    m, k = (2 + hc) * hc, hc * dim
    assert fn.shape == (m, k) and fn.is_contiguous(), f"fn must be a contiguous [{m}, {k}] matrix, got {fn.shape}"
    return m


def _tensor_core_dtypes(streams: torch.Tensor, fn: torch.Tensor) -> bool:
    return streams.dtype == fn.dtype and streams.element_size() == 2


def mhc_project_launcher(
    streams: torch.Tensor, fn: torch.Tensor, mix_part: torch.Tensor | None = None,
    sq_part: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """streams [T, HC, D], fn [M = (2 + HC) * HC, HC * D] -> partial projections [splits, T, M] fp32 and partial sums
    of squares [splits, T] fp32, splits as project_plan cuts K = HC * D."""
    tokens, hc, dim = _check_streams(streams)
    m, k = _check_fn(fn, hc, dim), hc * dim
    plan = project_plan(tokens, k, device_info.num_sms(streams.device, cpu_default=INTERPRETER_SMS))
    mix_part = output_buffer(mix_part, (plan.splits, tokens, m), torch.float32, streams.device)
    sq_part = output_buffer(sq_part, (plan.splits, tokens), torch.float32, streams.device)
    if statically_known_true(tokens == 0):
        return mix_part, sq_part
    pdl, options = _pdl(streams, tokens)
    _launcher(_mhc_project_kernel, launch)[(plan.splits, triton.cdiv(tokens, plan.block_t))](
        streams, fn, mix_part, sq_part, tokens, k, plan.k_split, m, mix_width(hc), plan.block_t, plan.block_k,
        _tensor_core_dtypes(streams, fn), pdl, num_warps=plan.num_warps, num_stages=plan.num_stages, **options)
    return mix_part, sq_part


def mhc_finish_launcher(
    mix_part: torch.Tensor, sq_part: torch.Tensor, streams: torch.Tensor, base: torch.Tensor, scale: torch.Tensor,
    norm_eps: float, hc_eps: float, sinkhorn_iters: int, collapsed: torch.Tensor | None = None,
    post: torch.Tensor | None = None, comb: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Partials [splits, T, M], [splits, T] (mhc_project_launcher's) and the streams [T, HC, D] -> (collapsed [T, D]
    in the streams' dtype, post [T, HC] fp32, comb [T, HC, HC] fp32). Outputs may be given (preallocated,
    contiguous)."""
    tokens, hc, dim = _check_streams(streams)
    num_splits, m = mix_part.shape[0], (2 + hc) * hc
    assert mix_part.shape[1:] == (tokens, m) and sq_part.shape == (num_splits, tokens), (
        f"partials {tuple(mix_part.shape)} / {tuple(sq_part.shape)} do not match {tokens} tokens of width {m}")
    assert mix_part.is_contiguous() and sq_part.is_contiguous(), "the partials must be contiguous"
    assert base.numel() == m and scale.numel() == 3 and base.is_contiguous() and scale.is_contiguous()
    collapsed = output_buffer(collapsed, (tokens, dim), streams.dtype, streams.device)
    post = output_buffer(post, (tokens, hc), torch.float32, streams.device)
    comb = output_buffer(comb, (tokens, hc, hc), torch.float32, streams.device)
    if statically_known_true(tokens == 0):
        return collapsed, post, comb
    plan = finish_plan(tokens, dim)
    pdl, options = _pdl(streams, tokens)
    grid = (tokens, triton.cdiv(triton.cdiv(dim, plan.block_d), plan.tiles))
    _launcher(_mhc_finish_kernel, launch)[grid](
        mix_part, sq_part, base, scale, streams, collapsed, post, comb, tokens, hc * dim, num_splits, norm_eps,
        hc_eps, dim, hc, triton.next_power_of_2(hc), triton.next_power_of_2(num_splits), m, plan.block_d,
        plan.tiles, sinkhorn_iters, pdl, num_warps=plan.num_warps, **options)
    return collapsed, post, comb


def mhc_pre_launcher(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, norm_eps: float,
    hc_eps: float, sinkhorn_iters: int, launch=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [T, HC, D] -> (sublayer input [T, D], post [T, HC] fp32, comb [T, HC, HC] fp32): two launches."""
    mix_part, sq_part = mhc_project_launcher(streams, fn, launch=launch)
    return mhc_finish_launcher(mix_part, sq_part, streams, base, scale, norm_eps, hc_eps, sinkhorn_iters,
                               launch=launch)


def _check_update(out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor):
    tokens, hc, dim = _check_streams(residual)
    assert out.shape == (tokens, dim) and out.is_contiguous(), f"out must be a contiguous [{tokens}, {dim}] tensor"
    assert post.shape == (tokens, hc) and comb.shape == (tokens, hc, hc), "post / comb do not match the streams"
    assert post.is_contiguous() and comb.is_contiguous(), "post and comb must be contiguous"
    return tokens, hc, dim


def mhc_post_launcher(
    out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
    streams: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """out [T, D], residual [T, HC, D], post [T, HC], comb [T, HC, HC] -> streams [T, HC, D] (residual's dtype;
    may be given, preallocated and contiguous, but not the residual itself)."""
    tokens, hc, dim = _check_update(out, residual, post, comb)
    streams = output_like(streams, residual)
    if statically_known_true(tokens == 0):
        return streams
    plan = post_plan(tokens, dim)
    pdl, options = _pdl(residual, tokens)
    _launcher(_mhc_post_kernel, launch)[(tokens, triton.cdiv(dim, plan.block_d))](
        out, residual, post, comb, streams, dim, hc, triton.next_power_of_2(hc), plan.block_d, pdl,
        num_warps=plan.num_warps, **options)
    return streams
