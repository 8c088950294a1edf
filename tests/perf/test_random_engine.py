import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.export.options import ExportOptions
from dayzero.model.config import ModelConfig
from dayzero.model.random_init import init_random_
from dayzero.model.weights import FP32_PARAMS, build_empty
from dayzero.perf.random_engine import random_engine, random_model
from tests.helpers import TINY_CONFIG


def test_weights_match_the_checkpoint_writers_and_take_their_dtypes():
    cfg = ModelConfig.from_hf(TINY_CONFIG)
    made = random_model(cfg, torch.bfloat16, "cpu", seed=3)
    expected = build_empty(cfg, torch.bfloat16, "cpu")
    init_random_(expected, seed=3)
    made_params, expected_params = dict(made.named_parameters()), dict(expected.named_parameters())
    assert made_params.keys() == expected_params.keys()
    for name, param in made_params.items():
        assert param.device.type == "cpu" and not param.requires_grad
        assert param.dtype == (torch.float32 if FP32_PARAMS.search(name) else torch.bfloat16), name
        assert torch.equal(param, expected_params[name]), name


def test_the_engine_is_laid_out_and_decodes_finite_logits():
    engine = random_engine(TINY_CONFIG, ExportOptions(backend="eager", device="cpu", dtype="float32", max_batch=2))
    model = engine.model
    assert model.model.layers[0].self_attn.in_proj is not None
    assert engine.manifest.max_batch == 2 and engine.manifest.extra == {"tp": 1, "cp": 1, "rank": 0}
    logits = model.logits(torch.randint(0, 256, (2, 9)))
    assert logits.shape == (2, 9, model.config.vocab_size) and torch.isfinite(logits).all() and logits.std() > 0


@pytest.mark.parametrize("options", [ExportOptions(backend="aoti"), ExportOptions(backend="eager", tp=2)],
                         ids=["aoti", "tp2"])
def test_one_eager_rank_only(options):
    with pytest.raises(DayzeroError, match="one eager engine"):
        random_engine(TINY_CONFIG, options)


def test_a_slice_keeps_the_configs_first_layers():
    options = ExportOptions(backend="eager", device="cpu", dtype="float32", max_batch=1)
    whole = ModelConfig.from_hf(TINY_CONFIG)
    engine = random_engine(TINY_CONFIG, options, num_layers=3)
    cfg = engine.model.config
    assert cfg.layer_kinds == whole.layer_kinds[:3] and cfg.mlp_kinds == whole.mlp_kinds[:3]
    assert len(engine.model.model.layers) == 3 and {s.layer for s in engine.manifest.cache_tensors} == {0, 1, 2}
    with pytest.raises(DayzeroError, match="--num-layers"):
        random_engine(TINY_CONFIG, options, num_layers=whole.num_layers + 1)
