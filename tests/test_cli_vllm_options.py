"""The engine commands take the model as an argument and vLLM's option names beside dayzero's own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from dayzero import cli as cli_module
from dayzero.cli import cli
from dayzero.errors import DayzeroError


class _StopAfterOptions(Exception):
    pass


@pytest.fixture
def captured(monkeypatch):
    """What `run` would build its LLM from, without building it."""
    seen = {}

    def fake_llm(checkpoint, export, runtime, **kwargs):
        seen.update(checkpoint=checkpoint, export=export, runtime=runtime)
        raise _StopAfterOptions

    import dayzero.llm.api

    monkeypatch.setattr(dayzero.llm.api, "LLM", fake_llm)
    return seen


def _run(*args):
    return CliRunner().invoke(cli, ["run", *args])


def test_vllm_option_names_map_onto_the_engine_options(tmp_path, captured):
    result = _run(str(tmp_path), "--tensor-parallel-size", "2", "--enable-expert-parallel", "--max-model-len", "300",
                  "--kv-cache-dtype", "fp8", "--index-cache", "mxfp8", "--gpu-memory-utilization", "0.5",
                  "--enforce-eager", "--enable-prefix-caching", "--max-num-batched-tokens", "96",
                  "--num-speculative-tokens", "3")
    assert isinstance(result.exception, _StopAfterOptions), result.output
    export, runtime = captured["export"], captured["runtime"]
    assert captured["checkpoint"] == tmp_path
    assert (export.tp, export.ep, export.max_len, export.kv_cache, export.index_cache, export.num_draft) == (
        2, 2, 300, "fp8", "mxfp8", 3)
    assert (runtime.gpu_memory_fraction, runtime.cuda_graphs, runtime.prefix_caching, runtime.token_budget) == (
        0.5, False, True, 96)


def test_dayzero_names_give_the_same_options(tmp_path, captured):
    _run("--checkpoint", str(tmp_path), "--tp", "2", "--ep", "2", "--max-len", "300", "--kv-cache", "fp8",
         "--gpu-memory-fraction", "0.5", "--no-cuda-graphs", "--prefix-caching", "--token-budget", "96",
         "--num-draft", "3", "--index-cache", "mxfp8")
    dayzero_names = dict(captured)
    _run("--model", str(tmp_path), "--tensor-parallel-size", "2", "--enable-expert-parallel", "--max-model-len", "300",
         "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.5", "--enforce-eager", "--enable-prefix-caching",
         "--max-num-batched-tokens", "96", "--num-speculative-tokens", "3", "--index-cache", "mxfp8")
    assert captured == dayzero_names


def test_auto_kv_cache_is_the_unquantized_one(tmp_path, captured):
    _run(str(tmp_path), "--kv-cache-dtype", "auto")
    assert captured["export"].kv_cache == "bf16"


def test_two_different_checkpoints_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(DayzeroError, match="two checkpoints"):
        cli_module._checkpoint(tmp_path / "a", tmp_path / "b")
    assert cli_module._checkpoint(tmp_path / "a", tmp_path / "a") == tmp_path / "a"


def test_expert_parallel_flag_and_ep_must_agree():
    assert cli_module._expert_split(4, None, True) == 4
    assert cli_module._expert_split(4, None, False) == 1
    with pytest.raises(DayzeroError, match="--enable-expert-parallel"):
        cli_module._expert_split(4, 1, True)


def test_the_model_argument_runs_the_checkpoint(tmp_path):
    out = tmp_path / "ckpt"
    runner = CliRunner()
    assert runner.invoke(cli, ["init-checkpoint", "tiny-hybrid", str(out), "--dtype", "float32"]).exit_code == 0
    by_argument = runner.invoke(cli, ["run", str(out), "--max-tokens", "4", "--temperature", "0"])
    by_option = runner.invoke(cli, ["run", "--checkpoint", str(out), "--max-tokens", "4", "--temperature", "0"])
    assert by_argument.exit_code == 0, by_argument.output
    # the generated text (stdout: log lines go to stderr), without the bracketed status lines and the request ids
    # (a counter of the process)
    def text(output):
        return [line for line in output.splitlines() if not line.startswith(("[", "--- "))]

    assert text(by_argument.stdout) == text(by_option.stdout) and text(by_argument.stdout)


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "0.1.0" in result.output


def _untokenized_checkpoint(tmp_path):
    """A random checkpoint whose vocabulary is larger than bytes and which has no tokenizer files."""
    from dayzero.paths import bundled_config

    config = json.loads(bundled_config("tiny-hybrid").read_text())
    (tmp_path / "cfg").mkdir()
    config["text_config"]["vocab_size"] = 701
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "ckpt"
    result = CliRunner().invoke(cli, ["init-checkpoint", str(tmp_path / "cfg"), str(out), "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    return out


def test_bench_needs_no_tokenizer_and_writes_its_json(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path / "cache"))
    checkpoint = _untokenized_checkpoint(tmp_path)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", str(checkpoint), "--batch", "2", "--prompt-tokens", "9",
                                      "--output-tokens", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["engine"]["model"] == str(checkpoint) and written["rows"][0]["batch"] == 2


def test_an_llm_without_tokenizer_takes_token_ids(tmp_path, monkeypatch):
    from dayzero import LLM, SamplingParams

    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path / "cache"))
    llm = LLM(_untokenized_checkpoint(tmp_path), skip_tokenizer_init=True, device="cpu", dtype="float32")
    (out,) = llm.generate({"prompt_token_ids": [5, 600, 7]}, SamplingParams(temperature=0, max_tokens=3))
    assert len(out.outputs[0].token_ids) == 3 and out.outputs[0].text == ""
    with pytest.raises(DayzeroError, match="token-id prompts"):
        llm.generate("text needs a tokenizer")


def test_serve_says_a_taken_port_before_loading_anything(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    started = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-m", "dayzero", "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--request-read-seconds", "5"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)})
    finally:
        taken.close()
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    # nothing was loaded: the embedded checkpoint was never written
    assert not (tmp_path / "checkpoints").exists() and "[engine:" not in result.stdout
    assert time.monotonic() - started < 60


def test_the_default_dtype_is_the_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "ckpt"
    runner = CliRunner()
    assert runner.invoke(cli, ["init-checkpoint", "tiny-hybrid", str(out), "--dtype", "bfloat16"]).exit_code == 0
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    result = runner.invoke(cli, ["run", str(out), "--max-tokens", "2", "--temperature", "0"])
    assert result.exit_code == 0, result.output
    assert "[engine: eager on cpu in bfloat16" in result.output
    forced = runner.invoke(cli, ["run", str(out), "--max-tokens", "2", "--temperature", "0", "--dtype", "float32"])
    assert "[engine: eager on cpu in float32" in forced.output
