"""What the architecture parity tests share: transformers' greedy continuation, a proposer that drafts it right for a
varying number of tokens, the Top-K gaps of the reference indexer, and plugin ops dispatched to their Triton bodies on
the CPU (fixtures: import them into a test module)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins import registry
from dayzero.plugins.indexer import reference as indexer_reference

NEW_TOKENS = 16


def transformers_tokens(hf, prompt: list[int], new_tokens: int = NEW_TOKENS) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        # an explicit mask: without one, generate masks every prompt token equal to the pad id
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


class HalfRightProposer:
    """Drafts transformers' continuation, right for a varying number of tokens and then wrong, so that every
    acceptance depth happens."""

    def __init__(self, expected: dict[tuple[int, ...], list[int]], vocab: int):
        self.expected, self.vocab = expected, vocab

    def __call__(self, token_ids: list[int], num_draft: int) -> list[int]:
        start = next(p for p in self.expected if tuple(token_ids[: len(p)]) == p)
        future = self.expected[start][len(token_ids) - len(start) :][:num_draft]
        right = len(token_ids) % (num_draft + 1)
        return future[:right] + [(t + 1) % self.vocab for t in future[right:]]


@pytest.fixture
def untied(monkeypatch):
    """Records, at every Top-K the reference indexer takes over more candidates (keys or pools) than it keeps, the gap
    between the last kept and the first dropped score relative to the row's largest; the caller asserts they are far
    from 0."""
    gaps = []
    causal_topk = indexer_reference.causal_topk

    def recording(scores, positions, topk):
        visible = torch.arange(scores.shape[1])[None, :] <= positions[:, None]
        ranked = scores.masked_fill(~visible, float("-inf")).sort(dim=-1, descending=True).values
        rows = positions + 1 > topk
        scale = ranked[rows, :1].abs()
        gaps.extend(((ranked[rows, topk - 1 : topk] - ranked[rows, topk : topk + 1]) / scale).flatten().tolist())
        return causal_topk(scores, positions, topk)

    monkeypatch.setattr(indexer_reference, "causal_topk", recording)
    return gaps


@pytest.fixture
def triton_bodies_on_cpu():
    """Dispatch every plugin op on CPU to its Triton body (interpreter)."""
    for op in registry.PLUGIN_OPS.values():
        op.register_kernel("cpu", op.dayzero_impls["cuda"])
    yield
    for op in registry.PLUGIN_OPS.values():
        op.register_kernel("cpu", op.dayzero_impls["cpu"])
