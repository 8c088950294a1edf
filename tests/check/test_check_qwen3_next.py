"""`dayzero check` on a random Qwen3-Next checkpoint written by transformers (qwen3_next_checkpoints.py): every layer
kind (gated DeltaNet, gated attention; MoE, dense) within tolerance, greedy tokens equal to transformers'."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from dayzero.cli import cli
from tests.model.qwen3_next_checkpoints import write_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("qwen3_next"))[0]


def test_check_passes_on_a_qwen3_next_checkpoint(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYZERO_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["check", str(checkpoint)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "qwen3_next, 4 layers, vocab 301" in result.output
    rows = re.findall(r"^(layer \d .*?|logits, .*?)\s+(\S+)\s+1\.00e-04", result.output, re.M)
    assert [name for name, _ in rows] == ["layer 0 (gdn, moe)", "layer 1 (gdn, dense)", "layer 2 (gqa, moe)",
                                          "layer 3 (gdn, moe) + norm", "logits, reference model",
                                          "logits, eager engine"]
    assert all(float(error) < 1e-5 for _, error in rows)
    assert "greedy, 16 tokens: same as transformers' generate after 3 of 3 prompts" in result.output
    assert result.output.rstrip().endswith("ok: every error within tolerance")
