"""Bad checkpoints through the CLI: one `error:` line, exit code 2, no traceback, within seconds, and nothing of the
size they describe allocated."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dayzero.model.checkpoint_writer import write_random_checkpoint
from tests.helpers import ROOT, TINY_CONFIG

SECONDS = 30


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("ckpt") / "tiny", dtype=torch.float32)


def with_text_fields(src, dst, **fields):
    shutil.copytree(src, dst)
    data = json.loads((dst / "config.json").read_text())
    data["text_config"].update(fields)
    (dst / "config.json").write_text(json.dumps(data))
    return dst


def dayzero(*args, cache):
    return subprocess.run([sys.executable, "-c", "from dayzero.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=SECONDS,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DAYZERO_CACHE_DIR": str(cache)})


def assert_one_error(result, message):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr


ABSURD = [
    ({"num_hidden_layers": 10**7}, "'num_hidden_layers' must be an integer from 1 to 1024"),
    ({"hidden_size": 10**9}, "'hidden_size' must be an integer from 1 to 65536"),
    ({"vocab_size": 10**10}, "'vocab_size' must be an integer from 1 to 16777216"),
    ({"num_experts": 10**8}, "'num_experts' must be an integer from 1 to 65536"),
    ({"max_position_embeddings": 10**15}, "'max_position_embeddings' must be an integer from 1 to 16777216"),
    ({"num_hidden_layers": 8}, "layers [7, 8] of num_hidden_layers (8) are in neither kda_layers nor full_attn_layers"),
]


@pytest.mark.parametrize("fields, message", ABSURD, ids=lambda v: "-".join(v) if isinstance(v, dict) else None)
@pytest.mark.parametrize("command", ["run", "plan"])
def test_absurd_config(checkpoint, tmp_path, fields, message, command):
    broken = with_text_fields(checkpoint, tmp_path / "c", **fields)
    extra = ["--max-tokens", "2"] if command == "run" else []
    assert_one_error(dayzero(command, broken, *extra, cache=tmp_path), message)


def test_config_larger_than_its_weights(checkpoint, tmp_path):
    broken = with_text_fields(checkpoint, tmp_path / "c", hidden_size=65536, vocab_size=1 << 24)
    assert_one_error(dayzero("run", broken, cache=tmp_path), "parameters, but its safetensors files hold")


def test_header_length_beyond_the_file(checkpoint, tmp_path):
    broken = shutil.copytree(checkpoint, tmp_path / "c")
    shard = broken / "model.safetensors"
    shard.write_bytes((1 << 62).to_bytes(8, "little") + shard.read_bytes()[8:])
    assert_one_error(dayzero("run", broken, cache=tmp_path), f"{shard} is not a safetensors file")


def test_index_entry_outside_the_checkpoint(checkpoint, tmp_path):
    broken = shutil.copytree(checkpoint, tmp_path / "c")
    with safe_open(str(broken / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    weight_map = {name: "model.safetensors" for name in names} | {"model.norm.weight": "../../../etc/passwd"}
    (broken / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert_one_error(dayzero("run", broken, cache=tmp_path), "names shard '../../../etc/passwd'")


def test_integer_lm_head(checkpoint, tmp_path):
    broken = shutil.copytree(checkpoint, tmp_path / "c")
    tensors = load_file(broken / "model.safetensors")
    tensors["lm_head.weight"] = tensors["lm_head.weight"].to(torch.int32)
    save_file(tensors, str(broken / "model.safetensors"))
    assert_one_error(dayzero("run", broken, cache=tmp_path), "'lm_head.weight' in")
