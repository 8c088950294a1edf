"""LLMEngine: owns the caches of one loaded engine and runs schedule -> step -> sample -> postprocess."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dayzero.contract import StepEngine, allocate_flat_caches, slot_tensors
from dayzero.errors import DayzeroError
from dayzero.runtime.batch import decode_inputs, prefill_inputs
from dayzero.runtime.batch_sampler import BatchSampler
from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.capacity import memory_budget, plan_capacity
from dayzero.runtime.detokenizer import StopStringWatch
from dayzero.runtime.graphs import decode_runner
from dayzero.runtime.held_drafts import bitmask_along, held_draft
from dayzero.runtime.in_flight import InFlight
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.runtime.prefix_cache import PrefixCache
from dayzero.runtime.prompt_logprobs import prompt_targets, record_prompt_logprobs, wants_prompt_logprobs
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.scheduler import ScheduledStep, Scheduler
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.spec_decode import PROPOSERS, accepted_run
from dayzero.runtime.state_pool import StatePool
from dayzero.structured.held_answer import HeldAnswer
from dayzero.structured.json_answer import json_answer
from dayzero.structured.json_schema import checked_schema_text
from dayzero.structured.tool_call_grammar import tool_call_grammar
from dayzero.structured.vocabulary import Vocabulary

# prefill tokens a step gives each rank by default (context-parallel ranks split a step's tokens)
TOKENS_PER_RANK = 2048


@dataclass(frozen=True)
class RuntimeOptions:
    max_batch: int | None = None  # default: the engine's
    # prefill tokens per step (chunked prefill); default TOKENS_PER_RANK for each context-parallel rank
    token_budget: int | None = None
    gpu_memory_fraction: float = 0.8
    memory_bytes: int | None = None
    cuda_graphs: bool = True
    draft_method: str = "ngram"  # proposer of draft tokens, for engines exported with num_draft > 0
    prefix_caching: bool = False  # reuse the pages and KDA state snapshots of prompts' common prefixes
    # tokens between a prefix's KDA state snapshots (prefix_cache.py); default: the token budget, where a long
    # prompt's prefill chunks end anyway
    snapshot_every: int | None = None
    # slot groups kept for snapshots beyond the running sequences' (default: one a sequence of the batch)
    snapshot_groups: int | None = None
    # launch each decode step before the previous one's tokens reach the host (in_flight.py), where the step allows:
    # no drafts, no answer held to a grammar
    overlap: bool = True

    def __post_init__(self):
        if self.draft_method not in PROPOSERS:
            raise DayzeroError(f"unknown draft method {self.draft_method!r}; choose one of {', '.join(PROPOSERS)}")
        if self.token_budget is not None and self.token_budget < 1:
            raise DayzeroError(f"the prefill token budget must be at least 1, got {self.token_budget}")
        if not 0 < self.gpu_memory_fraction <= 1:
            raise DayzeroError(f"--gpu-memory-fraction must be in (0, 1], got {self.gpu_memory_fraction}")


@dataclass
class StepStats:
    prefill_tokens: int = 0
    decode_tokens: int = 0  # tokens emitted by decode steps
    drafted_tokens: int = 0
    accepted_tokens: int = 0  # drafts the model agreed with
    steps: int = 0
    overlapped: int = 0  # decode steps launched before the host read the previous one's tokens
    preemptions: int = 0
    first_token_at: dict = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0


def _first_bad_token(prompt_ids: list, vocab: int):
    return next((t for t in prompt_ids if not (type(t) is int and 0 <= t < vocab)), None)


class LLMEngine:
    def __init__(self, engine: StepEngine, options: RuntimeOptions = RuntimeOptions(),
                 detokenize: Callable[[list[int]], str] | None = None, stop_ids: frozenset[int] = frozenset(),
                 token_bytes: Callable[[int], bytes | None] | None = None):
        """token_bytes: each token's bytes, for answers held to a grammar (the vocabulary's tables are built on the
        first)."""
        manifest = engine.manifest
        self.step_engine, self.manifest = engine, manifest
        self.max_batch = min(options.max_batch or manifest.max_batch, manifest.max_batch)
        budget = memory_budget(manifest.device, options.gpu_memory_fraction, options.memory_bytes)
        snapshots = 0 if not options.prefix_caching else (
            self.max_batch if options.snapshot_groups is None else options.snapshot_groups)
        self.capacity = plan_capacity(manifest, budget, self.max_batch, snapshots)
        self.caches = allocate_flat_caches(manifest, self.capacity.num_pages, self.capacity.num_slots)
        self.blocks = BlockManager(self.capacity.num_pages, manifest.page_size)
        self.states = StatePool(self.capacity.num_slots, self.capacity.slots_per_seq,
                                slot_tensors(manifest, self.caches), engine.on_slot_op)
        token_budget = options.token_budget or TOKENS_PER_RANK * manifest.extra.get("cp", 1)
        self.prefix_cache = self._prefix_cache(options, token_budget, engine.decodes_alone)
        self.scheduler = Scheduler(self.blocks, self.states, self.max_batch, token_budget, manifest.max_len,
                                   manifest.num_draft, self.prefix_cache)
        self.propose = PROPOSERS[options.draft_method]()
        self.max_pages = math.ceil(manifest.max_len / manifest.page_size)
        self.decode = decode_runner(engine, self.caches, self.max_batch, self.max_pages,
                                    options.cuda_graphs and engine.graph_capturable)
        self.detokenize, self.stop_ids = detokenize, stop_ids
        self.sampler = BatchSampler(manifest.vocab_size, stop_ids, manifest.device)
        self.token_bytes = token_bytes
        self._vocabulary: Vocabulary | None = None
        self.stats = StepStats()
        # decode steps overlap the host where the engine verifies no drafts (drafts come from the host's tokens)
        self.overlap = options.overlap and not manifest.num_draft
        self._in_flight: InFlight | None = None

    def _prefix_cache(self, options: RuntimeOptions, token_budget: int, decodes_alone: bool) -> PrefixCache | None:
        if not options.prefix_caching:
            return None
        return PrefixCache(self.blocks, self.states, options.snapshot_every or token_budget,
                           decode_snapshots=not decodes_alone)

    def add_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        # a bad id would fail inside a model step, which ends every request in the batch
        bad = _first_bad_token(prompt_ids, self.manifest.vocab_size)
        if bad is not None:
            raise DayzeroError(f"prompt token ids must be integers in [0, {self.manifest.vocab_size}); got {bad!r}")
        if any(token >= self.manifest.vocab_size for token, _ in params.logit_bias):
            raise DayzeroError(f"logit_bias names a token outside the vocabulary of {self.manifest.vocab_size}")
        if params.prompt_logprobs is not None and not self.step_engine.scores_prompts:
            raise DayzeroError("the prompt's log probabilities need the eager engine without context parallelism "
                               "(--backend eager, no --cp; --tp works): compiled and context-parallel engines "
                               "return only each prompt's last logits")
        seq = Sequence(list(prompt_ids), params) if request_id is None else Sequence(list(prompt_ids), params,
                                                                                       request_id)
        if params.tool_calls is not None:
            seq.json_answer = self._held_tool_calls(params)
        elif params.response_format is not None:
            schema = None if params.json_schema is None else checked_schema_text(params.json_schema)
            grammar = json_answer(schema, params.reasoning_tokens, params.reasoning_opened)
            seq.json_answer = HeldAnswer(self._grammars().compile(grammar))
        self.scheduler.add(seq)
        return seq

    def _held_tool_calls(self, params: SamplingParams) -> HeldAnswer | None:
        """The answer's tool calls held to the offered functions, where the vocabulary allows masks (a tokenizer
        without token bytes or single-byte JSON tokens: the calls are read as written, unheld)."""
        try:
            vocabulary = self._grammars()
        except DayzeroError:
            return None
        return HeldAnswer(vocabulary.compile(tool_call_grammar(params.tool_calls)), params.tool_calls.section_end)

    def prepare_json_answers(self) -> None:
        """Build the vocabulary's tables for held answers now, where the tokenizer allows them (else on the first)."""
        if self.token_bytes is not None:
            try:
                self._grammars()
            except DayzeroError:
                pass  # a vocabulary that cannot hold JSON: each JSON request is refused with the reason

    def _grammars(self) -> Vocabulary:
        """The vocabulary every held answer's grammar compiles over."""
        if self.token_bytes is None:
            raise DayzeroError("JSON answers need the tokenizer's token bytes, which this engine was not given")
        if self._vocabulary is None:
            self._vocabulary = Vocabulary(self.token_bytes, self.manifest.vocab_size, self.stop_ids)
        return self._vocabulary

    def cancel(self, request_id: str) -> Sequence | None:
        return self.scheduler.cancel(request_id)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or self._in_flight is not None

    def step(self) -> list[Sequence]:
        """One model step; -> the sequences that finished in it. With overlap a decode step is finished by the next
        call, after that call launched the step that follows it (or, where none can follow before the host reads
        its tokens, instead of launching one)."""
        with torch.inference_mode():
            if self._in_flight is not None:
                finished = self._step_ahead()
            else:
                step = self.scheduler.schedule()
                finished = [] if step is None else self._decode(step) if step.decode else self._prefill(step)
        self.stats.preemptions = self.scheduler.num_preemptions
        return finished

    def _step_ahead(self) -> list[Sequence]:
        """Launch the decode step after the one in flight, then finish that one."""
        previous = self._in_flight
        step = self.scheduler.schedule_ahead(self._overlaps)
        self._in_flight = None if step is None else self._launch(step, previous)
        self.stats.overlapped += step is not None
        finished = self._finish(previous)
        if self._in_flight is not None:
            self._name_snapshots(self._in_flight)
        return finished

    def _overlaps(self, seq: Sequence) -> bool:
        """Whether seq's next decode step may be launched before the host reads its last token: not where the host
        needs it first (drafts, an answer's grammar state)."""
        return self.overlap and seq.json_answer is None

    def _prefill(self, step: ScheduledStep) -> list[Sequence]:
        input_ids, meta = prefill_inputs(step, self.manifest.page_size, self.capacity.slots_per_seq,
                                         self.manifest.device)
        if wants_prompt_logprobs(step):
            targets, num_top = prompt_targets(step, self.manifest.device)
            logits, scored = self.step_engine.prefill_scored(input_ids, meta, self.caches, targets, num_top)
            record_prompt_logprobs(step, scored)
        else:
            logits = self.step_engine.prefill(input_ids, meta, self.caches)
        self.stats.steps += 1
        self.stats.prefill_tokens += sum(step.num_new)
        for seq, count in zip(step.seqs, step.num_new):
            seq.num_cached += count
            if self.prefix_cache:
                self.prefix_cache.remember(seq)
        # a chunk that did not reach the prompt's last token samples nothing
        done = [i for i, seq in enumerate(step.seqs) if not seq.num_uncached]
        if not done:
            return []
        seqs = [step.seqs[i] for i in done]
        rows = logits if len(done) == len(step.seqs) else logits[torch.tensor(done, device=logits.device)]
        sampled = self.sampler(rows, seqs, bitmasks=self._bitmasks(seqs, [[] for _ in seqs]))
        return [seq for seq, out in zip(seqs, sampled) if self._emit(seq, out.tokens, out.logprobs)]

    def _bitmasks(self, seqs: list[Sequence], drafts: list[list[int]]) -> list[torch.Tensor | None] | None:
        """Each held answer's masks along its draft, for the sampler (None: no answer in the batch is held)."""
        if all(seq.json_answer is None for seq in seqs):
            return None
        return [None if seq.json_answer is None else bitmask_along(seq.json_answer, draft)
                for seq, draft in zip(seqs, drafts)]

    def _decode(self, step: ScheduledStep) -> list[Sequence]:
        """Launch a decode step; finish it now, unless it overlaps the host (then the next call does)."""
        flight = self._launch(step)
        self._name_snapshots(flight)
        if all(self._overlaps(seq) for seq in step.seqs):
            self._in_flight = flight
            return []
        return self._finish(flight)

    def _launch(self, step: ScheduledStep, previous: InFlight | None = None) -> InFlight:
        """Verify each sequence's drafts (none without speculation), on the device: the step runs, its tokens are
        drawn and start for the host. A sequence whose last token `previous` drew is fed it from there."""
        drafts = [self._draft(seq, count - 1) for seq, count in zip(step.seqs, step.num_new)]
        drawn = None if previous is None else previous.drawn.tokens
        drawn_rows = None if previous is None else previous.drawn_rows(step.seqs)
        input_ids, meta = decode_inputs(step.seqs, drafts, 1 + self.manifest.num_draft, self.manifest.page_size,
                                        self.capacity.slots_per_seq, self.manifest.device, drawn,
                                        drawn_rows)
        logits = self.decode(input_ids, meta)
        sampled = self.sampler.sample(logits, step.seqs, drafts, self._bitmasks(step.seqs, drafts), drawn, drawn_rows)
        flight = InFlight(step.seqs, drafts, [seq.num_cached for seq in step.seqs], sampled, [])
        for seq, draft in zip(step.seqs, drafts):
            # the last token enters the cache whatever is accepted; the drawn token is the host's to read
            seq.num_cached += 1
            seq.num_pending += 1
            held = self.prefix_cache.hold_decoded(seq, seq.num_cached - 1) if self.prefix_cache and not draft else None
            if held is not None:
                flight.held.append(held)
        self.stats.steps += 1
        return flight

    def _name_snapshots(self, flight: InFlight) -> None:
        """Once the host knows the tokens a step was fed, its decode snapshots get their names."""
        for held in flight.held:
            self.prefix_cache.name_decoded(held)
        flight.held.clear()

    def _finish(self, flight: InFlight) -> list[Sequence]:
        """Read a launched step's tokens and keep each sequence's accepted run; a sequence that ended while the step
        was in flight drops its token."""
        finished = []
        for seq, draft, before, out in zip(flight.seqs, flight.drafts, flight.before,
                                           self.sampler.collect(flight.drawn)):
            if seq.status is not Status.RUNNING:
                continue
            seq.num_pending -= 1
            tokens = self._verify(seq, draft, out.tokens)
            if self.prefix_cache and draft:
                self.prefix_cache.remember_decoded(seq, before)
            if self._emit(seq, tokens, out.logprobs):
                finished.append(seq)
        return finished

    def _draft(self, seq: Sequence, num_draft: int) -> list[int]:
        # without speculation skip the proposer: token_ids copies the whole sequence
        if not num_draft:
            return []
        draft = self.propose(seq.token_ids, num_draft)
        return draft if seq.json_answer is None else held_draft(seq.json_answer, draft)

    def _verify(self, seq: Sequence, draft: list[int], samples: list[int]) -> list[int]:
        """The tokens seq's verify rows emit (samples: each row's token); its cache length and entry slot move past the
        run."""
        tokens = accepted_run(samples, draft)
        # the accepted drafts entered the cache after the last token (counted at launch); the model's own next token
        # did not yet
        seq.num_cached += len(tokens) - 1
        seq.num_accepted = len(tokens)
        self.stats.drafted_tokens += len(draft)
        self.stats.accepted_tokens += len(tokens) - 1
        self.stats.decode_tokens += len(tokens)
        return tokens

    def _emit(self, seq: Sequence, tokens: list[int], logprobs: list[TokenLogprob] | None) -> bool:
        """Append tokens (logprobs: theirs, when asked) until one finishes the sequence (the rest are dropped); ->
        whether it finished."""
        for index, token in enumerate(tokens):
            seq.output_ids.append(token)
            if seq.json_answer is not None:
                seq.json_answer.advance(token)
            if seq.logprobs is not None:
                seq.logprobs.append(logprobs[index])
            self.stats.first_token_at.setdefault(seq.request_id, time.perf_counter())
            reason = self._finish_reason(seq)
            if reason:
                self.scheduler.release(seq, Status.FINISHED, reason)
                return True
        return False

    def _finish_reason(self, seq: Sequence) -> str | None:
        token = seq.output_ids[-1]
        if seq.json_answer is not None and seq.json_answer.done:
            return "stop"
        if token in seq.params.stop_token_ids or (token in self.stop_ids and not seq.params.ignore_eos):
            return "stop"
        if seq.params.stop and self.detokenize:
            if seq.stop_watch is None:
                seq.stop_watch = StopStringWatch(self.detokenize, seq.params.stop)
            if seq.stop_watch.add(token):
                return "stop"
        if len(seq.output_ids) >= seq.params.max_tokens:
            return "length"
        return None
