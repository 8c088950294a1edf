"""The prompts a check runs: fixed token ids drawn from the vocabulary (no tokenizer needed), or texts through the
checkpoint's tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from dayzero.errors import DayzeroError
from dayzero.tokenizer import load_tokenizer

# one token; a few; past a 64-token cache page and a 64-token KDA chunk
PROMPT_LENGTHS = (1, 13, 70)
PROMPT_SEED = 0


def token_prompts(vocab_size: int, lengths: tuple[int, ...] = PROMPT_LENGTHS) -> list[list[int]]:
    """The same ids for every run of a checkpoint: uniform over the vocabulary from a fixed seed."""
    generator = torch.Generator().manual_seed(PROMPT_SEED)
    return [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in lengths]


def text_prompts(checkpoint: Path, texts: tuple[str, ...], vocab_size: int) -> list[list[int]]:
    tokenizer = load_tokenizer(checkpoint, vocab_size)
    prompts = [tokenizer.encode(text) for text in texts]
    if not all(prompts):
        raise DayzeroError("a --prompt encodes to no tokens; give a non-empty text")
    return prompts
