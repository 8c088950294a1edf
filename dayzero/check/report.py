"""The comparisons of a check, the rule that passes or fails them, and their printout."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def rel_err(got: torch.Tensor, expected: torch.Tensor) -> float:
    """||got - expected|| / ||expected|| over all elements, accumulated in fp64."""
    diff = torch.linalg.vector_norm(got - expected, dtype=torch.float64)
    return (diff / torch.linalg.vector_norm(expected, dtype=torch.float64).clamp_min(1e-30)).item()


def top1_agreement(got: torch.Tensor, expected: torch.Tensor) -> tuple[int, int]:
    """Positions (rows of [T, vocab] logits) whose most likely token is the same, of all."""
    return int((got.argmax(-1) == expected.argmax(-1)).sum()), got.shape[0]


@dataclass(frozen=True)
class Comparison:
    """One quantity of dayzero's against transformers': a layer's hidden states or a set of logits."""

    name: str
    error: float  # relative error against transformers in the same dtype
    allowed: float
    noise: float | None = None  # transformers in the dtype against transformers in fp32 (reduced precision only)
    agree: tuple[int, int] | None = None  # logits: positions whose top-1 token agrees, of all

    @property
    def ok(self) -> bool:
        return self.error <= self.allowed


@dataclass(frozen=True)
class Generation:
    """Greedy tokens after one prompt: transformers' `generate` and dayzero's runtime."""

    prompt_tokens: int
    expected: list[int]
    got: list[int]

    @property
    def first_difference(self) -> int | None:
        return next((i for i, (a, b) in enumerate(zip(self.expected, self.got)) if a != b), None)


@dataclass(frozen=True)
class CheckReport:
    header: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    generations: tuple[Generation, ...]

    @property
    def failure(self) -> Comparison | None:
        """The first comparison beyond its tolerance (layers first, in order), or None."""
        return next((c for c in self.comparisons if not c.ok), None)

    def lines(self) -> list[str]:
        return [*self.header, "", *_table(self.comparisons), "", *_generation_lines(self.generations)]


def _table(comparisons: tuple[Comparison, ...]) -> list[str]:
    noise = any(c.noise is not None for c in comparisons)
    width = max(len(c.name) for c in comparisons)
    head = f"{'':{width}}  {'rel err':>9}  {'allowed':>9}" + ("  transformers vs fp32" if noise else "") + "  top-1"
    rows = [head]
    for c in comparisons:
        row = f"{c.name:{width}}  {c.error:9.2e}  {c.allowed:9.2e}"
        if noise:
            row += f"  {c.noise:21.2e}"
        row += f"  {c.agree[0]}/{c.agree[1]}" if c.agree else ""
        rows.append(row.rstrip() + ("" if c.ok else "  <- beyond"))
    return rows


def _generation_lines(generations: tuple[Generation, ...]) -> list[str]:
    count = len(generations[0].expected) if generations else 0
    differ = [g for g in generations if g.first_difference is not None]
    lines = [f"greedy, {count} tokens: same as transformers' generate after {len(generations) - len(differ)} of "
             f"{len(generations)} prompts"]
    for g in differ:
        i = g.first_difference
        lines.append(f"  after the {g.prompt_tokens}-token prompt, token {i} differs: transformers {g.expected[i]}, "
                     f"dayzero {g.got[i]}")
    return lines
