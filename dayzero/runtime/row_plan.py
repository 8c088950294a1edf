"""What a step's sampling rows ask for, as index and parameter tensors on the device.

Sequence b owns rows starts[b] .. starts[b] + sizes[b]: a verify step's last token and drafts (one row without
drafts), its row i picking output token number len(output_ids) + i. A plan depends only on the sequences and their row
counts, so the sampler builds it once (two host-to-device copies) and keeps it while those stay the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate

import torch

from dayzero.runtime.penalties import adjusts_logits
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence
from dayzero.runtime.transfers import upload


def counts_tokens(params: SamplingParams) -> bool:
    """The penalties that need each token's count in the answer (and the prompt's tokens)."""
    return bool(params.presence_penalty or params.frequency_penalty or params.repetition_penalty != 1)


def asks_logprobs(params: SamplingParams) -> bool:
    return params.logprobs is not None


def is_greedy(params: SamplingParams) -> bool:
    return params.method == "greedy"


def is_random(params: SamplingParams) -> bool:
    return params.method == "random"


@dataclass(frozen=True)
class RowSet:
    """Some of a step's rows, on the host and on the device."""

    rows: list[int]
    index: torch.Tensor | None  # None: every row, in order (taking them copies nothing)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def take(self, t: torch.Tensor) -> torch.Tensor:
        # indexing, not index_select: the CPU's index_select of [64, 163840] rows is ~6x slower
        return t if self.index is None else t[self.index]

    def put(self, t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """t with these rows replaced by values (in place, unless the set is every row)."""
        return values if self.index is None else t.index_copy_(0, self.index, values)


@dataclass(frozen=True)
class RandomRows:
    """The random rows' parameters: temperature and the support's bounds."""

    temperature: torch.Tensor  # float32 [n]
    top_k: torch.Tensor  # int64 [n], at most the vocabulary; 0: no bound
    top_p: torch.Tensor  # float32 [n]
    log_min_p: torch.Tensor  # float32 [n]: log(min_p), -inf for 0
    max_top_k: int
    any_top_p: bool
    any_min_p: bool


@dataclass(frozen=True)
class CountingRows:
    frequency: torch.Tensor  # float32 [n]
    presence: torch.Tensor
    repetition: torch.Tensor
    any_frequency: bool
    any_presence: bool
    any_repetition: bool


class RowPlan:
    def __init__(self, seqs: list[Sequence], drafts: list[list[int]], vocab_size: int, device: torch.device):
        self.seqs = seqs
        self.sizes = [1 + len(draft) for draft in drafts]
        self.starts = [0, *accumulate(self.sizes)][:-1]
        self.num_rows = sum(self.sizes)
        self.owners = [b for b, size in enumerate(self.sizes) for _ in range(size)]
        self.offsets = [i for size in self.sizes for i in range(size)]
        params = [seqs[b].params for b in self.owners]
        sets = {name: [r for r, p in enumerate(params) if keep(p)] for name, keep in (
            ("greedy", is_greedy), ("random", is_random), ("counting", counts_tokens), ("logprobs", asks_logprobs))}
        random = [params[r] for r in sets["random"]]
        counting = [params[r] for r in sets["counting"]]
        bias = [(r, token, value) for r, p in enumerate(params) for token, value in p.logit_bias]
        ints = upload({**sets, "top_k": [min(p.top_k, vocab_size) for p in random],
                       "bias_rows": [r for r, _, _ in bias], "bias_tokens": [t for _, t, _ in bias]},
                      torch.int64, device)
        floats = upload({"temperature": [p.temperature for p in random], "top_p": [p.top_p for p in random],
                         "log_min_p": [math.log(p.min_p) if p.min_p else -math.inf for p in random],
                         "frequency": [p.frequency_penalty for p in counting],
                         "presence": [p.presence_penalty for p in counting],
                         "repetition": [p.repetition_penalty for p in counting],
                         "bias_values": [v for _, _, v in bias]}, torch.float32, device)
        self.greedy, self.random, self.counting, self.logprobs = (
            self._row_set(sets[name], ints[name]) for name in ("greedy", "random", "counting", "logprobs"))
        self.adjusts = any(adjusts_logits(p) for p in params)
        self.bias = (ints["bias_rows"], ints["bias_tokens"], floats["bias_values"]) if bias else None
        self.num_top = [params[r].logprobs for r in sets["logprobs"]]
        self.random_rows = RandomRows(
            floats["temperature"], ints["top_k"], floats["top_p"], floats["log_min_p"],
            max((min(p.top_k, vocab_size) for p in random), default=0), any(p.top_p < 1 for p in random),
            any(p.min_p > 0 for p in random))
        self.counting_rows = CountingRows(
            floats["frequency"], floats["presence"], floats["repetition"], any(p.frequency_penalty for p in counting),
            any(p.presence_penalty for p in counting), any(p.repetition_penalty != 1 for p in counting))

    def _row_set(self, rows: list[int], index: torch.Tensor) -> RowSet:
        return RowSet(rows, None if rows == list(range(self.num_rows)) else index)

    def matches(self, seqs: list[Sequence], drafts: list[list[int]]) -> bool:
        return (len(seqs) == len(self.seqs) and all(a is b for a, b in zip(seqs, self.seqs))
                and [1 + len(draft) for draft in drafts] == self.sizes)

    def rows_of(self, b: int) -> range:
        return range(self.starts[b], self.starts[b] + self.sizes[b])
