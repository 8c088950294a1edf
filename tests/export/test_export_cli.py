"""`dayzero export` (eager backend, fast): stages on stderr, a second identical export is a cache hit, the entry
loads as an engine; options are validated with messages that say what to do; the libstdc++ re-exec decision."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from dayzero.cache import CompilationCache
from dayzero.cli import cli
from dayzero.errors import DayzeroError
from dayzero.export import preload
from dayzero.export.build import export_engine, load_engine
from dayzero.export.options import ExportOptions
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.eager_engine import EagerEngine
from tests.helpers import TINY_CONFIG


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("ckpt") / "tiny", torch.float32)


def test_second_export_is_a_hit_and_loads(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    args = ["export", str(checkpoint), "--backend", "eager", "--max-batch", "2", "--max-len", "128"]
    first = CliRunner().invoke(cli, args, catch_exceptions=False)
    second = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "[export] load + lay out weights done in" in first.stderr and first.stdout.startswith("built ")
    assert "[export] store (checksums, atomic rename) done in" in first.stderr
    assert "cache hit" in second.stderr and second.stdout.startswith("cache hit ")
    assert len(CompilationCache(tmp_path / "engines").keys()) == 1
    entry, hit = export_engine(checkpoint, ExportOptions(backend="eager", max_batch=2, max_len=128),
                               CompilationCache(tmp_path / "engines"))
    engine = load_engine(entry)
    assert hit and isinstance(engine, EagerEngine)
    assert (engine.manifest.max_batch, engine.manifest.max_len, engine.manifest.backend) == (2, 128, "eager")


@pytest.mark.parametrize("fields, message", [
    ({"tp": 0}, "tp must be >= 1"),
    ({"ep": 0}, "ep must be >= 1"),
    ({"kv_cache": "int4"}, "kv_cache must be one of bf16, fp8"),
    ({"backend": "tensorrt"}, "backend must be one of"),
    ({"num_draft": -1}, "num_draft must be >= 0"),
    ({"num_draft": 16}, "num_draft must be <= 15"),
], ids=["tp", "ep0", "kv", "backend", "draft", "draft-too-many"])
def test_options_are_validated(fields, message):
    with pytest.raises(DayzeroError, match=message):
        ExportOptions(**fields)


def test_fp8_kv_cache_on_a_narrow_latent_says_to_use_bf16(checkpoint, tmp_path):
    options = ExportOptions(backend="eager", kv_cache="fp8")
    with pytest.raises(DayzeroError, match="--kv-cache bf16"):
        export_engine(checkpoint, options, CompilationCache(tmp_path))


def test_reexec_only_on_cuda_linux_without_the_preload():
    if not preload.SYSTEM_LIBSTDCXX.exists():
        assert not preload.needs_reexec({}, cuda=True)
        return
    assert preload.needs_reexec({}, cuda=True)
    assert not preload.needs_reexec({}, cuda=False)
    assert not preload.needs_reexec({preload.NO_REEXEC: "1"}, cuda=True)
    env = preload.preload_environment({"LD_PRELOAD": "/x/libfoo.so"})
    assert env["LD_PRELOAD"].split(":") == [str(preload.SYSTEM_LIBSTDCXX), "/x/libfoo.so"]
    assert env[preload.NO_REEXEC] == "1" and not preload.needs_reexec(env, cuda=True)


def test_device_and_dtype_default_to_auto(checkpoint, tmp_path, monkeypatch):
    import json
    import shutil

    from dayzero.export import build
    from dayzero.export.auto_options import default_device

    bf16 = tmp_path / "bf16"
    shutil.copytree(checkpoint, bf16)
    config = json.loads((bf16 / "config.json").read_text())
    (bf16 / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    asked = []
    monkeypatch.setattr(build, "export_engine", lambda path, options: asked.append(options))
    CliRunner().invoke(cli, ["export", str(bf16), "--backend", "eager"])
    assert (asked[0].device, asked[0].dtype) == (default_device(), "bfloat16")
