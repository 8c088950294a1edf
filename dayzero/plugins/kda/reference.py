"""KDA (Kimi Delta Attention) and gated DeltaNet reference: the spec every fast kernel is checked against.

Layouts follow flash-linear-attention: q, k `[B, T, Hk, K]`, v `[B, T, H, V]`, beta `[B, T, H]`, states
`[N, H, K, V]` in fp32. `g` is the log-space decay (<= 0): per key channel `[B, T, H, K]` (KDA) or per head
`[B, T, H]` (gated DeltaNet, the same decay on every channel). Grouped value heads: H is a multiple of Hk and value
head h reads key head h // (H // Hk). With `cu_seqlens` (varlen) B must be 1 and the N sequences are
`[cu_seqlens[n], cu_seqlens[n+1])`. All math is fp32; outputs take the dtype of `v`.

Per head, with state S in R^{K x V} (docs/models.md):
    S <- Diag(exp(g_t)) S;   S <- S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dayzero.plugins.short_conv.reference import short_conv_decode

Summary = tuple[torch.Tensor, torch.Tensor]


def kda_gate(z: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None = None,
             lower_bound: float | None = None) -> torch.Tensor:
    """Log-space per-channel decay g <= 0 from the gate pre-activation z [..., H, K] (f_b_proj output).

    Kimi-Linear: g = -exp(A_log) * softplus(z + dt_bias);  K3: g = lower_bound * sigmoid(exp(A_log) * (z + dt_bias)).
    """
    heads, dim = z.shape[-2:]
    z = z.float() if dt_bias is None else z.float() + dt_bias.float().view(heads, dim)
    rate = A_log.float().reshape(heads, 1).exp()
    if lower_bound is None:
        return -rate * torch.nn.functional.softplus(z)
    return lower_bound * torch.sigmoid(rate * z)


def gdn_gate(a: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """Gated DeltaNet's log-space per-head decay g = -exp(A_log) * softplus(a + dt_bias): a [..., H] -> fp32
    [..., H]."""
    return -A_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias.float())


def grouped_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Key-head tensor x [B, T, Hk, D] repeated to the value heads [B, T, heads, D] (value head h <- key head
    h // (heads // Hk))."""
    key_heads = x.shape[2]
    if heads % key_heads:
        raise ValueError(f"value heads ({heads}) must be a multiple of key heads ({key_heads})")
    return x if key_heads == heads else x.repeat_interleave(heads // key_heads, dim=2)


def per_channel_gate(g: torch.Tensor, dim_k: int) -> torch.Tensor:
    """A per-head gate [B, T, H] broadcast over the key channels [B, T, H, K]; a per-channel one as it is."""
    return g if g.dim() == 4 else g[..., None].expand(*g.shape, dim_k)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (the form the ecosystem's kernels use)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel):
    """fp32 inputs with q, k and g on the value heads and the gate per channel (q scaled)."""
    heads = v.shape[2]
    q, k = (grouped_heads(x.float(), heads) for x in (q, k))
    v, g, beta = v.float(), per_channel_gate(g.float(), k.shape[-1]), beta.float()
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return q * scale, k, v, g, beta


def _segments(batch: int, length: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int, int]]:
    """(batch index, start, end) of every sequence."""
    if cu_seqlens is None:
        return [(b, 0, length) for b in range(batch)]
    if batch != 1:
        raise ValueError(f"varlen inputs (cu_seqlens) need batch size 1, got {batch}")
    bounds = cu_seqlens.tolist()
    return [(0, start, end) for start, end in zip(bounds[:-1], bounds[1:])]


def _initial_states(initial_state, num_seqs, k, v) -> torch.Tensor:
    heads, dim_k, dim_v = k.shape[2], k.shape[3], v.shape[3]
    if initial_state is None:
        return k.new_zeros(num_seqs, heads, dim_k, dim_v)
    if initial_state.shape != (num_seqs, heads, dim_k, dim_v):
        raise ValueError(f"initial_state must be {(num_seqs, heads, dim_k, dim_v)}, got {tuple(initial_state.shape)}")
    return initial_state.float().clone()


def kda_step(S, q, k, v, g, beta) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for all heads: S [H,K,V], q/k/g [H,K], v [H,V], beta [H] (q already scaled) -> (S, o [H,V])."""
    S = S * g.exp()[..., None]
    delta = beta[:, None] * (v - torch.einsum("hkv,hk->hv", S, k))
    S = S + k[..., None] * delta[:, None, :]
    return S, torch.einsum("hkv,hk->hv", S, q)


def recurrent_kda(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
    use_qk_l2norm_in_kernel=False, cu_seqlens=None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token-by-token KDA. Returns (o [B,T,H,V], final states [N,H,K,V] fp32 or None)."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel)
    segments = _segments(q.shape[0], q.shape[1], cu_seqlens)
    states = _initial_states(initial_state, len(segments), k, v)
    o = v.new_zeros(v.shape)
    for n, (b, start, end) in enumerate(segments):
        S = states[n]
        for t in range(start, end):
            S, o[b, t] = kda_step(S, q[b, t], k[b, t], v[b, t], g[b, t], beta[b, t])
        states[n] = S
    return o.to(out_dtype), (states if output_final_state else None)


def _chunk_terms(k, v, g, beta):
    """In-chunk WY terms for one chunk of all heads: inputs [H, L, *] -> (G, decay, W, U, K_tilde)."""
    G = g.cumsum(1)
    length = k.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=k.device).tril()
    # decay[h, r, j, d] = exp(G_r[d] - G_j[d]) for j <= r, else 0 (never exponentiate a positive difference)
    decay = (G[:, :, None, :] - G[:, None, :, :]).masked_fill(~causal[None, :, :, None], float("-inf")).exp()
    strict = torch.einsum("hrd,hjd,hrjd->hrj", k, k, decay).tril(-1) * beta[:, :, None]
    eye = torch.eye(length, device=k.device, dtype=k.dtype)
    lower = eye + strict
    W = torch.linalg.solve_triangular(lower, beta[..., None] * G.exp() * k, upper=False, unitriangular=True)
    U = torch.linalg.solve_triangular(lower, beta[..., None] * v, upper=False, unitriangular=True)
    K_tilde = k * (G[:, -1:, :] - G).exp()
    return G, decay, W, U, K_tilde


def kda_chunk(S, q, k, v, g, beta) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of all heads from entry state S [H,K,V]: q/k/g [L,H,K], v [L,H,V], beta [L,H] -> (o [L,H,V], S)."""
    q, k, v, g = (x.transpose(0, 1) for x in (q, k, v, g))
    G, decay, W, U, K_tilde = _chunk_terms(k, v, g, beta.transpose(0, 1))
    v_new = U - W @ S
    A_qk = torch.einsum("hrd,hjd,hrjd->hrj", q, k, decay)
    o = (q * G.exp()) @ S + A_qk @ v_new
    S = G[:, -1, :].exp()[..., None] * S + K_tilde.transpose(1, 2) @ v_new
    return o.transpose(0, 1), S


def chunk_kda(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
    use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked KDA (the WY form, docs/models.md); same contract as `recurrent_kda`."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel)
    segments = _segments(q.shape[0], q.shape[1], cu_seqlens)
    states = _initial_states(initial_state, len(segments), k, v)
    o = v.new_zeros(v.shape)
    for n, (b, start, end) in enumerate(segments):
        S = states[n]
        for c0 in range(start, end, chunk_size):
            c = slice(c0, min(c0 + chunk_size, end))
            o[b, c], S = kda_chunk(S, q[b, c], k[b, c], v[b, c], g[b, c], beta[b, c])
        states[n] = S
    return o.to(out_dtype), (states if output_final_state else None)


def recurrent_kda_pool(
    q, k, v, g, beta, state, state_slots, num_accepted, scale=None, use_qk_l2norm_in_kernel=False,
) -> torch.Tensor:
    """Decode / speculative verify over a state pool; mutates `state` in place.

    q, k [B, L, Hk, K]; v [B, L, H, V]; g [B, L, H, K] or [B, L, H]; beta [B, L, H]; state [num_slots, H, K, V] fp32;
    state_slots [B, L] int; num_accepted [B] int in 1..L. Sequence b starts from
    `state[state_slots[b, num_accepted[b] - 1]]` and writes the state after token t into `state_slots[b, t]`
    (slot -1: not written). A row whose `state_slots[b, 0]` is -1 is padding: nothing is read or written and
    its output is zero. Returns o [B, L, H, V].
    """
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel)
    o = v.new_zeros(v.shape)
    for b in range(q.shape[0]):
        slots = state_slots[b].tolist()
        if slots[0] < 0:
            continue
        S = state[slots[int(num_accepted[b]) - 1]].float()
        for t, slot in enumerate(slots):
            S, o[b, t] = kda_step(S, q[b, t], k[b, t], v[b, t], g[b, t], beta[b, t])
            if slot >= 0:
                state[slot] = S.to(state.dtype)
    return o.to(out_dtype)


def kda_summary(
    k, v, g, beta, use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size: int = 64,
) -> Summary:
    """Affine summary of each sequence: S_out = M S_in + B, M [N,H,K,K], B [N,H,K,V] (fp32), for k [B,T,Hk,K],
    v [B,T,H,V] and g, beta as in `chunk_kda`.

    Per chunk M = Diag(exp(G_C)) - K_tilde^T W and B = K_tilde^T U; chunks are folded with `compose`.
    """
    _, k, v, g, beta = _prepare(k, k, v, g, beta, 1.0, use_qk_l2norm_in_kernel)
    heads, dim_k = k.shape[2], k.shape[3]
    eye = torch.eye(dim_k, device=k.device).expand(heads, dim_k, dim_k)
    summaries = []
    for b, start, end in _segments(k.shape[0], k.shape[1], cu_seqlens):
        total = (eye.clone(), k.new_zeros(heads, dim_k, v.shape[3]))
        for c0 in range(start, end, chunk_size):
            c = slice(c0, min(c0 + chunk_size, end))
            kc, vc, gc = (x[b, c].transpose(0, 1) for x in (k, v, g))
            G, _, W, U, K_tilde = _chunk_terms(kc, vc, gc, beta[b, c].transpose(0, 1))
            M = torch.diag_embed(G[:, -1, :].exp()) - K_tilde.transpose(1, 2) @ W
            total = compose((M, K_tilde.transpose(1, 2) @ U), total)
        summaries.append(total)
    return torch.stack([m for m, _ in summaries]), torch.stack([b for _, b in summaries])


def compose(later: Summary, earlier: Summary) -> Summary:
    """(M_b, B_b) o (M_a, B_a) = (M_b M_a, M_b B_a + B_b): run `earlier`, then `later`."""
    (M_b, B_b), (M_a, B_a) = later, earlier
    return M_b @ M_a, M_b @ B_a + B_b


def fold(summaries: Sequence[Summary], initial_state: torch.Tensor | None = None) -> torch.Tensor:
    """Entry state after running the segments of `summaries` in order from `initial_state` (zeros if None)."""
    M, B = summaries[0]
    state = torch.zeros_like(B) if initial_state is None else initial_state.float()
    for M, B in summaries:
        state = M @ state + B
    return state


def fused_kda_decode_reference(
    qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state, state_slots, num_accepted,
    scale=None,
) -> torch.Tensor:
    """One decode / verify step from the pre-conv projections; mutates `conv_state` and `state` in place.

    qkv [B, L, 3, H*K] (q, k, v projections before the short conv); conv_weight [3, H*K, W];
    conv_state [num_slots, 3, W-1, H*K]; z [B, L, H, K] (f_b_proj output, before dt_bias); A_log [H];
    dt_bias [H*K]; lower_bound None (Kimi-Linear gate) or < 0 (K3 gate); beta_logits [B, L, H]; state
    [num_slots, H, K, K] fp32; state_slots [B, L]; num_accepted [B]. Both pools follow the slot rule of
    `recurrent_kda_pool`. Returns o [B, L, H, K] in qkv's dtype.

    The composition: SiLU(short_conv_decode) -> L2-normalized q, k -> kda_gate -> sigmoid(beta) -> recurrence.
    """
    batch, length = qkv.shape[:2]
    heads, dim = z.shape[-2:]
    x = short_conv_decode(qkv, conv_weight, conv_state, state_slots, num_accepted, activation="silu")
    q, k, v = (t.reshape(batch, length, heads, dim) for t in x.unbind(2))
    g = kda_gate(z, A_log, dt_bias, lower_bound)
    beta = torch.sigmoid(beta_logits.float())
    return recurrent_kda_pool(q, k, v, g, beta, state, state_slots, num_accepted, scale=scale,
                              use_qk_l2norm_in_kernel=True)


def fused_gdn_decode_reference(
    qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted, scale=None,
) -> torch.Tensor:
    """Gated DeltaNet's decode / verify step from the pre-conv projections; mutates `conv_state` and `state`.

    qkv [B, L, C] with channels [q (Hk*K) | k (Hk*K) | v (H*V)], C = 2*Hk*K + H*V; conv_weight [1, C, W];
    conv_state [num_slots, 1, W-1, C] (the short conv's layout with one channel group); a, b [B, L, H] (gate and beta
    pre-activations); A_log, dt_bias [H]; state [num_slots, H, K, V] fp32; state_slots [B, L]; num_accepted [B]; Hk
    follows from C. Slot rule of `recurrent_kda_pool`. Returns o [B, L, H, V] in qkv's dtype.

    The composition: SiLU(short_conv_decode) -> L2-normalized q, k -> gdn_gate -> sigmoid(b) -> recurrence.
    """
    batch, length, channels = qkv.shape
    heads, dim_k, dim_v = state.shape[1:]
    key_heads = (channels - heads * dim_v) // (2 * dim_k)
    x = short_conv_decode(qkv[:, :, None], conv_weight, conv_state, state_slots, num_accepted, activation="silu")
    q, k, v = x[:, :, 0].split([key_heads * dim_k, key_heads * dim_k, heads * dim_v], dim=-1)
    q, k = (t.reshape(batch, length, key_heads, dim_k) for t in (q, k))
    v = v.reshape(batch, length, heads, dim_v)
    g = gdn_gate(a, A_log, dt_bias)
    beta = torch.sigmoid(b.float())
    return recurrent_kda_pool(q, k, v, g, beta, state, state_slots, num_accepted, scale=scale,
                              use_qk_l2norm_in_kernel=True)
