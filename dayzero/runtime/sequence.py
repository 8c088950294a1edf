"""A request's life in the runtime: its tokens, how many are in the cache, its pages and state slots."""

from __future__ import annotations

import enum
import itertools
import secrets
from dataclasses import dataclass, field

from dayzero.runtime.detokenizer import StopStringWatch
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.runtime.sampling import SamplingParams

_ids = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    REFUSED = "refused"


@dataclass
class Sequence:
    prompt_ids: list[int]
    params: SamplingParams
    request_id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_cached: int = 0  # tokens whose KV / state is in the caches (or being written by a step in flight)
    # output tokens a step in flight has drawn on the device that the host has not read yet (llm_engine.py, overlap):
    # the last of them is the sequence's next input
    num_pending: int = 0
    pages: list[int] = field(default_factory=list)
    slot: int | None = None
    # inputs of the last verify step that entered the cache: the next step starts from state slot num_accepted - 1
    num_accepted: int = 1
    finish_reason: str | None = None
    num_preemptions: int = 0
    # one per output token when params.logprobs is set
    logprobs: list[TokenLogprob] | None = None
    # one per prompt token when params.prompt_logprobs is set (the first None: nothing comes before it)
    prompt_logprobs: list[TokenLogprob | None] | None = None
    # the engine's incremental stop-string check, made at the first output token when params.stop is set
    stop_watch: StopStringWatch | None = None
    # an answer held to its response_format or its tool calls: its place in the grammar (structured.held_answer)
    json_answer: object | None = None
    # the prefix cache's hashes of the sequence's leading pages, computed once (prefix_cache.page_keys)
    page_keys: list[bytes] = field(default_factory=list)
    # the key of the request's random draws (seeded_uniform.py): params.seed, or one drawn at admission
    seed: int | None = None

    def __post_init__(self):
        if self.seed is None:
            self.seed = self.params.seed if self.params.seed is not None else secrets.randbits(64)
        if self.params.logprobs is not None and self.logprobs is None:
            self.logprobs = []
        if self.params.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = [None] * len(self.prompt_ids)

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def last_token(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncached(self) -> int:
        return self.num_tokens - self.num_cached

    @property
    def is_done(self) -> bool:
        return self.status in (Status.FINISHED, Status.CANCELLED, Status.REFUSED)
