"""One step's token choice for all its rows at once, on the logits' device.

Each row (row_plan.py) gets its request's logit adjustments (logit_adjustments.py: biases, the counting penalties with
the drafts before the row counted, stop ids banned before min_tokens) and its grammar mask (a packed bitmask,
grammar_bitmask.py); greedy rows then take the argmax, random rows a draw (token_draw.py) at a uniform keyed by the
request's seed and the row's output position (seeded_uniform.py), so a request's tokens depend on nothing else in the
batch. The tokens, and the log probabilities asked for, come back to the host in one copy; `sample` starts it and
keeps the tokens on the device (a step that overlaps the host feeds them to the next one), `collect` reads it.

A verify step's rows are sampled like any others, and acceptance (spec_decode.accepted_run) keeps the drafts equal to
the tokens sampled at their positions. For a point-mass draft that is the rejection rule: a draft is kept with its
probability p(x), and a rejected position emits its sample, which is then distributed as p without x. With a seed the
tokens equal those of decoding without drafts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.runtime.logit_adjustments import masked, penalized_rows, with_bans, with_bias
from dayzero.runtime.logprobs import TokenLogprob, entries, row_logprobs
from dayzero.runtime.row_plan import RowPlan
from dayzero.runtime.seeded_uniform import uniform_bits, uniform_of_bits
from dayzero.runtime.sequence import Sequence
from dayzero.runtime.token_counts import TokenCounts
from dayzero.runtime.token_draw import draw_tokens
from dayzero.runtime.transfers import Download, upload


@dataclass(frozen=True)
class SampledRows:
    """A sequence's tokens, one a row (row i: the token after its last token and drafts[:i]), with their log
    probabilities when the request asks for them."""

    tokens: list[int]
    logprobs: list[TokenLogprob] | None


@dataclass(frozen=True)
class DrawnRows:
    """A step's tokens on the device (one a row of its plan) and their copy to the host under way."""

    tokens: torch.Tensor  # int64 [rows]
    plan: RowPlan
    copy: Download


class BatchSampler:
    def __init__(self, vocab_size: int, stop_ids: frozenset[int] = frozenset(), device: torch.device | str = "cpu"):
        """stop_ids: the engine's end-of-sequence ids (banned with a request's own before its min_tokens)."""
        self.vocab_size, self.stop_ids, self.device = vocab_size, stop_ids, torch.device(device)
        self.counts = TokenCounts(vocab_size, self.device)
        self._plan: RowPlan | None = None

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None = None,
                 bitmasks: list[torch.Tensor | None] | None = None) -> list[SampledRows]:
        """logits [B, vocab], or [B, width, vocab] for a verify step (row i of sequence b after its last token and
        drafts[b][:i], rows past 1 + len(drafts[b]) unused); bitmasks: per sequence None or its grammar's int32
        [1 + len(drafts[b]), ceil(vocab / 32)]."""
        return self.collect(self.sample(logits, seqs, drafts, bitmasks))

    def sample(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None = None,
               bitmasks: list[torch.Tensor | None] | None = None, drawn: torch.Tensor | None = None,
               drawn_rows: list[int | None] | None = None) -> DrawnRows:
        """The rows' tokens, left on the device, with their copy to the host (and the log probabilities') started.
        A sequence's rows pick its output tokens len(output_ids) + num_pending onwards; drawn, drawn_rows: where
        sequence b's last output token is still on the device, drawn[drawn_rows[b]] (the penalties count it)."""
        plan, step, rows = self._prepare(logits, seqs, drafts, bitmasks, drawn, drawn_rows)
        tokens = self._tokens(self._adjusted(rows, plan, step, bitmasks), plan, step)
        asked = plan.logprobs
        parts = [tokens, *(row_logprobs(asked.take(rows), asked.take(tokens), max(plan.num_top)) if asked else [])]
        return DrawnRows(tokens, plan, Download(parts))

    def adjusted_logits(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None = None,
                        bitmasks: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """float32 [rows, vocab]: the logits the rows' tokens are chosen from (adjusted and masked), rows in order."""
        plan, step, rows = self._prepare(logits, seqs, drafts, bitmasks)
        return self._adjusted(rows, plan, step, bitmasks)

    def _prepare(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None,
                 bitmasks: list | None, drawn: torch.Tensor | None = None, drawn_rows: list[int | None] | None = None
                 ) -> tuple[RowPlan, dict[str, torch.Tensor], torch.Tensor]:
        drafts = drafts if drafts is not None else [[] for _ in seqs]
        plan = self._plan_for(seqs, drafts)
        step = self._step_inputs(plan, drafts, bitmasks, logits.shape[1] if logits.dim() == 3 else 1, drawn,
                                 drawn_rows or [None] * len(seqs))
        return plan, step, _flat_rows(logits, step)

    def _plan_for(self, seqs: list[Sequence], drafts: list[list[int]]) -> RowPlan:
        if self._plan is None or not self._plan.matches(seqs, drafts):
            self._plan = RowPlan(seqs, drafts, self.vocab_size, self.device)
        return self._plan

    def _step_inputs(self, plan: RowPlan, drafts: list[list[int]], bitmasks: list | None, width: int,
                     drawn: torch.Tensor | None, drawn_rows: list[int | None]) -> dict[str, torch.Tensor]:
        """What changes every step, in one copy: the random rows' positions, the counting rows' count rows and the
        drafts they count, stop-id bans, the masked rows and the real rows of a padded verify step."""
        seqs = plan.seqs
        counting = {b: None for b in (plan.owners[r] for r in plan.counting.rows)}
        counting = dict(zip(counting, self.counts.rows_of([seqs[b] for b in counting], drawn,
                                                          [drawn_rows[b] for b in counting])))
        increments = [(j, token) for j, r in enumerate(plan.counting.rows)
                      for token in drafts[plan.owners[r]][: plan.offsets[r]]]
        bans = [(r, token) for b, seq in enumerate(seqs) for r in plan.rows_of(b)
                for token in self._banned(seq, r, plan)]
        masked_rows = [r for b in range(len(seqs)) if bitmasks and bitmasks[b] is not None for r in plan.rows_of(b)]
        return upload({
            "uniform_bits": [uniform_bits(seqs[plan.owners[r]].seed, _emitted(seqs[plan.owners[r]]) + plan.offsets[r])
                             for r in plan.random.rows],
            "count_rows": [counting[plan.owners[r]] for r in plan.counting.rows],
            "increment_rows": [j for j, _ in increments], "increment_tokens": [t for _, t in increments],
            "ban_rows": [r for r, _ in bans], "ban_tokens": [t for _, t in bans], "masked": masked_rows,
            "flat": [] if all(size == width for size in plan.sizes) else [
                b * width + i for b, i in zip(plan.owners, plan.offsets)]}, torch.int64, self.device)

    def _banned(self, seq: Sequence, row: int, plan: RowPlan) -> list[int]:
        """Before min_tokens no stop id may be the row's token."""
        if _emitted(seq) + plan.offsets[row] >= seq.params.min_tokens:
            return []
        return sorted(set(seq.params.stop_token_ids) | (set() if seq.params.ignore_eos else set(self.stop_ids)))

    def _adjusted(self, rows: torch.Tensor, plan: RowPlan, step: dict[str, torch.Tensor],
                  bitmasks: list | None) -> torch.Tensor:
        """The rows' logits in float32 with their adjustments and masks (the rows themselves where none)."""
        if not plan.adjusts and not len(step["masked"]):
            return rows.float()
        work = rows.to(torch.float32, copy=True)
        if plan.bias is not None:
            with_bias(work, *plan.bias)
        if plan.counting:
            generated = self.counts.generated[step["count_rows"]]
            if len(step["increment_rows"]):
                generated.index_put_((step["increment_rows"], step["increment_tokens"]),
                                     torch.ones((), device=work.device), accumulate=True)
            in_prompt = self.counts.in_prompt[step["count_rows"]]
            work = plan.counting.put(work, penalized_rows(plan.counting.take(work), generated, in_prompt,
                                                          plan.counting_rows))
        if len(step["ban_rows"]):
            with_bans(work, step["ban_rows"], step["ban_tokens"])
        if len(step["masked"]):
            bitmask = torch.cat([m for m in bitmasks if m is not None]).to(work.device, non_blocking=True)
            work[step["masked"]] = masked(work[step["masked"]], bitmask)
        return work

    def _tokens(self, work: torch.Tensor, plan: RowPlan, step: dict[str, torch.Tensor]) -> torch.Tensor:
        if not plan.random:
            return work.argmax(-1)
        uniform = uniform_of_bits(step["uniform_bits"].double())
        drawn = draw_tokens(plan.random.take(work), plan.random_rows, uniform)
        if not plan.greedy:
            return drawn
        tokens = torch.empty(plan.num_rows, dtype=torch.long, device=work.device)
        tokens.index_copy_(0, plan.greedy.index, plan.greedy.take(work).argmax(-1))
        return tokens.index_copy_(0, plan.random.index, drawn)

    @staticmethod
    def collect(drawn: DrawnRows) -> list[SampledRows]:
        """The drawn tokens and log probabilities on the host (waits for their copy), split by sequence."""
        plan, asked = drawn.plan, drawn.plan.logprobs
        host = [part.tolist() for part in drawn.copy.wait()]
        logprobs = dict(zip(asked.rows, entries([host[0][r] for r in asked.rows], *host[1:], plan.num_top))) \
            if asked else {}
        return [SampledRows([host[0][r] for r in plan.rows_of(b)],
                            [logprobs[r] for r in plan.rows_of(b)] if seq.params.logprobs is not None else None)
                for b, seq in enumerate(plan.seqs)]


def _emitted(seq: Sequence) -> int:
    """Output tokens drawn before this step's: those on the host and those still on the device."""
    return len(seq.output_ids) + seq.num_pending


def _flat_rows(logits: torch.Tensor, step: dict[str, torch.Tensor]) -> torch.Tensor:
    """[R, vocab]: the step's rows in order (a verify step's padding rows left out)."""
    if logits.dim() == 2:
        return logits
    flat = logits.reshape(-1, logits.shape[-1])
    return flat[step["flat"]] if len(step["flat"]) else flat


