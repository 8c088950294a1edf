"""Random checkpoints of the DeepSeek-V3.2 family (`deepseek_v32`, `glm_moe_dsa`) written by transformers at small
odd shapes: every layer DSA sparse MLA with q LoRA and RoPE, a dense first layer, MoE with grouped routing and a
correction bias, YaRN for DeepSeek, a layer sharing an earlier layer's Top-K for GLM. The indexer keeps 23 keys,
fewer than the tests' prompts hold, so it really selects; 16 index heads keep its ranking free of ties (relu zeroes
whole scores when few heads see a key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.17")

VOCAB, TOPK = 301, 23
SHAPES = dict(
    vocab_size=VOCAB, hidden_size=72, intermediate_size=104, moe_intermediate_size=40, num_hidden_layers=3,
    num_attention_heads=3, num_key_value_heads=3, q_lora_rank=28, kv_lora_rank=36, qk_nope_head_dim=18,
    qk_rope_head_dim=12, v_head_dim=20, n_routed_experts=12, num_experts_per_tok=3, n_group=4, topk_group=2,
    n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.446, index_n_heads=16, index_head_dim=24,
    index_topk=TOPK, rms_norm_eps=1e-6, max_position_embeddings=1280, bos_token_id=0, eos_token_id=1,
)
# long-context RoPE as DeepSeek releases it, over a short original context so that the test's positions pass it;
# unequal mscales scale both cos / sin and the softmax
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 32,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}
ARCHITECTURES = {
    "deepseek_v32": (transformers.DeepseekV32Config, transformers.DeepseekV32ForCausalLM, {"rope_parameters": YARN}),
    # IndexShare: layer 1 attends over layer 0's Top-K
    "glm_moe_dsa": (transformers.GlmMoeDsaConfig, transformers.GlmMoeDsaForCausalLM,
                    {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "index_topk_freq": 2,
                     "index_skip_topk_offset": 1}),
}


def randomize(model) -> None:
    """Move the parameters transformers initializes to constants (norms, router bias) off their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))


def write_checkpoint(model_type: str, directory: Path, **overrides):
    """(directory, transformers model) of a random checkpoint of `model_type` that transformers writes there."""
    config_class, model_class, fields = ARCHITECTURES[model_type]
    torch.manual_seed(0)
    hf = model_class(config_class(**{**SHAPES, **fields, **overrides})).eval()
    randomize(hf)
    hf.save_pretrained(directory)
    return directory, hf

