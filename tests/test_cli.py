from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from click.testing import CliRunner

from dayzero.cli import cli, main
from tests.helpers import ROOT


def test_run_creates_the_embedded_model_and_streams(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["run", "--max-tokens", "5", "--temperature", "0", "--prompt", "hello"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "creating the embedded tiny-hybrid checkpoint" in result.output
    assert "\nhello" in result.output
    assert "5 generated" in result.output and "tokens/s" in result.output
    assert (tmp_path / "checkpoints" / "tiny-hybrid" / "config.json").exists()


def test_init_checkpoint_then_run_it(tmp_path):
    out = tmp_path / "ckpt"
    runner = CliRunner()
    result = runner.invoke(cli, ["init-checkpoint", "tiny-hybrid", str(out), "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["run", "--checkpoint", str(out), "--max-tokens", "3", "--temperature", "0"])
    assert result.exit_code == 0 and "3 generated" in result.output and "drafts accepted" not in result.output
    result = runner.invoke(cli, ["run", "--checkpoint", str(out), "--max-tokens", "12", "--temperature", "0",
                                 "--num-draft", "2", "--prompt", "abcabcabcabc"])
    assert result.exit_code == 0 and "12 generated" in result.output, result.output
    assert re.search(r"drafts accepted \d+/\d+ \(\d+%\)", result.output), result.output


def test_context_parallel_run_answers_the_same_text(tmp_path, monkeypatch):
    """`--cp 2` with a small token budget: the prompt's prefill chunks continue after cached context on two ranks."""
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    args = ["run", "--max-tokens", "12", "--temperature", "0", "--prompt", "context parallel prefill " * 6,
            "--token-budget", "64"]
    texts = []
    for extra in ([], ["--cp", "2"]):
        result = CliRunner().invoke(cli, args + extra, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        texts.append(re.split(r"--- req-\d+", result.output)[1].split("\n[")[0])
    assert "x 2 ranks" in result.output and "12 generated" in result.output
    assert texts[0] == texts[1] and "context parallel prefill" in texts[0]


def run_main(*args, env=None):
    return subprocess.run([sys.executable, "-c", "from dayzero.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env)


def test_user_errors_print_without_traceback(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    result = run_main("run", "--checkpoint", str(tmp_path))
    assert result.returncode == 2
    assert "error:" in result.stderr and "is not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_bundled_config(tmp_path):
    result = run_main("init-checkpoint", "no-such-model", str(tmp_path / "x"))
    assert result.returncode == 2 and "no bundled config 'no-such-model'" in result.stderr


def test_run_refuses_a_memory_fraction_outside_0_1(tmp_path):
    result = run_main("run", "--gpu-memory-fraction", "1.5", env={**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 2 and "--gpu-memory-fraction must be in (0, 1], got 1.5" in result.stderr


def test_plan_prints_the_weights_each_rank_holds():
    result = CliRunner().invoke(cli, ["plan", "kimi-k3.1", "--tp", "8", "--ep", "8"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "2779.66 B parameters" in result.output and "per rank (--tp 8 --ep 8): 354.70 B parameters" in result.output
    grouped = CliRunner().invoke(cli, ["plan", "kimi-linear-48b-a3b", "--tp", "2", "--cp", "4"])
    assert grouped.exit_code == 0
    assert "x --cp 4: 8 ranks (GPUs), each group of 2 holding the whole model" in grouped.output
    refused = CliRunner().invoke(cli, ["plan", "tiny-hybrid", "--tp", "3"])
    assert "does not divide this model" in str(refused.exception)


def test_inspect_counts_the_weights_plan_counts():
    args = ["kimi-k3.1", "--tp", "8", "--ep", "8", "--mxfp4-experts"]
    plan = CliRunner().invoke(cli, ["plan", *args], catch_exceptions=False).output
    inspect = CliRunner().invoke(cli, ["inspect", *args], catch_exceptions=False)
    assert inspect.exit_code == 0
    totals = [line.split() for line in inspect.output.splitlines() if line.startswith("total")]
    (whole, whole_gib), (share, share_gib) = re.findall(r"([\d.]+) B parameters, ([\d.]+) GiB", plan)
    assert totals[0][2:6] == [whole, "B", whole_gib, "GiB"] and totals[1][2:6] == [share, "B", share_gib, "GiB"]
    assert "MLA + DSA indexer" in inspect.output and "moe_grouped_mlp_mxfp4" in inspect.output


def test_inspect_json_of_a_checkpoint_folder(tmp_path):
    (tmp_path / "config.json").write_text((ROOT / "dayzero/configs/kimi-linear-48b-a3b/config.json").read_text())
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--context", "4096", "--json"],
                                catch_exceptions=False)
    report = json.loads(result.output)
    assert report["options"]["context"] == 4096 and report["model_type"] == "kimi_linear"
    assert {row["label"] for row in report["rows"]} >= {"KDA", "dense MLA", "dense MLP", "MoE"}
    assert report["model_total"]["params"] == sum(row["model"]["params"] for row in report["rows"])


@pytest.mark.parametrize("args", [["kimi-linear-48b-a3b", "--tp", "3"], ["tiny-hybrid", "--kv-cache", "fp8"],
                                  ["kimi-linear-48b-a3b", "--context", "0"], ["no-such-model"]])
def test_inspect_refuses_bad_input_in_one_line(args, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["dayzero", "inspect", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_answers_over_http_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    command = [sys.executable, "-c", "from dayzero.cli import main; main()", "serve", "--port", str(port),
               "--served-model-name", "tiny"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.ConnectError:
                time.sleep(0.2)
        reply = httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "hello", "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 3
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=60)[0]
    assert server.returncode == 0, output
    # listening on every address by default, as vLLM does (a container's published port reaches it)
    assert f"serving 'tiny' at http://0.0.0.0:{port}/v1" in output and "Traceback" not in output


def test_bench_reports_throughput_and_the_decode_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", "--batch", "1", "--batch", "3", "--prompt-tokens", "20",
                                      "--output-tokens", "4", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "copy" in result.output and "matmul" in result.output and "floor / step" in result.output
    assert all(r["prefill TFLOP/s"] > 0 and r["of matmul"] > 0 for r in json.loads(out.read_text())["rows"])
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 3]
    assert all(r["decode tok/s"] > 0 and 0 < r["floor ms"] and r["prefill tok/s"] > 0 for r in rows)
    # 3 sequences move more state and cache bytes a step than one
    assert rows[1]["floor MB"] > rows[0]["floor MB"]


def test_bench_needs_decode_steps(tmp_path):
    result = run_main("bench", "--output-tokens", "1", env={**os.environ, "DAYZERO_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 2 and "--output-tokens >= 2" in result.stderr


def test_the_engine_line_times_a_compiled_engines_parts():
    from types import SimpleNamespace

    from dayzero.cli import _load_parts

    engine = SimpleNamespace(load_seconds={"weights": 9.14, "prefill": 0.2, "decode": 0.06})
    assert _load_parts(engine) == " (weights 9.1 s, prefill 0.2 s, decode 0.1 s)"
    assert _load_parts(SimpleNamespace()) == ""
