"""Random Qwen3-Next checkpoints (`qwen3_next`) written by transformers at small odd shapes: gated DeltaNet layers
with 2 key heads shared by 6 value heads (K 16, V 32), a gated-attention layer of 40-dim heads (4 query, 2 key-value)
with RoPE on half of each, a dense layer among MoE ones (5 experts, top 2, a gated shared expert of its own width)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.hf_checkpoints import transformers

VOCAB = 301
SHAPES = dict(
    vocab_size=VOCAB, hidden_size=72, intermediate_size=104, moe_intermediate_size=40,
    shared_expert_intermediate_size=56, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=40, partial_rotary_factor=0.5, linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16,
    linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=5, num_experts_per_tok=2, mlp_only_layers=[1],
    layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"], rms_norm_eps=1e-6,
    max_position_embeddings=1280, bos_token_id=0, eos_token_id=1,
)


def randomize(model) -> None:
    """Move the parameters transformers initializes to constants (zero-centered norms at 0, the gated norm at 1, the
    decay bias at 1) off their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("dt_bias"):
                p.add_(0.1 * torch.randn_like(p))


def write_checkpoint(directory: Path, **overrides):
    """(directory, transformers model) of a random checkpoint that transformers writes there."""
    torch.manual_seed(0)
    hf = transformers.Qwen3NextForCausalLM(transformers.Qwen3NextConfig(**{**SHAPES, **overrides})).eval()
    randomize(hf)
    hf.save_pretrained(directory)
    return directory, hf

