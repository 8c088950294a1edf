"""The KDA reference with a per-head gate and grouped value heads (gated DeltaNet) against transformers'
Qwen3-Next torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule, and its own identities."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err

qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")


def gdn_inputs(B, T, Hk, Hv, K, V):
    q, k = torch.randn(B, T, Hk, K), torch.randn(B, T, Hk, K)
    v = torch.randn(B, T, Hv, V)
    g = R.gdn_gate(torch.randn(B, T, Hv), torch.randn(Hv) * 0.5, torch.randn(Hv))
    beta = torch.rand(B, T, Hv)
    return q, k, v, g, beta


def transformers_rule(fn, q, k, v, g, beta, initial_state):
    # transformers' Qwen3-Next repeats the key heads with repeat_interleave (inside these functions in recent
    # versions, in the layer before them in older ones): repeating here matches both
    q, k = (R.grouped_heads(x, v.shape[2]) for x in (q, k))
    return fn(q, k, v, g=g, beta=beta, initial_state=initial_state, output_final_state=True,
              use_qk_l2norm_in_kernel=True)


@pytest.mark.parametrize("B, T, Hk, Hv, K, V", [(2, 70, 1, 2, 16, 8), (1, 131, 2, 6, 8, 12), (3, 5, 2, 2, 12, 12)])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "zero-state"])
def test_chunk_matches_transformers(B, T, Hk, Hv, K, V, with_state):
    q, k, v, g, beta = gdn_inputs(B, T, Hk, Hv, K, V)
    S0 = torch.randn(B, Hv, K, V) if with_state else None
    o, s = R.chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    ref_o, ref_s = transformers_rule(qwen3_next.torch_chunk_gated_delta_rule, q, k, v, g, beta, S0)
    assert rel_err(o, ref_o) < 1e-5
    assert rel_err(s, ref_s) < 1e-5


@pytest.mark.parametrize("B, T, Hk, Hv, K, V", [(2, 9, 1, 3, 16, 8), (1, 4, 2, 4, 8, 8)])
def test_recurrent_matches_transformers(B, T, Hk, Hv, K, V):
    q, k, v, g, beta = gdn_inputs(B, T, Hk, Hv, K, V)
    S0 = torch.randn(B, Hv, K, V)
    o, s = R.recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                           use_qk_l2norm_in_kernel=True)
    ref_o, ref_s = transformers_rule(qwen3_next.torch_recurrent_gated_delta_rule, q, k, v, g, beta, S0)
    assert rel_err(o, ref_o) < 1e-5
    assert rel_err(s, ref_s) < 1e-5


def test_gdn_gate_matches_transformers_formula():
    a, A_log, dt_bias = torch.randn(3, 5, 4).bfloat16(), torch.randn(4), torch.randn(4)
    expected = -A_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    assert torch.equal(R.gdn_gate(a, A_log, dt_bias), expected)


def test_per_head_gate_and_grouped_heads_equal_their_expansion():
    """The per-head gate is the per-channel gate constant over K, and grouped heads are their repeated copies: every
    reference entry point agrees with the expanded KDA inputs."""
    q, k, v, g, beta = gdn_inputs(1, 75, 2, 6, 8, 16)
    q_rep, k_rep = (R.grouped_heads(x, 6) for x in (q, k))
    g_rep = R.per_channel_gate(g, 8)
    cu = torch.tensor([0, 40, 41, 75])
    S0 = torch.randn(3, 6, 8, 16)
    for fn in (R.chunk_kda, R.recurrent_kda):
        got = fn(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                 cu_seqlens=cu)
        ref = fn(q_rep, k_rep, v, g_rep, beta, initial_state=S0, output_final_state=True,
                 use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        assert all(torch.equal(a, b) for a, b in zip(got, ref))
    M, B = R.kda_summary(k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    M_rep, B_rep = R.kda_summary(k_rep, v, g_rep, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert torch.equal(M, M_rep) and torch.equal(B, B_rep)


def test_summary_fold_continues_a_grouped_sequence():
    q, k, v, g, beta = gdn_inputs(1, 100, 1, 2, 8, 4)
    S0 = torch.randn(1, 2, 8, 4)
    _, expected = R.chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                              use_qk_l2norm_in_kernel=True)
    parts = [R.kda_summary(k[:, c], v[:, c], g[:, c], beta[:, c], use_qk_l2norm_in_kernel=True)
             for c in (slice(0, 33), slice(33, 100))]
    assert rel_err(R.fold(parts, S0), expected) < 1e-5


def test_pool_decode_follows_slots_with_grouped_heads():
    """Two rows of three tokens over a pool: row 0 starts from its second slot (num_accepted 2), row 1 is padding."""
    q, k, v, g, beta = gdn_inputs(2, 3, 1, 2, 8, 4)
    state = torch.randn(8, 2, 8, 4)
    slots = torch.tensor([[5, 2, 7], [-1, -1, -1]], dtype=torch.int32)
    before = state.clone()
    o = R.recurrent_kda_pool(q, k, v, g, beta, state, slots, torch.tensor([2, 1]), use_qk_l2norm_in_kernel=True)
    expected, _ = R.recurrent_kda(q[:1], k[:1], v[:1], g[:1], beta[:1], initial_state=before[2:3],
                                  output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert rel_err(o[0], expected[0]) < 1e-6 and torch.equal(o[1], torch.zeros_like(o[1]))
    untouched = [0, 1, 3, 4, 6]
    assert torch.equal(state[untouched], before[untouched])


def test_fused_gdn_decode_reference_is_its_composition():
    """The fused step equals the short conv over one channel group, the split, gdn_gate and the pool recurrence."""
    from dayzero.plugins.short_conv.reference import short_conv_decode

    B, L, Hk, Hv, K, V, W = 2, 3, 1, 2, 8, 4, 4
    C = 2 * Hk * K + Hv * V
    qkv, weight = torch.randn(B, L, C), torch.randn(1, C, W)
    conv_state, state = torch.randn(6, 1, W - 1, C), torch.randn(6, Hv, K, V)
    a, b, A_log, dt_bias = torch.randn(B, L, Hv), torch.randn(B, L, Hv), torch.randn(Hv), torch.randn(Hv)
    slots, accepted = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32), torch.tensor([1, 3])
    conv_ref, state_ref = conv_state.clone(), state.clone()
    o = R.fused_gdn_decode_reference(qkv, weight, conv_state, a, A_log, dt_bias, b, state, slots, accepted)
    x = short_conv_decode(qkv[:, :, None], weight, conv_ref, slots, accepted)[:, :, 0]
    q, k, v = x[..., :K].reshape(B, L, Hk, K), x[..., K:2 * K].reshape(B, L, Hk, K), x[..., 2 * K:].view(B, L, Hv, V)
    expected = R.recurrent_kda_pool(q, k, v, R.gdn_gate(a, A_log, dt_bias), b.sigmoid(), state_ref, slots, accepted,
                                    use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, expected) and torch.equal(state, state_ref) and torch.equal(conv_state, conv_ref)
