"""The gated DeltaNet decode step in Triton (reference.fused_gdn_decode_reference): three launches a layer.

1. The short conv with SiLU over every q | k | v channel (short_conv_decode_launcher), reading the projection's
   rows in place and writing each written slot's window.
2. The per-head gate and sigmoid(b) of every (token, value head), fp32.
3. The recurrence over the state pool with the L2 norms in the kernel (recurrent_kda_pool_launcher): value heads
   and V blocks spread over programs, the scalar gate broadcast over the key channels inside the kernel.

The q / k conv windows of a key head are shared by its value heads and the start slot may be a write slot, so one
kernel that also split the value heads over programs would race on them; a kernel that kept a key head's value heads
in one program (as the KDA step keeps a head) runs them one after another, 2.4-7x slower than the pool kernel on
an H100 (bench/bench_gated_deltanet.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.kda.recurrent_kernel import gate_decay, recurrent_kda_pool_launcher
from dayzero.plugins.short_conv.kernel import short_conv_decode_launcher
from dayzero.plugins.token_rows import flat_token_stride

# (token, head) pairs a gate program computes
GATE_BLOCK = 256


@triton.jit
def _gdn_gate_beta_kernel(a, b_logits, A_log, dt_bias, g, beta, n, a_stride, b_stride, H: tl.constexpr,
                          BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    token = (idx // H).to(tl.int64)
    head = idx % H
    z = tl.load(a + token * a_stride + head, mask=mask, other=0.0).to(tl.float32)
    z += tl.load(dt_bias + head, mask=mask, other=0.0).to(tl.float32)
    rate = tl.exp(tl.load(A_log + head, mask=mask, other=0.0).to(tl.float32))
    tl.store(g + idx, gate_decay(z, rate, 0.0, False), mask=mask)
    logit = tl.load(b_logits + token * b_stride + head, mask=mask, other=0.0).to(tl.float32)
    tl.store(beta + idx, tl.sigmoid(logit), mask=mask)


def gdn_gate_beta_launcher(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                           launch=None) -> tuple[torch.Tensor, torch.Tensor]:
    """a, b [B, L, H] (token rows evenly strided) -> (gdn_gate(a, A_log, dt_bias), sigmoid(b)), both [B, L, H] fp32."""
    heads = a.shape[-1]
    g = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    beta = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    n = a.numel()
    kernel = launch(_gdn_gate_beta_kernel) if launch else _gdn_gate_beta_kernel
    kernel[(triton.cdiv(n, GATE_BLOCK),)](a, b, A_log, dt_bias, g, beta, n, flat_token_stride(a), flat_token_stride(b),
                                          heads, GATE_BLOCK, num_warps=4)
    return g, beta


def fused_gdn_decode_launcher(
    qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, a: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, b: torch.Tensor, state: torch.Tensor, state_slots: torch.Tensor,
    num_accepted: torch.Tensor, scale: float | None = None, *, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """qkv [B, L, C] (C = 2*Hk*K + H*V: q | k | v before the conv) -> o [B, L, H, V]; conv_state [S, 1, W-1, C] and
    state [S, H, K, V] updated in place; a, b [B, L, H]; A_log, dt_bias [H]. qkv, a and b may be views of the fused
    input projection (tokens evenly strided, each token's row contiguous)."""
    batch, length, channels = qkv.shape
    heads, dim_k, dim_v = state.shape[1:]
    key_heads = (channels - heads * dim_v) // (2 * dim_k)
    width = conv_weight.shape[-1]
    assert key_heads > 0 and 2 * key_heads * dim_k + heads * dim_v == channels and heads % key_heads == 0, \
        f"qkv's {channels} channels are not 2*Hk*{dim_k} + {heads}*{dim_v} with {heads} a multiple of Hk"
    assert conv_weight.shape == (1, channels, width), f"conv_weight {tuple(conv_weight.shape)} vs [1, {channels}, W]"
    assert conv_state.shape[1:] == (1, width - 1, channels), f"conv_state {tuple(conv_state.shape)}"
    assert a.shape == b.shape == (batch, length, heads), f"a {tuple(a.shape)}, b {tuple(b.shape)} vs [B, L, {heads}]"
    assert A_log.numel() == heads and dt_bias.numel() == heads, "A_log [H], dt_bias [H]"
    y = short_conv_decode_launcher(qkv[:, :, None], conv_weight, conv_state, state_slots, num_accepted, "silu",
                                   launch=launch)[:, :, 0]
    q, k, v = y.split([key_heads * dim_k, key_heads * dim_k, heads * dim_v], dim=-1)
    g, beta = gdn_gate_beta_launcher(a, b, A_log, dt_bias, launch)
    return recurrent_kda_pool_launcher(q.unflatten(-1, (key_heads, dim_k)), k.unflatten(-1, (key_heads, dim_k)),
                                       v.unflatten(-1, (heads, dim_v)), g, beta, state, state_slots, num_accepted,
                                       scale, use_qk_l2norm_in_kernel=True, out=out, launch=launch)
