"""A held answer's masks reach the logits right: xgrammar's packed bitmask unpacked on the host and on the device
equals a bit-by-bit reading of it (random words, vocabularies that end inside a word), and a batch's masks filled at
once equal each answer's own."""

from __future__ import annotations

import pytest
import torch

from dayzero.structured.held_answer import HeldAnswer, fill_rows, refused_on_host, refused_tokens, refused_unpacked
from dayzero.structured.json_answer import json_answer
from dayzero.structured.vocabulary import Vocabulary
from dayzero.tokenizer import ByteTokenizer


def refused_reference(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    words = bitmask.tolist()
    return torch.tensor([[not (row[t // 32] >> (t % 32)) & 1 for t in range(vocab_size)] for row in words])


@pytest.mark.parametrize("rows, vocab_size", [(1, 32), (3, 37), (2, 100), (5, 1000)])
def test_a_bitmask_unpacks_on_host_and_device_to_its_bits(rows, vocab_size):
    bitmask = torch.randint(-2**31, 2**31 - 1, (rows, (vocab_size + 31) // 32), dtype=torch.int32,
                            generator=torch.Generator().manual_seed(vocab_size))
    expected = refused_reference(bitmask, vocab_size)
    assert torch.equal(refused_on_host(bitmask, vocab_size), expected)
    assert torch.equal(refused_unpacked(bitmask, vocab_size), expected)
    assert torch.equal(refused_tokens(bitmask, vocab_size, torch.device("cpu")), expected)


@pytest.mark.gpu
def test_a_bitmask_unpacks_on_the_gpu_as_on_the_host():
    bitmask = torch.randint(-2**31, 2**31 - 1, (4, 5121), dtype=torch.int32)
    on_gpu = refused_tokens(bitmask, 163_870, torch.device("cuda"))
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), refused_on_host(bitmask, 163_870))


def test_a_batch_filled_at_once_equals_each_answer_filled_alone():
    vocabulary = Vocabulary(ByteTokenizer().token_bytes, 259, {257})
    answers = [HeldAnswer(vocabulary.compile(json_answer(None))) for _ in range(3)]
    for answer, text in zip(answers, [b"", b'{"a": ', b'{"a": "x']):
        for byte in text:
            answer.advance(byte)
    together = torch.full((3, 9), 7, dtype=torch.int32)
    fill_rows(answers, together)
    alone = torch.full((3, 9), 7, dtype=torch.int32)
    for index, answer in enumerate(answers):
        answer.fill(alone, index)
    assert torch.equal(together, alone) and len({tuple(row) for row in together.tolist()}) == 3
