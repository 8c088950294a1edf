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
