from __future__ import annotations

import torch
import torch.nn.functional as F

from dayzero.plugins.short_conv.reference import short_conv_decode, short_conv_prefill
from tests.helpers import rel_err


def conv1d_reference(x, weight):
    """torch's causal depthwise conv1d on x [T, G, C] with weight [G, C, W], zero history, then SiLU."""
    T, G, C = x.shape
    W = weight.shape[-1]
    y = F.conv1d(x.permute(1, 2, 0).reshape(1, G * C, T), weight.reshape(G * C, 1, W), padding=W - 1, groups=G * C)
    return F.silu(y[..., :T].reshape(G, C, T).permute(2, 0, 1))


def test_prefill_matches_conv1d_and_keeps_window():
    x, w = torch.randn(11, 3, 6), torch.randn(3, 6, 4)
    state = torch.full((3, 3, 3, 6), float("nan"))
    state[2] = 0
    y = short_conv_prefill(x, w, state, torch.tensor([0, 11]), torch.tensor([2]))
    assert rel_err(y, conv1d_reference(x, w)) < 1e-6
    assert torch.equal(state[2], x[-3:].transpose(0, 1))
    assert state[0].isnan().all() and state[1].isnan().all()


def test_prefill_then_decode_equals_one_pass():
    x, w = torch.randn(9, 3, 5), torch.randn(3, 5, 4)
    ref = conv1d_reference(x, w)
    state = torch.zeros(2, 3, 3, 5)
    parts = [short_conv_prefill(x[:2], w, state, torch.tensor([0, 2]), torch.tensor([1]))]
    for t in range(2, 9):
        slots = torch.tensor([[1]], dtype=torch.int32)
        parts.append(short_conv_decode(x[t : t + 1][None], w, state, slots, torch.ones(1, dtype=torch.int32))[0])
    assert rel_err(torch.cat(parts), ref) < 1e-6


def test_varlen_sequences_do_not_mix():
    x, w = torch.randn(10, 3, 4), torch.randn(3, 4, 4)
    state = torch.zeros(2, 3, 3, 4)
    y = short_conv_prefill(x, w, state, torch.tensor([0, 4, 10]), torch.tensor([0, 1]))
    assert rel_err(y[:4], conv1d_reference(x[:4], w)) < 1e-6
    assert rel_err(y[4:], conv1d_reference(x[4:], w)) < 1e-6


def test_decode_spec_slots_and_padding():
    x, w = torch.randn(2, 3, 3, 4), torch.randn(3, 4, 4)
    state = torch.randn(8, 3, 3, 4)
    before = state.clone()
    slots = torch.tensor([[4, 5, 6], [-1, -1, -1]], dtype=torch.int32)
    y = short_conv_decode(x, w, state, slots, torch.tensor([2, 1], dtype=torch.int32))
    window = before[5].transpose(0, 1)
    rows = torch.cat([window, x[0]])
    for t in range(3):
        assert torch.allclose(state[slots[0, t]], rows[t + 1 : t + 4].transpose(0, 1))
    assert torch.equal(y[1], torch.zeros_like(y[1]))
    assert torch.equal(state[[0, 1, 2, 3, 7]], before[[0, 1, 2, 3, 7]])
