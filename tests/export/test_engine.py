"""The engine contract: manifest round trip, flat caches, and the eager engine == the reference model."""

from __future__ import annotations

import math

import torch

from dayzero.contract import PAGE, SLOT, EngineManifest, allocate_flat_caches
from dayzero.model.caches import CacheFormat, cache_bytes
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE
from tests.helpers import random_model, tiny_config_dict


def test_manifest_round_trips_and_sizes_match_capacity_planning():
    model = random_model(tiny_config_dict())
    fmt = CacheFormat(index_mxfp8=True)  # the tiny latent (64) is narrower than one FP8 tile
    manifest = eager_manifest(model, fmt, max_batch=4)
    assert EngineManifest.from_json(manifest.to_json()) == manifest
    sizes = cache_bytes(model.config, model.dtype, fmt)
    assert manifest.unit_bytes(PAGE) == sizes.per_token * PAGE_SIZE
    assert manifest.unit_bytes(SLOT) == sizes.per_slot


def test_eager_engine_prefill_then_decode_equals_full_logits():
    model = random_model(tiny_config_dict())
    engine = EagerEngine(model, eager_manifest(model, CacheFormat(), max_batch=2))
    ids = torch.randint(0, model.config.vocab_size, (2, 11))
    pages = math.ceil(12 / PAGE_SIZE)
    caches = allocate_flat_caches(engine.manifest, 2 * pages, 2)
    prefill = engine.prefill(ids[:, :10].flatten(), contiguous_meta([0, 0], [10, 10], pages), caches)
    decode = engine.decode(ids[:, 10:], contiguous_meta([10, 10], [1, 1], pages, decode=True), caches)
    full = model.logits(ids)
    torch.testing.assert_close(prefill, full[:, 9], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(decode[:, 0], full[:, 10], rtol=1e-4, atol=1e-4)
