"""Parity with transformers for Qwen3-Next through the plugin ops: every op dispatched on the CPU to its Triton body
(interpreter) gives transformers' fp32 logits, from a prefill and the verify steps after it (the checkpoint:
qwen3_next_checkpoints.py)."""

from __future__ import annotations

import pytest
import torch

from dayzero.model import load
from tests.helpers import rel_err
from tests.hf_checkpoints import expected_logits
from tests.model.qwen3_next_checkpoints import VOCAB, write_checkpoint
from tests.model.test_hf_parity_qwen3_next import verified_logits
from tests.plugins.triton_env import ON_GPU, needs_triton

pytestmark = [needs_triton, pytest.mark.skipif(ON_GPU, reason="the interpreter run is the CPU check")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # a gated DeltaNet layer with MoE, then the gated-attention layer with a dense MLP: the interpreter runs each
    # launch slowly
    return write_checkpoint(tmp_path_factory.mktemp("qwen3_next"), num_hidden_layers=2, mlp_only_layers=[1],
                            layer_types=["linear_attention", "full_attention"])


def test_plugin_ops_logits_match_transformers(checkpoint, triton_bodies_on_cpu):
    directory, hf = checkpoint
    # a prefill past one chunk of the chunked recurrence, then two verify steps of 2 tokens
    ids = torch.randint(0, VOCAB, (1, 70))
    got = verified_logits(load(directory, dtype=torch.float32), ids, prefix=66)
    assert rel_err(got, expected_logits(hf, ids)[:, 65:]) < 1e-4
