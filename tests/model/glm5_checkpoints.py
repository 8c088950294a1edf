"""A random GLM-5.3-Flash (`glm5_next`) checkpoint written by transformers at small odd shapes: KDA layers with the
lower-bounded gate, NoPE MLA layers with q LoRA behind an indexer of pooled keys (pools of 3, keeping 4 pools) and
a layer sharing the picks of the full layer before it, dense and MoE layers (grouped routing, correction bias) with
a clamped SwiGLU whose limit the activations reach, 3 hyper-connection streams with 5 Sinkhorn steps, and a tiny
vision tower that dayzero leaves alone. 16 index heads keep the pool ranking free of ties (relu zeroes whole scores
when few heads see a key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import GLM5_KPOOL, GLM5_TEXT, GLM5_TOPK, GLM5_VOCAB

transformers = pytest.importorskip("transformers", minversion="5.17")

VOCAB, TOPK, KPOOL, TEXT = GLM5_VOCAB, GLM5_TOPK, GLM5_KPOOL, GLM5_TEXT
VISION = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=24, out_hidden_size=72,
              projection_intermediate_size=32, patch_size=2, image_size=8)


def randomize(model) -> None:
    """Move what transformers initializes to constants (norms, router bias, the pool gate and position embedding,
    the hyper-connections' biases and scales) off their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith(("index_kpool_compress_ape", "index_kpool_compress_gate")):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("_hc.base"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("_hc.scale"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))


def write_checkpoint(directory: Path, **overrides):
    """(directory, transformers model) of a random GLM-5.3-Flash checkpoint that transformers writes there."""
    torch.manual_seed(0)
    config = transformers.Glm5NextConfig(text_config={**TEXT, **overrides}, vision_config=VISION)
    hf = transformers.Glm5NextForConditionalGeneration(config).eval()
    randomize(hf)
    hf.save_pretrained(directory)
    return directory, hf

