"""Chunked KDA prefill in Triton: parallel intra-chunk kernels, then a sequential state kernel.

Per chunk of BT = 64 tokens and head (docs/models.md, KDA in WY form), with G = cumsum(g) inside the chunk
(gate_cumsum_kernel.py):
    pair_terms (chunk_intra_kernel.py):         Aqk = lower(scale q_r.k_j e^{G_r - G_j}), L2 row factors and
                                                Akk = strict_lower(beta_r k_r.k_j e^{G_r - G_j}), then
                                                X = (I + Akk)^{-1} (solve_kernel.py)
    wy_kernel (wy_kernel.py):                   W = X (beta e^G k), U = X (beta v), qg = scale q e^G,
                                                kt = k e^{G_C - G}, decay = e^{G_C}
and `_state_kernel` walks each sequence's chunks with the state S [K, BV] in registers:
    v' = U - W S;   o = qg S + Aqk v';   S = decay * S + kt^T v'.
The pair kernel runs one program per 16-column block, chunk and head; the solve, WY and state kernels work on one K or
V tile per program so that several programs share an SM (bench/bench_kda_prefill.py measures them). Varlen needs no
host sync: chunk ids are found on the device from cu_seqlens.

A per-head gate (gated DeltaNet, g [T, H]) makes every gate factor a row or pair scale: one kernel computes G, the
norms, Aqk and X (gdn_intra_kernel.py), gdn_wy_kernel writes W and U only, and the state kernel reads q and k
themselves on their key head with the row factors q_scale = scale q_inv e^G and k_scale = k_inv e^{G_C - G}:
    o = q_scale * (q S) + Aqk v';   S = decay * S + k^T (k_scale * v')
so no [T, H, K] copy of q or k is written (bench/bench_gated_deltanet.py measures it against fla).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.chunk_common import BT, CHUNK, chunk_tables, load_lower
from dayzero.plugins.kda.chunk_intra_kernel import pair_terms
from dayzero.plugins.kda.gate_cumsum_kernel import gate_cumsum_kernel
from dayzero.plugins.kda.gdn_intra_kernel import gdn_intra_terms
from dayzero.plugins.kda.wy_kernel import gdn_wy_kernel, wy_kernel
from dayzero.plugins.triton_utils import dot

# K / V columns a program of the WY kernel
WY_BLOCK = 32


@triton.jit
def _state_kernel(
    w, u, qg, kt, a, decay, q_scale, k_scale, o, h0, ht, cu_seqlens, chunk_offsets,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    HAS_INITIAL: tl.constexpr, STORE_FINAL: tl.constexpr, PER_HEAD_GATE: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    # qg and kt: [T, HK, K] (the gated copies on the value heads per channel, HK = H; q and k per head)
    hk = h // (H // HK)
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
        W = tl.load(w + (t[:, None] * H + h) * K + ks[None, :], mask=valid[:, None], other=0.0)
        Qg = tl.load(qg + (t[:, None] * HK + hk) * K + ks[None, :], mask=valid[:, None], other=0.0).to(W.dtype)
        Kt_T = tl.load(kt + (t[None, :] * HK + hk) * K + ks[:, None], mask=valid[None, :], other=0.0).to(W.dtype)
        A = load_lower(a, t, valid, h, H, rows)
        U = tl.load(u + (t[:, None] * H + h) * V + vs[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        if PER_HEAD_GATE:
            dk = tl.load(decay + (first + c) * H + h)
            q_rows = tl.load(q_scale + t * H + h, mask=valid, other=0.0)[:, None]
            k_rows = tl.load(k_scale + t * H + h, mask=valid, other=0.0)[:, None]
        else:
            dk = tl.load(decay + ((first + c) * H + h) * K + ks)[:, None]
        S_lo = S.to(W.dtype)
        v_new = U - dot(W, S_lo)
        v_lo = v_new.to(W.dtype)
        if PER_HEAD_GATE:
            out = dot(Qg, S_lo) * q_rows + dot(A, v_lo)
        else:
            out = dot(Qg, S_lo) + dot(A, v_lo)
        tl.store(o + (t[:, None] * H + h) * V + vs[None, :], out.to(o.dtype.element_ty), mask=valid[:, None])
        if PER_HEAD_GATE:
            S = S * dk + dot(Kt_T, (v_new * k_rows).to(W.dtype))
        else:
            S = S * dk + dot(Kt_T, v_lo)
    if STORE_FINAL:
        tl.store(ht + state_offs, S)


@dataclass
class ChunkTerms:
    """Per-token outputs of the intra-chunk kernels, consumed by the state kernel."""

    w: torch.Tensor  # [T, H, K]
    u: torch.Tensor  # [T, H, V]
    qg: torch.Tensor  # [T, H, K] scale q e^G (per channel); q itself [T, Hk, K] (per head)
    kt: torch.Tensor  # [T, H, K] k e^{G_C - G} (per channel); k itself [T, Hk, K] (per head)
    a: torch.Tensor  # [T, H, BT] Aqk
    decay: torch.Tensor  # [max_chunks, H, K] fp32 ([max_chunks, H] for a per-head gate)
    offsets: torch.Tensor  # [N] first chunk id of each sequence
    bounds: torch.Tensor  # [chunks, 2] first token and sequence end of each chunk (chunk_common.chunk_tables)
    q_scale: torch.Tensor | None = None  # [T, H] fp32 row factors of q (per head): scale q_inv e^G
    k_scale: torch.Tensor | None = None  # [T, H] fp32 row factors of k (per head): k_inv e^{G_C - G}


def intra_chunk(q, k, v, g, beta, scale: float, cu_seqlens, use_qk_l2norm: bool, launch=None) -> ChunkTerms:
    """The intra-chunk kernels of a per-channel (g [T, H, K]) or a per-head (g [T, H]) gate."""
    chunks = k.shape[0] // CHUNK + cu_seqlens.shape[0] - 1
    launch = launch or _direct
    offsets, bounds = chunk_tables(cu_seqlens, chunks, launch)
    intra = _channel_gate_terms if g.dim() == 3 else _head_gate_terms
    return intra(q, k, v, g, beta, scale, offsets, bounds, use_qk_l2norm, launch)


def _work_empty(like: torch.Tensor):
    """torch.empty for the kernels' intermediates: bf16 for bf16 inputs, else fp32 (unless told)."""
    work_dtype = torch.bfloat16 if like.dtype == torch.bfloat16 else torch.float32
    return lambda *shape, dtype=work_dtype: torch.empty(*shape, device=like.device, dtype=dtype)


def _channel_gate_terms(q, k, v, g, beta, scale, offsets, bounds, use_qk_l2norm, launch) -> ChunkTerms:
    """Gate cumsum, pair terms with the triangular solve, WY products (a program per K or V tile, chunk and value
    head)."""
    T, HK, K = k.shape
    H, V = v.shape[1:]
    chunks = bounds.shape[0]
    empty = _work_empty(q)
    terms = ChunkTerms(w=empty(T, H, K), u=empty(T, H, V), qg=empty(T, H, K), kt=empty(T, H, K),
                       a=empty(T, H, CHUNK), decay=empty(chunks, H, K, dtype=torch.float32),
                       offsets=offsets, bounds=bounds)
    x = empty(T, H, CHUNK)
    q_inv, k_inv = empty(T, H, dtype=torch.float32), empty(T, H, dtype=torch.float32)
    g_cum = empty(T, H, K, dtype=torch.float32)
    launch(gate_cumsum_kernel)[(K // min(K, 32), chunks, H)](g, g_cum, bounds, H=H, K=K, BK=min(K, 32), num_warps=4)
    pair_terms(q, k, g_cum, beta, scale, bounds, use_qk_l2norm, x, terms.a, q_inv, k_inv, launch)
    block_k, block_v = min(K, WY_BLOCK), min(V, WY_BLOCK)
    launch(wy_kernel)[(K // block_k + V // block_v, chunks, H)](
        q, k, v, g_cum, beta, x, q_inv, k_inv, bounds, terms.w, terms.u, terms.qg, terms.kt, terms.decay, scale,
        H=H, HK=HK, K=K, V=V, BK=block_k, BV=block_v, num_warps=4,
    )
    return terms


def _head_gate_terms(q, k, v, g, beta, scale, offsets, bounds, use_qk_l2norm, launch) -> ChunkTerms:
    """One kernel for G, the norms, Aqk, X and the row factors, then W and U (a program per K or V tile, chunk and
    value head); q and k pass on as they are."""
    T, HK, K = k.shape
    H, V = v.shape[1:]
    chunks = bounds.shape[0]
    empty = _work_empty(q)
    row_factor = lambda: empty(T, H, dtype=torch.float32)  # noqa: E731
    terms = ChunkTerms(w=empty(T, H, K), u=empty(T, H, V), qg=q, kt=k, a=empty(T, H, CHUNK),
                       decay=empty(chunks, H, dtype=torch.float32), offsets=offsets, bounds=bounds,
                       q_scale=row_factor(), k_scale=row_factor())
    x, w_scale = empty(T, H, CHUNK), row_factor()
    gdn_intra_terms(q, k, g, beta, scale, bounds, use_qk_l2norm, x, terms.a, w_scale, terms.q_scale, terms.k_scale,
                    terms.decay, launch)
    block_k, block_v = min(K, WY_BLOCK), min(V, WY_BLOCK)
    launch(gdn_wy_kernel)[(K // block_k + V // block_v, chunks, H)](
        k, v, beta, x, w_scale, bounds, terms.w, terms.u, H=H, HK=HK, K=K, V=V, BK=block_k, BV=block_v, num_warps=4,
    )
    return terms


def chunk_states(terms: ChunkTerms, o: torch.Tensor, initial_state, final, cu_seqlens, launch=None,
                 block_v: int = 32) -> None:
    """Run the sequential state kernel: writes o [T, H, V] and, when `final` is given, the final states."""
    T, H, V = o.shape
    K = terms.w.shape[-1]
    block_v = min(block_v, V)
    h0 = initial_state.contiguous().float() if initial_state is not None else None
    (launch or _direct)(_state_kernel)[(cu_seqlens.shape[0] - 1, H, V // block_v)](
        terms.w, terms.u, terms.qg, terms.kt, terms.a, terms.decay, terms.q_scale, terms.k_scale, o, h0, final,
        cu_seqlens, terms.offsets, H=H, HK=terms.qg.shape[1], K=K, V=V, BV=block_v, HAS_INITIAL=h0 is not None,
        STORE_FINAL=final is not None, PER_HEAD_GATE=terms.q_scale is not None, num_warps=4,
        num_stages=2 if terms.w.dtype == torch.bfloat16 else 1,
    )


def _state_block_v(num_seqs: int, H: int, V: int) -> int:
    """V columns per state program: 64 once that still gives a program to each of an H200's 132 SMs, else 32.
    On an H200: B8 T4096 H96 2.40 ms at 64 against 4.39 at 32; B1 T32768 H96 (192 programs) 2.83 against 4.11;
    B1 T8192 H32 (64 programs) 0.44 against 0.36 (bench/bench_kda_prefill.py)."""
    return 64 if num_seqs * H * max(V // 64, 1) >= 132 else 32


def _direct(fn):
    return fn


def chunk_kda_launcher(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
    initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor, use_qk_l2norm: bool, output_final_state: bool,
    launch=None, out: torch.Tensor | None = None, final_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Varlen chunked KDA: q, k [T, Hk, K], v [T, H, V], g [T, H, K] (per channel) or [T, H] (per head), beta
    [T, H] (token-major, contiguous), cu_seqlens [N+1] int32 on the device; g in fp32 log space; value head h reads
    key head h // (H // Hk). Returns (o [T, H, V] in v's dtype, final states [N, H, K, V] fp32), written into `out` /
    `final_out` when given."""
    T, HK, K = k.shape
    H, V = v.shape[1:]
    N = cu_seqlens.shape[0] - 1
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        assert x.is_contiguous() and x.shape[0] == T, f"{name} must be contiguous [T, ...], got {tuple(x.shape)}"
    assert g.dtype == torch.float32 and q.shape == k.shape and beta.shape == (T, H)
    assert g.shape in ((T, H, K), (T, H)), f"g must be [T, {H}, {K}] or [T, {H}], got {tuple(g.shape)}"
    assert H % HK == 0, f"value heads ({H}) must be a multiple of key heads ({HK})"
    assert K in (16, 32, 64, 128, 256) and V in (16, 32, 64, 128, 256), "K and V must be powers of two in 16..256"
    terms = intra_chunk(q, k, v, g, beta, scale, cu_seqlens, use_qk_l2norm, launch)
    o = torch.empty(T, H, V, device=q.device, dtype=v.dtype) if out is None else out
    final = None
    if output_final_state:
        final = torch.empty(N, H, K, V, device=q.device, dtype=torch.float32) if final_out is None else final_out
    chunk_states(terms, o, initial_state, final, cu_seqlens, launch, _state_block_v(N, H, V))
    return o, final
