"""Continuous batching: FCFS admission by cache capacity, chunked prefill under a token budget, decode batches,
preemption by recompute when pages run out, cancellation. Plain Python over the block manager and state pool.

Each step is one kind: a prefill step (chunks of several waiting/prefilling sequences, at most `token_budget`
tokens) when any sequence still has uncached prompt tokens, else a decode step over every running sequence (rows in
state-slot order). With speculative decoding a decode step verifies up to `num_draft` drafts per sequence: pages
are reserved for them too (never past the sequence's max_tokens, so never past the engine's max length).

While a decode step is in flight (llm_engine.py, overlap) `schedule_ahead` plans the next one before its tokens reach
the host: every decoding sequence goes on, one position further, except those the step in flight surely ends (their
max_tokens reached). It plans nothing where the synchronous path would decide otherwise: a prefill to run, a
sequence that needs its tokens on the host, or pages that run short (a preemption).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from dayzero.errors import DayzeroError
from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.prefix_cache import PrefixCache
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.state_pool import StatePool


@dataclass
class ScheduledStep:
    decode: bool
    seqs: list[Sequence]
    # tokens each sequence adds to the cache in this step; decode: 1 + the most drafts it may verify (pages reserved)
    num_new: list[int]


class Scheduler:
    def __init__(self, blocks: BlockManager, states: StatePool, max_batch: int, token_budget: int, max_len: int,
                 num_draft: int = 0, prefix_cache: PrefixCache | None = None):
        self.blocks, self.states = blocks, states
        self.prefix_cache = prefix_cache
        self.max_batch, self.token_budget, self.max_len = max_batch, token_budget, max_len
        self.num_draft = num_draft
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue a request, or refuse it now (with the reason in seq.finish_reason) when it can never run."""
        problem = self._never_fits(seq)
        if problem:
            seq.status, seq.finish_reason = Status.REFUSED, problem
            raise DayzeroError(f"{seq.request_id}: {problem}")
        self.waiting.append(seq)

    def _never_fits(self, seq: Sequence) -> str | None:
        if not seq.prompt_ids:
            return "the prompt is empty; give at least one token"
        longest = len(seq.prompt_ids) + seq.params.max_tokens
        if longest > self.max_len:
            return (f"prompt ({len(seq.prompt_ids)} tokens) + max_tokens ({seq.params.max_tokens}) exceeds the "
                    f"engine's max length {self.max_len}; shorten the prompt, lower max_tokens or export with a "
                    "larger --max-len")
        if self.blocks.pages_for(longest) > self.blocks.num_pages - 1:
            return (f"the sequence needs {self.blocks.pages_for(longest)} cache pages, the cache has "
                    f"{self.blocks.num_pages - 1}; give the runtime more memory or ask for fewer tokens")
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def cancel(self, request_id: str) -> Sequence | None:
        for seq in [*self.waiting, *self.running]:
            if seq.request_id == request_id:
                self.release(seq, Status.CANCELLED, "cancelled")
                return seq
        return None

    def release(self, seq: Sequence, status: Status, reason: str) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        self.states.free(seq)
        if self.prefix_cache:
            self.prefix_cache.forget_decoding(seq)
        seq.status, seq.finish_reason = status, reason

    def schedule(self) -> ScheduledStep | None:
        self._admit()
        prefilling = [s for s in self.running if self._is_prefilling(s)]
        step = self._prefill_step(prefilling) if prefilling else None
        if step is not None:
            return step
        if any(not self._is_prefilling(s) for s in self.running):
            # prefills are stuck on pages: decoding sequences run (and finish, freeing pages) meanwhile
            return self._decode_step()
        if self.running:
            self._preempt_newest()
        return None

    def schedule_ahead(self, overlaps: Callable[[Sequence], bool]) -> ScheduledStep | None:
        """The decode step that follows the one in flight, planned before its tokens reach the host; None where it
        must wait for them (overlaps: whether a sequence's next step may be planned so)."""
        self._admit()
        if any(self._is_prefilling(s) for s in self.running):
            return None
        seqs = sorted(self._decoding(), key=lambda s: s.slot)
        if not seqs or not all(overlaps(s) for s in seqs):
            return None
        if sum(self.blocks.missing_pages(s, self._reach(s)) for s in seqs) > self.blocks.num_available:
            return None
        for seq in seqs:
            self.blocks.grow(seq, self._reach(seq))
        return ScheduledStep(True, seqs, [1] * len(seqs))

    @staticmethod
    def _is_prefilling(seq: Sequence) -> bool:
        return seq.num_uncached > 1 or (seq.num_cached == 0 and seq.num_uncached > 0)

    def _admit(self) -> None:
        """FCFS: the head of the queue enters when a slot and the pages for its first chunk are free (after the
        cached prefix it starts from, if any)."""
        while self.waiting and len(self.running) < self.max_batch and self.states.num_available:
            seq = self.waiting[0]
            # a prompt whose tokens are scored runs through the model whole: no cached prefix stands in for it
            reuses = self.prefix_cache is not None and seq.prompt_logprobs is None
            hit = self.prefix_cache.lookup(seq) if reuses else None
            reused = hit.length if hit else 0
            if reuses and self.prefix_cache.shares_pending_prefix(seq, reused, self.running):
                return
            if hit:
                # held by seq before anything is evicted, so that no eviction frees them
                self.blocks.share(seq, hit.pages)
            if not self.blocks.can_grow(seq, reused + min(seq.num_tokens - reused, self.token_budget)):
                self.blocks.free(seq)
                return
            self.waiting.popleft()
            seq.num_cached = reused
            if self.prefix_cache:
                self.prefix_cache.hit_tokens += reused
            self.states.allocate(seq, hit.group if hit else None)
            seq.status = Status.RUNNING
            self.running.append(seq)

    def _prefill_step(self, prefilling: list[Sequence]) -> ScheduledStep | None:
        budget, seqs, counts = self.token_budget, [], []
        for seq in prefilling:
            # a prefill covers every uncached token; the last one's logits give the next token
            n = min(seq.num_uncached, budget)
            stop = self.prefix_cache.next_stop(seq) if self.prefix_cache else None
            if stop is not None:
                n = min(n, stop - seq.num_cached)
            while n and not self.blocks.can_grow(seq, seq.num_cached + n):
                n -= 1
            if n == 0:
                continue
            self.blocks.grow(seq, seq.num_cached + n)
            seqs.append(seq)
            counts.append(n)
            budget -= n
            if budget == 0:
                break
        return ScheduledStep(False, seqs, counts) if seqs else None

    def num_lookahead(self, seq: Sequence) -> int:
        """Drafts worth verifying for seq: tokens past its max_tokens would be cut off anyway."""
        return max(0, min(self.num_draft, seq.params.max_tokens - len(seq.output_ids) - 1))

    def _decoding(self) -> list[Sequence]:
        """The running sequences a decode step takes: those past their prefill, less those whose max_tokens a step in
        flight reaches."""
        return [s for s in self.running if not self._is_prefilling(s)
                and len(s.output_ids) + s.num_pending < s.params.max_tokens]

    def _reach(self, seq: Sequence) -> int:
        """Tokens seq's next decode step needs pages for: those known, those in flight and its drafts."""
        return seq.num_tokens + seq.num_pending + self.num_lookahead(seq)

    def _decode_step(self) -> ScheduledStep | None:
        while sum(self.blocks.missing_pages(s, self._reach(s)) for s in self._decoding()) > self.blocks.num_available:
            self._preempt_newest()
        # rows in state-slot order: the KDA layers' decode kernels then read the pool front to back
        seqs = sorted(self._decoding(), key=lambda s: s.slot)
        for seq in seqs:
            self.blocks.grow(seq, self._reach(seq))
        return ScheduledStep(True, seqs, [1 + self.num_lookahead(s) for s in seqs]) if seqs else None

    def _preempt_newest(self) -> None:
        """Recompute preemption: the newest running sequence gives back its pages and slot and waits at the front;
        when readmitted it prefills prompt + generated tokens again."""
        if not self.running:
            raise DayzeroError("the cache cannot hold even one sequence's next step; give the runtime more memory")
        victim = self.running[-1]
        self.release(victim, Status.WAITING, None)
        victim.num_cached = 0
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
