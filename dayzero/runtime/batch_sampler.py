"""One step's token choice for all its rows at once, on the logits' device.

Each row (row_plan.py) gets its request's logit adjustments (logit_adjustments.py: biases, the counting penalties with
the drafts before the row counted, stop ids banned before min_tokens) and its grammar mask (a packed bitmask,
grammar_bitmask.py); greedy rows then take the argmax, random rows a draw (token_draw.py) at a uniform keyed by the
request's seed and the row's output position (seeded_uniform.py), so a request's tokens depend on nothing else in the
batch. The tokens, and the log probabilities asked for, come back to the host in one copy.

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
from dayzero.runtime.seeded_uniform import seeded_uniform
from dayzero.runtime.sequence import Sequence
from dayzero.runtime.token_counts import TokenCounts
from dayzero.runtime.token_draw import draw_tokens
from dayzero.runtime.transfers import download, upload


@dataclass(frozen=True)
class SampledRows:
    """A sequence's tokens, one a row (row i: the token after its last token and drafts[:i]), with their log
    probabilities when the request asks for them."""

    tokens: list[int]
    logprobs: list[TokenLogprob] | None


# sequences a pass takes on the CPU: 8 rows of 163,840 logits stay in its caches from one op to the next (2.7x faster
# than 64 at once); a GPU takes the whole batch in one pass
SEQUENCES_PER_PASS = {"cpu": 8}


class BatchSampler:
    def __init__(self, vocab_size: int, stop_ids: frozenset[int] = frozenset(), device: torch.device | str = "cpu"):
        """stop_ids: the engine's end-of-sequence ids (banned with a request's own before its min_tokens)."""
        self.vocab_size, self.stop_ids, self.device = vocab_size, stop_ids, torch.device(device)
        self.counts = TokenCounts(vocab_size, self.device)
        self._plans: dict[int, RowPlan] = {}  # by pass

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None = None,
                 bitmasks: list[torch.Tensor | None] | None = None) -> list[SampledRows]:
        """logits [B, vocab], or [B, width, vocab] for a verify step (row i of sequence b after its last token and
        drafts[b][:i], rows past 1 + len(drafts[b]) unused); bitmasks: per sequence None or its grammar's int32
        [1 + len(drafts[b]), ceil(vocab / 32)]."""
        sampled = []
        for plan, step, rows, masks in self._passes(logits, seqs, drafts, bitmasks):
            work = self._adjusted(rows, plan, step, masks)
            sampled += self._results(rows, self._tokens(work, plan, step), plan)
        return sampled

    def adjusted_logits(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None = None,
                        bitmasks: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """float32 [rows, vocab]: the logits the rows' tokens are chosen from (adjusted and masked), rows in order."""
        return torch.cat([self._adjusted(rows, plan, step, masks)
                          for plan, step, rows, masks in self._passes(logits, seqs, drafts, bitmasks)])

    def _passes(self, logits: torch.Tensor, seqs: list[Sequence], drafts: list[list[int]] | None,
                bitmasks: list | None):
        """(plan, step inputs, rows [R, vocab], bitmasks) of each pass over the batch's sequences."""
        drafts = drafts if drafts is not None else [[] for _ in seqs]
        bitmasks = bitmasks if bitmasks is not None else [None] * len(seqs)
        size = SEQUENCES_PER_PASS.get(self.device.type) or len(seqs) or 1
        for index, start in enumerate(range(0, len(seqs), size)):
            part = slice(start, start + size)
            plan = self._plan_for(index, seqs[part], drafts[part])
            step = self._step_inputs(plan, drafts[part], bitmasks[part], logits.shape[1] if logits.dim() == 3 else 1)
            yield plan, step, _flat_rows(logits[part], step), bitmasks[part]

    def _plan_for(self, index: int, seqs: list[Sequence], drafts: list[list[int]]) -> RowPlan:
        plan = self._plans.get(index)
        if plan is None or not plan.matches(seqs, drafts):
            plan = self._plans[index] = RowPlan(seqs, drafts, self.vocab_size, self.device)
        return plan

    def _step_inputs(self, plan: RowPlan, drafts: list[list[int]], bitmasks: list,
                     width: int) -> dict[str, torch.Tensor]:
        """What changes every step, in one copy: the random rows' positions, the counting rows' count rows and the
        drafts they count, stop-id bans, the masked rows and the real rows of a padded verify step."""
        seqs = plan.seqs
        counting = {b: None for b in (plan.owners[r] for r in plan.counting.rows)}
        counting = dict(zip(counting, self.counts.rows_of([seqs[b] for b in counting])))
        increments = [(j, token) for j, r in enumerate(plan.counting.rows)
                      for token in drafts[plan.owners[r]][: plan.offsets[r]]]
        bans = [(r, token) for b, seq in enumerate(seqs) for r in plan.rows_of(b)
                for token in self._banned(seq, r, plan)]
        masked_rows = [r for b in range(len(seqs)) if bitmasks[b] is not None for r in plan.rows_of(b)]
        return upload({
            "positions": [len(seqs[plan.owners[r]].output_ids) + plan.offsets[r] for r in plan.random.rows],
            "count_rows": [counting[plan.owners[r]] for r in plan.counting.rows],
            "increment_rows": [j for j, _ in increments], "increment_tokens": [t for _, t in increments],
            "ban_rows": [r for r, _ in bans], "ban_tokens": [t for _, t in bans], "masked": masked_rows,
            "flat": [] if all(size == width for size in plan.sizes) else [
                b * width + i for b, i in zip(plan.owners, plan.offsets)]}, torch.int64, self.device)

    def _banned(self, seq: Sequence, row: int, plan: RowPlan) -> list[int]:
        """Before min_tokens no stop id may be the row's token."""
        if len(seq.output_ids) + plan.offsets[row] >= seq.params.min_tokens:
            return []
        return sorted(set(seq.params.stop_token_ids) | (set() if seq.params.ignore_eos else set(self.stop_ids)))

    def _adjusted(self, rows: torch.Tensor, plan: RowPlan, step: dict[str, torch.Tensor],
                  bitmasks: list) -> torch.Tensor:
        """The rows' logits in float32 with their adjustments and masks (the rows themselves where none)."""
        if not plan.adjusts and not len(step["masked"]):
            return rows.float()
        work = rows.to(torch.float32, copy=True)
        if plan.bias is not None:
            with_bias(work, *plan.bias)
        if plan.counting:
            work = plan.counting.put(work, self._penalized(plan.counting.take(work), plan, step))
        if len(step["ban_rows"]):
            with_bans(work, step["ban_rows"], step["ban_tokens"])
        if len(step["masked"]):
            bitmask = torch.cat([m for m in bitmasks if m is not None]).to(work.device, non_blocking=True)
            work[step["masked"]] = masked(work[step["masked"]], bitmask)
        return work

    def _penalized(self, x: torch.Tensor, plan: RowPlan, step: dict[str, torch.Tensor]) -> torch.Tensor:
        """The counting rows' logits with their penalties, each row counting the drafts before it."""
        generated = self.counts.generated[step["count_rows"]]
        if len(step["increment_rows"]):
            generated.index_put_((step["increment_rows"], step["increment_tokens"]), x.new_ones(()), accumulate=True)
        return penalized_rows(x, generated, self.counts.in_prompt[step["count_rows"]], plan.counting_rows)

    def _tokens(self, work: torch.Tensor, plan: RowPlan, step: dict[str, torch.Tensor]) -> torch.Tensor:
        if not plan.random:
            return work.argmax(-1)
        uniform = seeded_uniform(plan.random_rows.seed_keys, step["positions"])
        drawn = draw_tokens(plan.random.take(work), plan.random_rows, uniform)
        if not plan.greedy:
            return drawn
        tokens = torch.empty(plan.num_rows, dtype=torch.long, device=work.device)
        tokens.index_copy_(0, plan.greedy.index, plan.greedy.take(work).argmax(-1))
        return tokens.index_copy_(0, plan.random.index, drawn)

    def _results(self, rows: torch.Tensor, tokens: torch.Tensor, plan: RowPlan) -> list[SampledRows]:
        """Tokens and log probabilities to the host in one copy, split by sequence."""
        asked = plan.logprobs
        parts = [tokens, *(row_logprobs(asked.take(rows), asked.take(tokens), max(plan.num_top)) if asked else [])]
        host = [part.tolist() for part in download(parts)]
        asked_tokens = [host[0][r] for r in asked.rows]
        logprobs = dict(zip(asked.rows, entries(asked_tokens, *host[1:], plan.num_top) if asked else []))
        return [SampledRows([host[0][r] for r in plan.rows_of(b)],
                            [logprobs[r] for r in plan.rows_of(b)] if seq.params.logprobs is not None else None)
                for b, seq in enumerate(plan.seqs)]


def _flat_rows(logits: torch.Tensor, step: dict[str, torch.Tensor]) -> torch.Tensor:
    """[R, vocab]: the step's rows in order (a verify step's padding rows left out)."""
    if logits.dim() == 2:
        return logits
    flat = logits.reshape(-1, logits.shape[-1])
    return flat[step["flat"]] if len(step["flat"]) else flat


