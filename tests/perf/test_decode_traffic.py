"""The decode traffic floor: every weight once (the embedding's looked-up rows, the routed experts a batch reaches),
KDA state slots read and written, MLA caches by context with DSA capping the latent rows at top-k."""

from __future__ import annotations

import pytest

from dayzero.contract import SLOT
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import eager_manifest
from dayzero.perf.decode_traffic import cache_bytes_per_sequence, decode_traffic, experts_reached, weight_bytes
from tests.helpers import random_model, tiny_config_dict


@pytest.fixture(scope="module")
def model():
    return random_model(tiny_config_dict())


def test_experts_reached_runs_from_top_k_to_all():
    assert experts_reached(64, 6, 1) == pytest.approx(6)
    counts = [experts_reached(64, 6, n) for n in (1, 2, 8, 64, 4096)]
    assert counts == sorted(counts) and counts[-1] == pytest.approx(64)


def test_a_batch_that_reaches_everything_reads_every_weight_once(model):
    every = sum(p.numel() * p.element_size() for p in model.parameters())
    many = 10 * model.config.vocab_size
    assert weight_bytes(model.config, model.dtype, many) == pytest.approx(every, rel=1e-9)
    # one token reads k of the E routed experts and one embedding row
    assert weight_bytes(model.config, model.dtype, 1) < weight_bytes(model.config, model.dtype, 8) < every


def test_dsa_caps_the_latent_rows_at_top_k(model):
    cfg, manifest = model.config, eager_manifest(model, CacheFormat(), max_batch=4)
    per_layer = {(t.layer, t.name): t.unit_bytes / manifest.page_size for t in manifest.cache_tensors if t.unit != SLOT}
    latent = sum(v for (_, name), v in per_layer.items() if name == "latent_kv")
    index = sum(v for (_, name), v in per_layer.items() if name == "index_k")
    topk = cfg.indexer.topk

    def grow(context: int) -> float:
        return cache_bytes_per_sequence(cfg, manifest, context + 1) - cache_bytes_per_sequence(cfg, manifest, context)

    assert grow(topk - 1) == pytest.approx(latent + index)
    assert grow(topk) == grow(10 * topk) == pytest.approx(index)


def test_dense_mla_reads_every_latent_row():
    data = tiny_config_dict(index_n_heads=None, index_head_dim=None, index_topk=None)
    model = random_model(data)
    manifest = eager_manifest(model, CacheFormat(), max_batch=4)
    per_sequence = [cache_bytes_per_sequence(model.config, manifest, c) for c in (0, 1, 5000)]
    assert per_sequence[0] == 0 and per_sequence[2] == pytest.approx(5000 * per_sequence[1])


@pytest.mark.parametrize("num_draft", [0, 2])
def test_state_slots_are_read_once_and_written_per_verified_token(model, num_draft):
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, num_draft=num_draft)
    traffic = decode_traffic(model.config, manifest, batch=3, context=100)
    assert traffic.state_bytes == 3 * manifest.unit_bytes(SLOT) * (2 + num_draft)
    assert traffic.total_bytes == traffic.weight_bytes + traffic.state_bytes + traffic.cache_bytes
    assert traffic.seconds(1e9) == pytest.approx(traffic.total_bytes / 1e9)
