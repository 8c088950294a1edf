"""The exported AOTInductor engine (CPU, tiny-hybrid) == the eager reference: varlen prefill then several decode
steps, caches updated in place; the second export is a cache hit; the generated code copies no cache."""

from __future__ import annotations

import math
import time

import pytest
import torch

from dayzero.cache import CompilationCache
from dayzero.contract import allocate_flat_caches
from dayzero.export import fingerprint
from dayzero.export.aoti import AOTIEngine, whole_tensor_copies
from dayzero.export.build import RANK_DIR, export_engine, load_engine
from dayzero.export.options import ExportOptions
from dayzero.model import load
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.eager_engine import EagerEngine
from dayzero.plugins.paged_cache import PAGE_SIZE
from tests.helpers import TINY_CONFIG, rel_err, run_steps

OPTIONS = ExportOptions(backend="aoti", max_batch=4, num_draft=1, device="cpu", dtype="float32")
DECODE_OPS = {"fused_kda_decode", "write_latent", "write_index_keys", "index_topk_paged", "sparse_mla_paged",
              "attnres_mix_norm", "moe_route", "moe_permute", "moe_grouped_mlp", "moe_unpermute"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    # other work may edit the sources of this checkout while the module runs: pin the source hash
    source = fingerprint.source_fingerprint()
    pinned = pytest.MonkeyPatch()
    pinned.setattr(fingerprint, "source_fingerprint", lambda: source)
    root = tmp_path_factory.mktemp("aoti")
    write_random_checkpoint(TINY_CONFIG, root / "ckpt", torch.float32, overwrite=True)
    cache = CompilationCache(root / "engines")
    start = time.perf_counter()
    entry, hit = export_engine(root / "ckpt", OPTIONS, cache)
    cold = time.perf_counter() - start
    assert not hit
    print(f"\ncold AOTI export of tiny-hybrid: {cold:.1f} s")
    yield root, cache, entry
    pinned.undo()


def test_second_export_is_a_hit(exported):
    root, cache, entry = exported
    start = time.perf_counter()
    again, hit = export_engine(root / "ckpt", OPTIONS, cache)
    print(f"\nwarm export (hit): {time.perf_counter() - start:.2f} s")
    assert hit and again.path == entry.path
    _, changed = export_engine(root / "ckpt", ExportOptions(**{**OPTIONS.__dict__, "backend": "eager"}), cache)
    assert not changed and len(cache.keys()) == 2


def test_generated_code_has_the_plugin_ops_and_copies_no_cache(exported):
    _, _, entry = exported
    assert DECODE_OPS <= set(entry.meta["plugin_ops"]["decode"])
    assert {"chunk_kda", "short_conv_prefill"} <= set(entry.meta["plugin_ops"]["prefill"])
    for step in ("prefill", "decode"):
        assert whole_tensor_copies(entry.file(f"{RANK_DIR}/{step}.pt2")) == []


def test_aoti_engine_matches_eager_reference(exported):
    root, _, entry = exported
    start = time.perf_counter()
    engine = load_engine(entry)
    print(f"\nAOTI engine load: {time.perf_counter() - start:.2f} s")
    assert isinstance(engine, AOTIEngine)
    reference = EagerEngine(load(root / "ckpt", dtype=torch.float32), engine.manifest)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (37, 70)]
    steps = [torch.randint(0, 256, (2, 2), generator=gen).tolist() for _ in range(3)]
    pages = 2 * math.ceil(80 / PAGE_SIZE)
    caches = allocate_flat_caches(engine.manifest, pages, 4)
    expected_caches = allocate_flat_caches(engine.manifest, pages, 4)
    pointers = [c.data_ptr() for c in caches]
    got = run_steps(engine, caches, prompts, steps)
    expected = run_steps(reference, expected_caches, prompts, steps)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and rel_err(g, e) < 1e-4
    assert [c.data_ptr() for c in caches] == pointers
    for c, e in zip(caches, expected_caches):
        assert e.abs().sum() > 0 and rel_err(c.float(), e.float()) < 1e-4
