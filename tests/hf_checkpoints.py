"""Random checkpoints written by Hugging Face transformers itself (its own implementation and save_pretrained), for
the parity tests and `dayzero check`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# transformers prefers flash-linear-attention / causal-conv1d kernels when importable; block them so it runs
# its pure-PyTorch path (the decision is made when its Kimi-Linear module is imported)
for _optional in ("fla", "causal_conv1d"):
    sys.modules.setdefault(_optional, None)
transformers = pytest.importorskip("transformers", minversion="5.17")


def hf_config(**overrides):
    fields = dict(
        vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=5,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
        v_head_dim=16, qk_nope_head_dim=16, num_local_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        routed_scaling_factor=2.446, first_k_dense_replace=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        linear_attn_config={"head_dim": 16, "num_heads": 4, "short_conv_kernel_size": 4, "kda_layers": [1, 2, 3, 5],
                            "full_attn_layers": [4]},
    )
    fields.update(overrides)
    return transformers.KimiLinearConfig(**fields)


def randomize(model):
    """Move the parameters transformers initializes to constants (norms, router bias) off their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("e_score_correction_bias"):
                p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))


def write_kimi_linear(path: Path, seed: int = 0, **overrides) -> Path:
    """A random Kimi-Linear checkpoint (fp32) saved by transformers: config.json + model.safetensors."""
    torch.manual_seed(seed)
    model = transformers.KimiLinearForCausalLM(hf_config(**overrides)).eval()
    randomize(model)
    model.save_pretrained(path)
    return path


def expected_logits(hf, ids: torch.Tensor) -> torch.Tensor:
    """A transformers model's fp32 logits of ids [B, T]."""
    with torch.no_grad():
        return hf(ids).logits.float()
