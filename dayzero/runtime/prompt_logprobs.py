"""Log probabilities of a prompt's own tokens (OpenAI's `echo` with `logprobs`, which evaluation harnesses use to
score text): each prefill row of a sequence that asks is scored against the prompt token after it, and the results
land in the sequence by position, so a prompt prefilled in chunks (or again after a preemption) fills its list
once. The first prompt token has nothing before it: its entry stays None, as in OpenAI's answer."""

from __future__ import annotations

import torch

from dayzero.contract import ScoredRows
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.runtime.scheduler import ScheduledStep


def wants_prompt_logprobs(step: ScheduledStep) -> bool:
    return any(seq.prompt_logprobs is not None for seq in step.seqs)


def prompt_targets(step: ScheduledStep, device: torch.device | str) -> tuple[torch.Tensor, int]:
    """A prefill step -> (targets [T]: the prompt token after each row's, -1 where none or not asked; the most
    alternatives a row asks for). Call before the step moves num_cached on."""
    targets, num_top = [], 0
    for seq, count in zip(step.seqs, step.num_new):
        positions = range(seq.num_cached, seq.num_cached + count)
        if seq.prompt_logprobs is None:
            targets += [-1] * count
            continue
        num_top = max(num_top, seq.params.prompt_logprobs)
        targets += [seq.prompt_ids[p + 1] if p + 1 < len(seq.prompt_ids) else -1 for p in positions]
    return torch.tensor(targets, dtype=torch.long, device=device), num_top


def record_prompt_logprobs(step: ScheduledStep, scored: ScoredRows) -> None:
    """The scored rows -> each asking sequence's prompt_logprobs[p + 1] (call before num_cached moves on)."""
    starts, offset = [], 0
    for count in step.num_new:
        starts.append(offset)
        offset += count
    owners = torch.bucketize(scored.rows.cpu(), torch.tensor(starts[1:], dtype=torch.long), right=True).tolist()
    rows, logprobs = scored.rows.tolist(), scored.logprobs.tolist()
    top_ids, top_logprobs = scored.top_ids.tolist(), scored.top_logprobs.tolist()
    for row, owner, logprob, ids, values in zip(rows, owners, logprobs, top_ids, top_logprobs):
        seq = step.seqs[owner]
        position = seq.num_cached + row - starts[owner] + 1
        top = tuple(zip(ids, values))[: seq.params.prompt_logprobs]
        seq.prompt_logprobs[position] = TokenLogprob(seq.prompt_ids[position], logprob, top)
