"""Shared test helpers: tiny config variants, random models, error metrics."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import torch

from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import with_mxfp4_experts
from dayzero.model.random_init import init_random_
from dayzero.model.weights import build_empty

ROOT = Path(__file__).resolve().parent.parent
TINY_CONFIG = ROOT / "dayzero" / "configs" / "tiny-hybrid" / "config.json"


def tiny_config_dict(**text_overrides) -> dict:
    """The embedded tiny-hybrid config with fields of its text_config replaced (None deletes a field)."""
    data = copy.deepcopy(json.loads(TINY_CONFIG.read_text()))
    text = data["text_config"]
    for key, value in text_overrides.items():
        if value is None:
            text.pop(key, None)
        else:
            text[key] = value
    return data


# GLM-5.3-Flash (glm5_next) at small odd shapes (tests/model/glm5_checkpoints.py): KDA, a full indexer layer and a
# layer sharing its picks, pooled index keys (pools of 3, 4 of them kept), dense and MoE layers, 3 hyper-connection
# streams
GLM5_VOCAB, GLM5_TOPK, GLM5_KPOOL = 301, 12, 3
GLM5_TEXT = dict(
    vocab_size=GLM5_VOCAB, hidden_size=72, intermediate_size=104, moe_intermediate_size=40, num_hidden_layers=5,
    num_attention_heads=3, num_key_value_heads=3, q_lora_rank=28, kv_lora_rank=36, qk_nope_head_dim=18,
    qk_rope_head_dim=0, v_head_dim=20, n_routed_experts=12, num_experts_per_tok=3, n_group=4, topk_group=2,
    n_shared_experts=1, routed_scaling_factor=2.446, index_n_heads=16, index_head_dim=24, index_topk=GLM5_TOPK,
    index_kpool=GLM5_KPOOL, linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=3, hc_mult=3,
    hc_sinkhorn_iters=5, hc_eps=1e-5, swiglu_limit=0.3, rms_norm_eps=1e-6, max_position_embeddings=1280,
    bos_token_id=0, eos_token_id=1, pad_token_id=2,
    layer_types=["linear_attention", "indexed_attention", "indexed_attention", "linear_attention",
                 "indexed_attention"],
    indexer_types=["full", "full", "shared", "full", "full"],
    mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse"],
)


def glm5_config_dict(**text_overrides) -> dict:
    """A glm5_next config.json (no vision tower) of GLM5_TEXT with fields replaced."""
    return {"model_type": "glm5_next", "text_config": {**GLM5_TEXT, **text_overrides}}


def layer_pattern(kinds: str) -> dict:
    """linear_attn_config for a pattern such as "kkm": k = KDA, m = MLA."""
    base = json.loads(TINY_CONFIG.read_text())["text_config"]["linear_attn_config"]
    return {**base, "kda_layers": [i + 1 for i, c in enumerate(kinds) if c == "k"],
            "full_attn_layers": [i + 1 for i, c in enumerate(kinds) if c == "m"]}


def random_model(data: dict, dtype=torch.float32, seed: int = 0, mxfp4_experts: bool = False):
    model = build_empty(with_mxfp4_experts(ModelConfig.from_dict(data), mxfp4_experts), dtype, "cpu")
    init_random_(model, seed)
    return model


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run_steps(engine, caches, prompts: list[list[int]], steps: list[list[list[int]]]) -> list[torch.Tensor]:
    """Varlen prefill of the prompts, then decode steps of 2 tokens each (num_accepted all 2) through an engine."""
    from dayzero.model.step import contiguous_meta

    width, pages = 2, 2
    lengths = [len(p) for p in prompts]
    meta = contiguous_meta([0] * len(prompts), lengths, pages, slots_per_seq=width)
    out = [engine.prefill(torch.tensor(sum(prompts, [])), meta, caches)]
    done = lengths
    for tokens in steps:
        meta = contiguous_meta(done, [width] * len(prompts), pages, slots_per_seq=width, decode=True)
        out.append(engine.decode(torch.tensor(tokens), meta, caches))
        done = [d + width for d in done]
    return out


# a Kimi-style tiktoken tokenizer: a BPE over bytes with a few merges ("he" + "ll" -> "hell", the four digits "1234"
# as one token), then 256 + 2 special ids, four of them named
MERGES = [b"he", b"ll", b"hell", b"12", b"34", b"1234"]
NUM_BASE = 256 + len(MERGES)
EOS, IM_END, IM_USER = NUM_BASE + 1, NUM_BASE + 2, NUM_BASE + 3
KIMI_VOCAB = NUM_BASE + 258


def write_kimi_tokenizer(directory: Path, eos_token="[EOS]", more_special: tuple[str, ...] = ()) -> Path:
    """tiktoken.model + tokenizer_config.json in `directory`; more_special: names of the special ids after IM_USER."""
    ranks = [bytes([b]) for b in range(256)] + MERGES
    (directory / "tiktoken.model").write_text(
        "".join(f"{base64.b64encode(token).decode()} {rank}\n" for rank, token in enumerate(ranks)))
    names = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", *more_special]
    config = {"added_tokens_decoder": {str(NUM_BASE + i): {"content": name, "special": True}
                                       for i, name in enumerate(names)},
              "eos_token": eos_token}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory / "tiktoken.model"
