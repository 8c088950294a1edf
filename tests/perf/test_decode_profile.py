import json

import pytest
from click.testing import CliRunner

from dayzero.cli import cli
from dayzero.export.options import ExportOptions
from dayzero.model.config import ModelConfig
from dayzero.perf.decode_profile import decode_profile
from dayzero.perf.decode_traffic import decode_traffic
from dayzero.perf.engine_bench import run_engine
from dayzero.perf.op_kinds import (
    ATTNRES,
    CACHE_WRITES,
    GEMM,
    HOST_GAPS,
    INDEXER,
    KDA,
    MLA,
    MODEL_GAPS,
    MOE_EXPERTS,
    MOE_ROUTING,
    SAMPLING,
)
from dayzero.perf.random_engine import random_engine
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from tests.helpers import ROOT, TINY_CONFIG

# the work every decode step of the tiny hybrid model does (KDA and DSA-MLA layers, AttnRes, MoE)
TINY_KINDS = {KDA, INDEXER, MLA, CACHE_WRITES, ATTNRES, MOE_ROUTING, MOE_EXPERTS, GEMM, SAMPLING, HOST_GAPS}


def test_a_step_splits_into_the_tiny_models_kinds_and_host_gaps():
    engine = LLMEngine(random_engine(TINY_CONFIG, ExportOptions(backend="eager", device="cpu", max_batch=2)),
                       RuntimeOptions(memory_bytes=32 << 20))
    cfg = ModelConfig.from_hf(TINY_CONFIG)
    run = run_engine(engine, batch=2, prompt_tokens=6, output_tokens=3, profile_steps=2)
    found = decode_profile(cfg, engine.manifest, 2, 6, run.profile, copy_bytes_per_s=1e9)
    ms = {row.kind: row.ms for row in found.rows}
    assert TINY_KINDS <= {kind for kind, t in ms.items() if t > 0}
    assert sum(t for kind, t in ms.items() if kind not in (MODEL_GAPS, HOST_GAPS)) == pytest.approx(found.busy_ms)
    # on a CPU the model's gaps are the Python between its ops: there is some
    assert 0 < ms[MODEL_GAPS] < found.step_ms - found.busy_ms
    # the busiest ops by name, each of a kind, with the model's plugin ops among them
    names = {name: (kind, launches, t) for name, kind, launches, t in found.kernels}
    assert any(name.startswith("dayzero::") for name in names)
    assert all(t >= 0 and launches > 0 for _, launches, t in names.values())
    assert found.busy_ms <= found.step_ms and sum(ms.values()) == pytest.approx(found.step_ms)
    floor = decode_traffic(cfg, engine.manifest, 2, found.context).seconds(1e9) * 1e3
    assert sum(row.floor_ms for row in found.rows) == pytest.approx(floor)
    assert found.steps == 2 and not found.on_device and found.context > 6
    # the timed run after the profiled one is whole
    assert not engine.has_work and run.decode_tokens == 2 * 2 and run.batch == 2


def test_bench_profiles_a_config_with_random_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    config = ROOT / "dayzero" / "configs" / "tiny-hybrid"
    args = ["bench", str(config), "--random-weights", "--device", "cpu", "--batch", "2", "--prompt-tokens", "6",
            "--prompt-tokens", "9", "--output-tokens", "2", "--profile", "--profile-steps", "2", "--json", str(out),
            "--num-layers", "5"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "random weights made" in result.output and "profile, batch 2" in result.output
    assert "host gaps" in result.output and "MoE expert GEMMs" in result.output
    report = json.loads(out.read_text())
    assert report["engine"]["random_weights"] and report["engine"]["num_layers"] == 5
    assert report["rows"][0]["decode tok/s"] > 0
    assert [(r["prompt"], r["batch"]) for r in report["rows"]] == [(6, 2), (9, 2)]
    for profile in report["profiles"]:
        kinds = profile["kinds"]
        assert TINY_KINDS <= {kind for kind, row in kinds.items() if row["ms"] > 0}
        assert sum(row["ms"] for kind, row in kinds.items() if kind != HOST_GAPS) <= profile["step ms"] + 1e-3
        assert profile["kernels"] and {"name", "kind", "launches", "ms"} <= set(profile["kernels"][0])
    # nothing written: no checkpoint, no export
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


def test_random_weights_need_a_config_and_only_they_take_a_layer_count(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["bench", "--random-weights", "--device", "cpu"])
    assert result.exit_code != 0 and "give MODEL" in str(result.exception)
    result = CliRunner().invoke(cli, ["bench", "--num-layers", "2", "--device", "cpu"])
    assert result.exit_code != 0 and "--num-layers cuts the config" in str(result.exception)
