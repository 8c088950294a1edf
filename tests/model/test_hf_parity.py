"""Parity with the ecosystem: a random Kimi-Linear checkpoint written by Hugging Face transformers loads in dayzero
and gives the same fp32 logits as transformers."""

from __future__ import annotations

import pytest
import torch

from dayzero.model import load
from tests.helpers import rel_err
from tests.hf_checkpoints import hf_config, randomize, transformers


@pytest.mark.parametrize("variant", [{}, {"q_lora_rank": 24, "n_group": 4, "topk_group": 2}], ids=["base", "qlora"])
def test_logits_match_transformers(tmp_path, variant):
    torch.manual_seed(0)
    hf = transformers.KimiLinearForCausalLM(hf_config(**variant)).eval()
    randomize(hf)
    hf.save_pretrained(tmp_path)
    ids = torch.randint(0, 300, (2, 70))
    with torch.no_grad():
        expected = hf(ids).logits.float()
    got = load(tmp_path, dtype=torch.float32).logits(ids)
    assert rel_err(got, expected) < 1e-4
