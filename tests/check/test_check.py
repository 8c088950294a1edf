"""`dayzero check` on random Kimi-Linear checkpoints written by transformers: it passes on a faithful load, fails
naming the layer when dayzero reads one weight wrong, and says so when transformers cannot run the checkpoint."""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch
from click.testing import CliRunner

from dayzero.check.tolerance import FP32_TOLERANCE, NOISE_MULTIPLE, allowed
from dayzero.cli import cli, main
from dayzero.model.checkpoint import CheckpointReader
from tests.hf_checkpoints import transformers, write_kimi_linear

# small and odd: 263 tokens (the byte tokenizer's 259 and a few), 3 heads, MLA in the fourth of five layers
ODD_SHAPES = dict(
    vocab_size=263, hidden_size=40, intermediate_size=56, moe_intermediate_size=24, num_attention_heads=3,
    num_key_value_heads=3, kv_lora_rank=24, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
    linear_attn_config={"head_dim": 16, "num_heads": 3, "short_conv_kernel_size": 4, "kda_layers": [1, 2, 3, 5],
                        "full_attn_layers": [4]},
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_kimi_linear(tmp_path_factory.mktemp("kimi-linear"), **ODD_SHAPES)


def check(checkpoint, *args):
    return CliRunner().invoke(cli, ["check", str(checkpoint), *args], catch_exceptions=False)


def test_check_passes_on_a_checkpoint_transformers_wrote(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = check(checkpoint)
    assert result.exit_code == 0, result.output
    assert "kimi_linear, 5 layers, vocab 263" in result.output
    assert "3 prompts (1, 13, 70 tokens)" in result.output
    rows = re.findall(r"^(layer \d .*?|logits, .*?)\s+(\S+)\s+1\.00e-04", result.output, re.M)
    assert [name for name, _ in rows] == ["layer 0 (kda, dense)", "layer 1 (kda, moe)", "layer 2 (kda, moe)",
                                          "layer 3 (mla, moe)", "layer 4 (kda, moe) + norm",
                                          "logits, reference model", "logits, eager engine"]
    assert all(float(error) < 1e-5 for _, error in rows)
    assert "129/129" in result.output and "48/48" in result.output
    assert "greedy, 16 tokens: same as transformers' generate after 3 of 3 prompts" in result.output
    assert result.output.rstrip().endswith("ok: every error within tolerance")


def test_a_weight_dayzero_reads_wrong_fails_naming_its_layer(checkpoint, tmp_path, monkeypatch):
    """Layer 1's output projection 1% too large on dayzero's side only (transformers reads the file as it is)."""
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    get = CheckpointReader.get

    def perturbed(self, name, index=()):
        tensor = get(self, name, index)
        return tensor * 1.01 if name == "model.layers.1.self_attn.o_proj.weight" else tensor

    monkeypatch.setattr(CheckpointReader, "get", perturbed)
    result = check(checkpoint, "--max-tokens", "4")
    assert result.exit_code == 1, result.output
    assert "error: layer 1 (kda, moe) is the first beyond tolerance" in result.output
    first = re.search(r"^layer 0 \(kda, dense\)\s+(\S+)", result.output, re.M)
    assert float(first[1]) < 1e-5
    assert re.search(r"^layer 1 \(kda, moe\) .*<- beyond$", result.output, re.M)


def test_reduced_precision_is_held_to_transformers_own_rounding_noise(checkpoint, tmp_path, monkeypatch):
    """bfloat16 on both sides, text prompts through the checkpoint's tokenizer (bytes, for this vocabulary)."""
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = check(checkpoint, "--dtype", "bfloat16", "--prompt", "hello world", "--max-tokens", "4")
    assert result.exit_code == 0, result.output
    assert "1 prompt (12 tokens)" in result.output and "transformers vs fp32" in result.output
    for error, limit, noise in re.findall(r"^layer \d .*?\s+(\S+)\s+(\S+)\s+(\S+)$", result.output, re.M):
        assert float(limit) == pytest.approx(max(NOISE_MULTIPLE * float(noise), torch.finfo(torch.bfloat16).eps),
                                             rel=0.01)
        assert float(error) < float(limit)


def test_tolerance_rule():
    assert allowed(torch.float32, None, None) == FP32_TOLERANCE
    assert allowed(torch.bfloat16, 0.01, None) == NOISE_MULTIPLE * 0.01
    assert allowed(torch.bfloat16, 0.0, None) == torch.finfo(torch.bfloat16).eps
    assert allowed(torch.float16, 0.01, 3e-3) == 3e-3


def run_main(monkeypatch, capsys, *args) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["dayzero", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr().err


def test_a_model_type_transformers_lacks_gets_one_clear_line(tmp_path, monkeypatch, capsys):
    """Kimi K3 (kimi_k3) has no implementation in transformers: nothing to compare against."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    assert "kimi_k3" not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k3", "text_config": {}}))
    code, err = run_main(monkeypatch, capsys, "check", str(tmp_path))
    assert code == 2
    assert err == (f"error: transformers {transformers.__version__} has no causal-LM implementation of model_type "
                   "'kimi_k3', so there is nothing to check against (a newer transformers may have it)\n")


def test_without_transformers_the_message_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    code, err = run_main(monkeypatch, capsys, "check", str(tmp_path))
    assert code == 2 and err.startswith("error: dayzero check compares against transformers, which is not installed")
    assert err.count("\n") == 1


@pytest.fixture(scope="module")
def glm5_checkpoint(tmp_path_factory):
    """GLM-5.3-Flash at the odd shapes of tests/model/glm5_checkpoints.py: a multimodal checkpoint that transformers
    runs as AutoModelForImageTextToText, hyper-connection streams as its layer outputs, pooled index keys."""
    from tests.model.glm5_checkpoints import write_checkpoint

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield write_checkpoint(tmp_path_factory.mktemp("glm5_next"))[0]
    torch.set_num_threads(threads)


def test_check_passes_on_a_glm5_next_checkpoint(glm5_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = check(glm5_checkpoint, "--max-tokens", "6")
    assert result.exit_code == 0, result.output
    assert "glm5_next, 5 layers, vocab 301" in result.output and "Glm5NextForConditionalGeneration" in result.output
    rows = re.findall(r"^(layer \d .*?|logits, .*?)\s+(\S+)\s+1\.00e-04", result.output, re.M)
    assert [name for name, _ in rows] == ["layer 0 (kda, dense)", "layer 1 (mla, moe)", "layer 2 (mla, dense)",
                                          "layer 3 (kda, moe)", "layer 4 (mla, moe) + norm",
                                          "logits, reference model", "logits, eager engine"]
    assert all(float(error) < 1e-5 for _, error in rows)
    assert "greedy, 6 tokens: same as transformers' generate after 3 of 3 prompts" in result.output
    assert "ok: every error within tolerance" in result.output and "vision tower" in result.output
