"""Greedy generation on the eager reference path: one sequence, explicit caches (the pre-engine `dayzero run`)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from dayzero.errors import DayzeroError
from dayzero.model.hybrid import HybridModel
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE


def _check_lengths(model: HybridModel, num_prompt: int, max_new_tokens: int) -> None:
    if num_prompt == 0:
        raise DayzeroError("the prompt is empty; give at least one token")
    if max_new_tokens < 1:
        raise DayzeroError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = model.config.max_position_embeddings
    if num_prompt + max_new_tokens > limit:
        raise DayzeroError(f"prompt ({num_prompt} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                           f"context of {limit} tokens; shorten the prompt or ask for fewer tokens")


def greedy_generate(
    model: HybridModel, prompt_ids: list[int], max_new_tokens: int, stop_ids: frozenset[int] = frozenset(),
) -> Iterator[int]:
    """Greedy tokens one by one (a stop token is yielded, then generation ends); bad lengths raise at once."""
    _check_lengths(model, len(prompt_ids), max_new_tokens)
    return _greedy_tokens(model, prompt_ids, max_new_tokens, stop_ids)


@torch.inference_mode()
def _greedy_tokens(model: HybridModel, prompt_ids: list[int], max_new_tokens: int, stop_ids) -> Iterator[int]:
    pages = math.ceil((len(prompt_ids) + max_new_tokens) / PAGE_SIZE)
    caches = model.allocate_caches(pages, 1)
    device = model.device
    meta = contiguous_meta([0], [len(prompt_ids)], pages, device=device)
    logits = model.prefill(torch.tensor(prompt_ids, device=device), meta, caches)
    for step in range(max_new_tokens):
        token = int(logits[-1].argmax())
        yield token
        if token in stop_ids or step == max_new_tokens - 1:
            return
        meta = contiguous_meta([len(prompt_ids) + step], [1], pages, decode=True, device=device)
        logits = model.decode(torch.tensor([[token]], device=device), meta, caches)[0]
