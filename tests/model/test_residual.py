"""The plain residual stream: each sublayer output is added together with the norm that follows it (`add_rms_norm`),
and the normed inputs, the final state and the per-layer states are those of a separate add and norm, bit for bit."""

from __future__ import annotations

import pytest
import torch

from dayzero.model.norm import rms_norm
from dayzero.model.residual import PlainResidual
from dayzero.plugins import norm as norm_ops
from tests.helpers import layer_pattern, random_model, tiny_config_dict

DIM, TOKENS, LAYERS, EPS = 40, 5, 3, 1e-6


class _Layer:
    """What the stream asks of a decoder layer: its two input norms."""

    def __init__(self, zero_centered: bool):
        self.input_layernorm, self.post_attention_layernorm = (_norm(zero_centered) for _ in range(2))


class _Model:
    def __init__(self, zero_centered: bool):
        self.norm = _norm(zero_centered)


def _norm(zero_centered: bool):
    module = rms_norm(DIM, EPS, zero_centered)
    module.weight.data = (torch.rand(DIM) + (0.0 if zero_centered else 0.5)).bfloat16()
    return module


def _outputs() -> list[torch.Tensor]:
    return [(torch.randn(TOKENS, DIM) * 3).bfloat16() for _ in range(2 * LAYERS)]


def _calls(monkeypatch) -> list[str]:
    calls = []
    for name in ("rms_norm", "add_rms_norm"):
        op = getattr(norm_ops, name)
        monkeypatch.setattr(norm_ops, name, lambda *args, op=op, name=name: calls.append(name) or op(*args))
    return calls


@pytest.mark.parametrize("zero_centered", [False, True], ids=["weight", "one-plus-weight"])
def test_inputs_states_and_output_are_the_separate_add_and_norm_exactly(monkeypatch, zero_centered):
    layers, model = [_Layer(zero_centered) for _ in range(LAYERS)], _Model(zero_centered)
    embeddings, outputs = (torch.randn(TOKENS, DIM) * 2).bfloat16(), _outputs()
    calls = _calls(monkeypatch)
    stream, hidden = PlainResidual(embeddings), embeddings
    for index, layer in enumerate(layers):
        attention, mlp = outputs[2 * index:2 * index + 2]
        assert torch.equal(stream.attn_input(layer), layer.input_layernorm(hidden))
        stream.add(attention)
        hidden = hidden + attention
        assert torch.equal(stream.mlp_input(layer), layer.post_attention_layernorm(hidden))
        stream.add(mlp)
        hidden = hidden + mlp
    assert torch.equal(stream.output(model), model.norm(hidden))
    # the expected values' own norms are the plain rms_norm calls after the stream's
    assert calls[::2] == ["rms_norm"] + ["add_rms_norm"] * 2 * LAYERS


def test_a_state_adds_the_pending_output_and_changes_nothing_after():
    layer, model = _Layer(False), _Model(False)
    embeddings, (attention, mlp) = torch.randn(TOKENS, DIM).bfloat16(), _outputs()[:2]
    stream = PlainResidual(embeddings)
    stream.attn_input(layer)
    stream.add(attention)
    assert torch.equal(stream.state(), embeddings + attention)
    assert torch.equal(stream.mlp_input(layer), layer.post_attention_layernorm(embeddings + attention))
    stream.add(mlp)
    assert torch.equal(stream.state(), embeddings + attention + mlp)
    assert torch.equal(stream.output(model), model.norm(embeddings + attention + mlp))


def test_two_adds_in_a_row_sum_both():
    embeddings, (first, second) = torch.randn(TOKENS, DIM).bfloat16(), _outputs()[:2]
    stream = PlainResidual(embeddings)
    stream.add(first)
    stream.add(second)
    assert torch.equal(stream.state(), embeddings + first + second)


def test_a_plain_residual_model_adds_with_the_norms(monkeypatch):
    """Every add of a plain-residual network runs with the next norm: two a layer (the next layer's input norm, or
    the final norm, takes the MLP's); the only plain decoder norm is the first layer's input norm."""
    model = random_model(tiny_config_dict(attn_res_block_size=None, num_hidden_layers=2,
                                          linear_attn_config=layer_pattern("km")))
    calls = _calls(monkeypatch)
    model.logits(torch.randint(0, 200, (1, 6)))
    assert calls.count("add_rms_norm") == 2 * model.config.num_layers
