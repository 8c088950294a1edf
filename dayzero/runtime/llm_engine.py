"""LLMEngine: owns the caches of one loaded engine and runs schedule -> step -> sample -> postprocess."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dayzero.errors import DayzeroError
from dayzero.export.engine import SLOT, StepEngine, allocate_flat_caches
from dayzero.runtime.batch import step_inputs
from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.capacity import memory_budget, plan_capacity
from dayzero.runtime.graphs import decode_runner
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.scheduler import ScheduledStep, Scheduler
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.state_pool import StatePool


@dataclass(frozen=True)
class RuntimeOptions:
    max_batch: int | None = None  # default: the engine's
    token_budget: int = 2048  # prefill tokens per step (chunked prefill)
    gpu_memory_fraction: float = 0.8
    memory_bytes: int | None = None
    cuda_graphs: bool = True

    def __post_init__(self):
        if self.token_budget < 1:
            raise DayzeroError(f"the prefill token budget must be at least 1, got {self.token_budget}")
        if not 0 < self.gpu_memory_fraction <= 1:
            raise DayzeroError(f"--gpu-memory-fraction must be in (0, 1], got {self.gpu_memory_fraction}")


@dataclass
class StepStats:
    prefill_tokens: int = 0
    decode_tokens: int = 0
    steps: int = 0
    preemptions: int = 0
    first_token_at: dict = field(default_factory=dict)


class LLMEngine:
    def __init__(self, engine: StepEngine, options: RuntimeOptions = RuntimeOptions(),
                 detokenize: Callable[[list[int]], str] | None = None, stop_ids: frozenset[int] = frozenset()):
        manifest = engine.manifest
        if manifest.num_draft:
            raise DayzeroError("this engine verifies draft tokens; the runtime has no drafter yet: export with "
                               "--num-draft 0")
        self.engine, self.manifest = engine, manifest
        self.max_batch = min(options.max_batch or manifest.max_batch, manifest.max_batch)
        budget = memory_budget(manifest.device, options.gpu_memory_fraction, options.memory_bytes)
        self.capacity = plan_capacity(manifest, budget, self.max_batch)
        self.caches = allocate_flat_caches(manifest, self.capacity.num_pages, self.capacity.num_slots)
        slot_tensors = [c for c, spec in zip(self.caches, manifest.cache_tensors) if spec.unit == SLOT]
        self.blocks = BlockManager(self.capacity.num_pages, manifest.page_size)
        self.states = StatePool(self.capacity.num_slots, self.capacity.slots_per_seq, slot_tensors)
        self.scheduler = Scheduler(self.blocks, self.states, self.max_batch, options.token_budget, manifest.max_len)
        self.max_pages = math.ceil(manifest.max_len / manifest.page_size)
        self.decode = decode_runner(engine, self.caches, self.max_batch, self.max_pages, options.cuda_graphs)
        self.detokenize, self.stop_ids = detokenize, stop_ids
        self.stats = StepStats()

    def add_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        seq = Sequence(list(prompt_ids), params) if request_id is None else Sequence(list(prompt_ids), params,
                                                                                       request_id)
        self.scheduler.add(seq)
        return seq

    def cancel(self, request_id: str) -> Sequence | None:
        return self.scheduler.cancel(request_id)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> list[Sequence]:
        """One model step; -> the sequences that finished in it."""
        step = self.scheduler.schedule()
        if step is None:
            return []
        logits = self._run(step)
        self.stats.steps += 1
        return self._postprocess(step, logits)

    def _run(self, step: ScheduledStep) -> torch.Tensor:
        input_ids, meta = step_inputs(step, self.manifest.page_size, self.capacity.slots_per_seq, self.max_pages,
                                      self.manifest.device)
        with torch.inference_mode():
            if step.decode:
                self.stats.decode_tokens += len(step.seqs)
                return self.decode(input_ids, meta)[:, -1]
            self.stats.prefill_tokens += sum(step.num_new)
            return self.engine.prefill(input_ids, meta, self.caches)

    def _postprocess(self, step: ScheduledStep, logits: torch.Tensor) -> list[Sequence]:
        finished = []
        for seq, count, row in zip(step.seqs, step.num_new, logits):
            seq.num_cached += count
            if seq.num_uncached:
                continue  # a prefill chunk that did not reach the last token
            seq.output_ids.append(seq.sampler(row))
            self.stats.first_token_at.setdefault(seq.request_id, time.perf_counter())
            reason = self._finish_reason(seq)
            if reason:
                self.scheduler.release(seq, Status.FINISHED, reason)
                finished.append(seq)
        self.stats.preemptions = self.scheduler.num_preemptions
        return finished

    def _finish_reason(self, seq: Sequence) -> str | None:
        token = seq.output_ids[-1]
        if token in seq.params.stop_token_ids or (token in self.stop_ids and not seq.params.ignore_eos):
            return "stop"
        if seq.params.stop and self.detokenize:
            text = self.detokenize(seq.output_ids)
            if any(s in text for s in seq.params.stop):
                return "stop"
        if len(seq.output_ids) >= seq.params.max_tokens:
            return "length"
        return None
