"""Chunked KDA prefill in Triton: a parallel intra-chunk kernel and a sequential state kernel.

Per chunk of BT = 64 tokens and head (MODEL.md section 2, WY form), `_intra_chunk_kernel` computes
    G = cumsum(g),  L = strict_lower(beta_r k_r.k_j e^{G_r - G_j}),  X = (I + L)^{-1}
    W = X (beta e^G k),  U = X (beta v),  A = lower(scale q_r.k_j e^{G_r - G_j}),  qg = scale q e^G,
    kt = k e^{G_C - G},  decay = e^{G_C}
and `_state_kernel` walks each sequence's chunks with the state S [K, BV] in registers:
    v' = U - W S;   o = qg S + A v';   S = decay * S + kt^T v'.
Pairwise decays e^{G_r - G_j} are factored per 16-row block around the block's first row, which keeps every factor
of an off-diagonal block <= 1; diagonal blocks fall back to exact pairwise exponentials when a channel decays by
more than 80 nats inside 16 tokens (the factored form would overflow). Varlen needs no host sync: chunk ids are
found on the device from cu_seqlens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from dayzero.plugins.triton_utils import dot

CHUNK = 64
BT = tl.constexpr(CHUNK)  # chunk length
BC = tl.constexpr(16)  # rows per decay-factoring block
# largest exponent of a factored decay: e^80 times a factor <= 1 stays far from fp32 overflow
EXP_CAP = tl.constexpr(80.0)


@triton.jit
def _row(tile, rows, r):
    """Row r of a [BT, X] tile as an [X] vector."""
    return tl.sum(tl.where(rows[:, None] == r, tile, 0.0), axis=0)


@triton.jit
def _locate_chunk(cu_seqlens, chunk_offsets, N, pid):
    """(bos, eos, chunk index within the sequence, valid) of global chunk `pid`."""
    n = 0
    for i in range(1, N):
        n += (tl.load(chunk_offsets + i) <= pid).to(tl.int32)
    first = tl.load(chunk_offsets + n)
    bos = tl.load(cu_seqlens + n).to(tl.int64)
    eos = tl.load(cu_seqlens + n + 1).to(tl.int64)
    c = pid - first
    return bos, eos, c, (bos + c * BT) < eos


@triton.jit
def _load_tile(ptr, t, valid, h, H: tl.constexpr, D: tl.constexpr, cols):
    """rows t [BT] of a [T, H, D] tensor at head h, columns cols -> fp32 [BT, len(cols)] (0 outside)."""
    offs = (t[:, None] * H + h) * D + cols[None, :]
    return tl.load(ptr + offs, mask=valid[:, None] & (cols[None, :] < D), other=0.0).to(tl.float32)


@triton.jit
def _inverse_unit_lower(L, rows, cols):
    """(I + L)^{-1} for strictly lower L [BT, BT]: with N = -L nilpotent (N^BT = 0),
    sum_n N^n = (I + N)(I + N^2)(I + N^4)...(I + N^(BT/2)) -- log2(BT) squarings on tensor cores (tf32: 3xTF32
    doubles the registers of this kernel into spilling, for accuracy that the bf16 outputs do not keep)."""
    eye = tl.where(rows[:, None] == cols[None, :], 1.0, 0.0)
    power = -L
    X = eye + power
    for _ in tl.static_range(5):
        power = dot(power, power)
        X = X + dot(X, power)
    return X


@triton.jit
def _exact_diagonal(A, left, k, G, rows, cols, i):
    """Overwrite the diagonal block i of A with exact sum_d left_r k_j e^{G_r - G_j}."""
    for jj in range(BC):
        j = i * BC + jj
        k_j = _row(k, rows, j)
        G_j = _row(G, rows, j)
        col = tl.sum(left * k_j[None, :] * tl.exp(tl.minimum(G - G_j[None, :], 0.0)), axis=1)
        keep = (rows[:, None] // BC == i) & (cols[None, :] == j)
        A = tl.where(keep, col[:, None], A)
    return A


@triton.jit
def _factored_block(left, right_keys, G, rows, i):
    """Rows of 16-row block i of sum_d left_r[d] k_j[d] e^{G_r[d] - G_j[d]} (other rows 0), factored around the
    block's first row; the block's own diagonal is recomputed exactly when the factoring would overflow."""
    ref = _row(G, rows, i * BC)
    # rows before block i are masked out anyway: zero them instead of overflowing
    up = tl.where(rows[:, None] >= i * BC, tl.exp(tl.minimum(G - ref[None, :], 0.0)), 0.0)
    down = tl.exp(tl.minimum(ref[None, :] - G, EXP_CAP))
    part = dot(left * up, tl.trans(right_keys * down))
    if tl.max(ref - _row(G, rows, i * BC + BC - 1)) > EXP_CAP:
        part = _exact_diagonal(part, left, right_keys, G, rows, tl.arange(0, BT), i)
    return tl.where(rows[:, None] // BC == i, part, 0.0)


@triton.jit
def _pairwise_decayed(left, right_keys, G, rows):
    """[BT, BT] sum_d left_r[d] k_j[d] e^{G_r[d] - G_j[d]} for j <= r (upper triangle arbitrary)."""
    acc = _factored_block(left, right_keys, G, rows, 0)
    for i in tl.static_range(1, BT // BC):
        acc += _factored_block(left, right_keys, G, rows, i)
    return acc


@triton.jit
def _intra_chunk_kernel(
    q, k, v, g, beta, cu_seqlens, chunk_offsets,
    w_out, u_out, qg_out, kt_out, a_out, decay_out,
    scale, N,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    bos, eos, c, live = _locate_chunk(cu_seqlens, chunk_offsets, N, pid)
    if not live:
        return
    rows = tl.arange(0, BT)
    cols = tl.arange(0, BT)
    t = bos + c * BT + rows
    valid = t < eos
    b = tl.load(beta + t * H + h, mask=valid, other=0.0).to(tl.float32)

    # pass 1: k.k terms on raw keys (L2 normalization is a row scaling, applied after the sum) and row norms
    A_kk = tl.zeros([BT, BT], tl.float32)
    q_ss = tl.zeros([BT], tl.float32)
    k_ss = tl.zeros([BT], tl.float32)
    for k0 in range(0, K, BK):
        kc = k0 + tl.arange(0, BK)
        G = tl.cumsum(_load_tile(g, t, valid, h, H, K, kc), axis=0)
        kk = _load_tile(k, t, valid, h, H, K, kc)
        k_ss += tl.sum(kk * kk, axis=1)
        if USE_L2NORM:
            qq = _load_tile(q, t, valid, h, H, K, kc)
            q_ss += tl.sum(qq * qq, axis=1)
        A_kk += _pairwise_decayed(kk, kk, G, rows)
    q_inv = tl.full([BT], 1.0, tl.float32)
    k_inv = tl.full([BT], 1.0, tl.float32)
    if USE_L2NORM:
        q_inv = 1.0 / tl.sqrt(q_ss + 1e-6)
        k_inv = 1.0 / tl.sqrt(k_ss + 1e-6)

    strict = rows[:, None] > cols[None, :]
    L = tl.where(strict, A_kk * (b * k_inv)[:, None] * k_inv[None, :], 0.0)
    X = _inverse_unit_lower(L, rows, cols)

    # pass 2: per K tile, W = X (beta e^G k), the decayed q and k, and the q.k terms
    A_qk = tl.zeros([BT, BT], tl.float32)
    for k0 in range(0, K, BK):
        kc = k0 + tl.arange(0, BK)
        G = tl.cumsum(_load_tile(g, t, valid, h, H, K, kc), axis=0)
        G_last = _row(G, rows, BT - 1)
        kk = _load_tile(k, t, valid, h, H, K, kc) * k_inv[:, None]
        qq = _load_tile(q, t, valid, h, H, K, kc) * q_inv[:, None]
        A_qk += _pairwise_decayed(qq, kk, G, rows)
        eG = tl.exp(G)
        offs = (t[:, None] * H + h) * K + kc[None, :]
        mask = valid[:, None] & (kc[None, :] < K)
        tl.store(w_out + offs, dot(X, b[:, None] * eG * kk).to(w_out.dtype.element_ty), mask=mask)
        tl.store(qg_out + offs, (qq * eG * scale).to(qg_out.dtype.element_ty), mask=mask)
        tl.store(kt_out + offs, (kk * tl.exp(G_last[None, :] - G)).to(kt_out.dtype.element_ty), mask=mask)
        tl.store(decay_out + (pid * H + h) * K + kc, tl.exp(G_last), mask=kc < K)
    A_qk = tl.where(rows[:, None] >= cols[None, :], A_qk * scale, 0.0)
    a_offs = (t[:, None] * H + h) * BT + cols[None, :]
    tl.store(a_out + a_offs, A_qk.to(a_out.dtype.element_ty), mask=valid[:, None])

    # pass 3: U = X (beta v)
    for v0 in range(0, V, BV):
        vc = v0 + tl.arange(0, BV)
        U = dot(X, b[:, None] * _load_tile(v, t, valid, h, H, V, vc))
        offs = (t[:, None] * H + h) * V + vc[None, :]
        tl.store(u_out + offs, U.to(u_out.dtype.element_ty), mask=valid[:, None] & (vc[None, :] < V))


@triton.jit
def _state_kernel(
    w, u, qg, kt, a, decay, o, h0, ht, cu_seqlens, chunk_offsets,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    HAS_INITIAL: tl.constexpr, STORE_FINAL: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    bos = tl.load(cu_seqlens + n).to(tl.int64)
    eos = tl.load(cu_seqlens + n + 1).to(tl.int64)
    first = tl.load(chunk_offsets + n)
    rows = tl.arange(0, BT)
    ks = tl.arange(0, K)
    vs = vb * BV + tl.arange(0, BV)
    state_offs = ((n * H + h) * K + ks[:, None]) * V + vs[None, :]
    if HAS_INITIAL:
        S = tl.load(h0 + state_offs).to(tl.float32)
    else:
        S = tl.zeros([K, BV], tl.float32)
    num_chunks = tl.cdiv(eos - bos, BT)
    for c in range(0, num_chunks):
        t = bos + c * BT + rows
        valid = t < eos
        k_offs = (t[:, None] * H + h) * K + ks[None, :]
        W = tl.load(w + k_offs, mask=valid[:, None], other=0.0)
        Qg = tl.load(qg + k_offs, mask=valid[:, None], other=0.0)
        Kt_T = tl.load(kt + (t[None, :] * H + h) * K + ks[:, None], mask=valid[None, :], other=0.0)
        A = tl.load(a + (t[:, None] * H + h) * BT + rows[None, :], mask=valid[:, None], other=0.0)
        U = tl.load(u + (t[:, None] * H + h) * V + vs[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        dk = tl.load(decay + ((first + c) * H + h) * K + ks)
        S_lo = S.to(W.dtype)
        v_new = U - dot(W, S_lo)
        v_lo = v_new.to(W.dtype)
        out = dot(Qg, S_lo) + dot(A, v_lo)
        tl.store(o + (t[:, None] * H + h) * V + vs[None, :], out.to(o.dtype.element_ty), mask=valid[:, None])
        S = S * dk[:, None] + dot(Kt_T, v_lo)
    if STORE_FINAL:
        tl.store(ht + state_offs, S)


def _chunk_offsets(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """First global chunk id of each sequence [N] (on the device, no host sync)."""
    counts = (cu_seqlens[1:] - cu_seqlens[:-1] + CHUNK - 1) // CHUNK
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]]).to(torch.int32)


@dataclass
class ChunkTerms:
    """Per-token outputs of the intra-chunk kernel, consumed by the state kernel."""

    w: torch.Tensor  # [T, H, K]
    u: torch.Tensor  # [T, H, V]
    qg: torch.Tensor  # [T, H, K]
    kt: torch.Tensor  # [T, H, K]
    a: torch.Tensor  # [T, H, BT]
    decay: torch.Tensor  # [max_chunks, H, K] fp32
    offsets: torch.Tensor  # [N] first chunk id of each sequence


def intra_chunk(q, k, v, g, beta, scale: float, cu_seqlens, use_qk_l2norm: bool, launch=None,
                num_warps: int = 8, block_k: int = 16) -> ChunkTerms:
    T, H, K = k.shape
    V = v.shape[-1]
    N = cu_seqlens.shape[0] - 1
    work_dtype = torch.bfloat16 if q.dtype == torch.bfloat16 else torch.float32
    terms = ChunkTerms(
        w=torch.empty(T, H, K, device=q.device, dtype=work_dtype),
        u=torch.empty(T, H, V, device=q.device, dtype=work_dtype),
        qg=torch.empty(T, H, K, device=q.device, dtype=work_dtype),
        kt=torch.empty(T, H, K, device=q.device, dtype=work_dtype),
        a=torch.empty(T, H, CHUNK, device=q.device, dtype=work_dtype),
        decay=torch.empty(T // CHUNK + N, H, K, device=q.device, dtype=torch.float32),
        offsets=_chunk_offsets(cu_seqlens),
    )
    (launch or _direct)(_intra_chunk_kernel)[(T // CHUNK + N, H)](
        q, k, v, g, beta, cu_seqlens, terms.offsets, terms.w, terms.u, terms.qg, terms.kt, terms.a, terms.decay,
        scale, N, H=H, K=K, V=V, BK=min(K, block_k), BV=min(V, 64), USE_L2NORM=use_qk_l2norm, num_warps=num_warps,
    )
    return terms


def chunk_states(terms: ChunkTerms, o: torch.Tensor, initial_state, final, cu_seqlens, launch=None,
                 block_v: int = 32, num_warps: int = 4) -> None:
    """Run the sequential state kernel: writes o [T, H, V] and, when `final` is given, the final states."""
    T, H, V = o.shape
    K = terms.w.shape[-1]
    block_v = min(block_v, V)
    h0 = initial_state.contiguous().float() if initial_state is not None else None
    (launch or _direct)(_state_kernel)[(cu_seqlens.shape[0] - 1, H, V // block_v)](
        terms.w, terms.u, terms.qg, terms.kt, terms.a, terms.decay, o, h0, final, cu_seqlens, terms.offsets,
        H=H, K=K, V=V, BV=block_v, HAS_INITIAL=h0 is not None, STORE_FINAL=final is not None,
        num_warps=num_warps, num_stages=2 if terms.w.dtype == torch.bfloat16 else 1,
    )


def _direct(fn):
    return fn


def chunk_kda_launcher(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
    initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor, use_qk_l2norm: bool, output_final_state: bool,
    launch=None, state_block_v: int = 32, out: torch.Tensor | None = None, final_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Varlen chunked KDA: q, k, g [T, H, K], v [T, H, V], beta [T, H] (token-major, contiguous), cu_seqlens [N+1]
    int32 on the device; g in fp32 log space. Returns (o [T, H, V] in v's dtype, final states [N, H, K, V] fp32),
    written into `out` / `final_out` when given."""
    T, H, K = k.shape
    V = v.shape[-1]
    N = cu_seqlens.shape[0] - 1
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        assert x.is_contiguous() and x.shape[0] == T, f"{name} must be contiguous [T, ...], got {tuple(x.shape)}"
    assert g.dtype == torch.float32 and q.shape == k.shape == g.shape and beta.shape == (T, H)
    assert K in (16, 32, 64, 128, 256) and V in (16, 32, 64, 128, 256), "K and V must be powers of two in 16..256"
    terms = intra_chunk(q, k, v, g, beta, scale, cu_seqlens, use_qk_l2norm, launch)
    o = torch.empty(T, H, V, device=q.device, dtype=v.dtype) if out is None else out
    final = None
    if output_final_state:
        final = torch.empty(N, H, K, V, device=q.device, dtype=torch.float32) if final_out is None else final_out
    chunk_states(terms, o, initial_state, final, cu_seqlens, launch, state_block_v)
    return o, final
