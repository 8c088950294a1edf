"""The hyper-connection stream around two decoder layers against transformers' GLM-5.3-Flash layers and head."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dayzero.model.hyper_connections import HyperConnection, HyperConnections, layer_connections
from tests.helpers import rel_err

glm5 = pytest.importorskip("transformers.models.glm5_next.modeling_glm5_next")
HC, DIM, ITERS, TOKENS = 3, 40, 5, 7


class _Mixer(nn.Module):
    """Stands in for the token mixer: a projection, called as transformers' layer calls its attention."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(DIM, DIM, bias=False)

    def forward(self, hidden_states, **kwargs):
        return self.proj(hidden_states)


def _glm5_layers(num_layers: int = 2):
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig

    config = Glm5NextTextConfig(hidden_size=DIM, hc_mult=HC, hc_sinkhorn_iters=ITERS, num_hidden_layers=num_layers,
                                intermediate_size=24, num_attention_heads=2, num_key_value_heads=2, vocab_size=50,
                                pad_token_id=0, layer_types=["linear_attention"] * num_layers,
                                mlp_layer_types=["dense"] * num_layers)
    layers = [glm5.Glm5NextTextDecoderLayer(config, i) for i in range(num_layers)]
    with torch.no_grad():
        for layer in layers:
            layer.self_attn = _Mixer()
            for p in layer.parameters():
                p.normal_(0.0, 0.3)
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.uniform_(0.5, 1.5)
    return config, layers


def _connection(config, theirs) -> HyperConnection:
    ours = HyperConnection(HC, DIM, ITERS, config.hc_eps, config.rms_norm_eps)
    ours.load_state_dict(theirs.state_dict())
    return ours


class _Layer:
    """What the stream asks of a dayzero decoder layer: its two hyper-connections and its two input norms
    (transformers')."""

    def __init__(self, config, theirs):
        self.attn_hc, self.ffn_hc = _connection(config, theirs.attn_hc), _connection(config, theirs.ffn_hc)
        self.input_layernorm, self.post_attention_layernorm = theirs.input_layernorm, theirs.post_attention_layernorm


def _final_norm(config) -> nn.Module:
    norm = glm5.Glm5NextTextRMSNorm(DIM, eps=config.rms_norm_eps)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    return norm


class _Model:
    """What the stream asks of the dayzero model: its final norm."""

    def __init__(self, norm: nn.Module):
        self.norm = norm


def _through_stream(embeddings, config, layers, final_norm):
    # block.py's order of calls, with transformers' sublayers and norms
    ours = [_Layer(config, theirs) for theirs in layers]
    stream = HyperConnections(embeddings, HC, layer_connections(ours))
    for layer, theirs in zip(ours, layers):
        stream.add(theirs.self_attn(stream.attn_input(layer)))
        stream.add(theirs.mlp(stream.mlp_input(layer)))
    return stream.output(_Model(final_norm))


def test_stream_matches_transformers_layers_head_and_final_norm():
    config, layers = _glm5_layers(num_layers=3)
    final_norm = _final_norm(config)
    embeddings = torch.randn(TOKENS, DIM)
    with torch.no_grad():
        hidden = embeddings.view(1, TOKENS, DIM).unsqueeze(2).expand(-1, -1, HC, -1).contiguous()
        for layer in layers:
            hidden, _ = layer(hidden)
        expected = final_norm(glm5.Glm5NextTextHyperHead()(hidden))[0]
        got = _through_stream(embeddings, config, layers, final_norm)
    assert rel_err(got, expected) < 1e-5


def test_each_sublayer_runs_one_collapse_and_one_update(monkeypatch):
    from dayzero.plugins import mhc

    calls = []
    for name in ("mhc_pre", "mhc_post"):
        op = getattr(mhc, name)
        monkeypatch.setattr(mhc, name, lambda *args, op=op, name=name: calls.append(name) or op(*args))
    config, layers = _glm5_layers()
    with torch.no_grad():
        _through_stream(torch.randn(TOKENS, DIM), config, layers, _final_norm(config))
    assert calls == ["mhc_pre", "mhc_post"] * 4


def test_adding_before_an_input_is_refused():
    stream = HyperConnections(torch.randn(2, DIM), HC, [])
    with pytest.raises(AssertionError, match="after the stream gave"):
        stream.add(torch.randn(2, DIM))


def test_sublayers_out_of_the_connections_order_are_refused():
    config, layers = _glm5_layers()
    ours = [_Layer(config, theirs) for theirs in layers]
    stream = HyperConnections(torch.randn(2, DIM), HC, layer_connections(ours))
    with pytest.raises(AssertionError, match="in the order of its connections"):
        stream.mlp_input(ours[0])
