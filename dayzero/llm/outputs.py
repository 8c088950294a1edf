"""What `LLM.generate` and `LLM.chat` return, shaped as vLLM's: one RequestOutput a prompt, its answers (SamplingParams
n) in `outputs`, so vLLM code reads `outputs[0].outputs[0].text`.

Log probabilities are vLLM's too: one {token id: Logprob} a position, holding the chosen token and the most likely
ones asked for. They are the model's own distribution (before temperature, top-k, top-p; runtime/logprobs.py). A
chosen token outside the most likely ones has rank None (dayzero does not rank the whole vocabulary).

An answer's text ends before the stop string that ended it (vLLM's default); its token_ids keep every token.
Times (metrics) are time.perf_counter() readings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dayzero.runtime.logprobs import TokenLogprob
from dayzero.runtime.sequence import Sequence


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None  # 1: the most likely token; None: the chosen token, below the most likely ones asked for
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None  # None: SamplingParams.logprobs not asked for
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None  # "stop", "length"
    stop_reason: int | str | None = None  # the stop string or stop token id that ended it (None: end of sequence)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float  # when generate() / chat() was called
    first_token_time: float | None  # the first token of any of its answers
    finished_time: float | None  # when generate() / chat() collected it


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None  # None: given as token ids
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, Logprob] | None] | None  # one a prompt token, the first None
    outputs: list[CompletionOutput]
    finished: bool = True
    metrics: RequestMetrics | None = None

    # dayzero's earlier shape, the first answer's fields on the request: `dayzero run` and older callers read them
    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def logprobs(self) -> list[dict[int, Logprob]] | None:
        return self.outputs[0].logprobs

    @property
    def time_to_first_token_s(self) -> float | None:
        metrics = self.metrics
        if metrics is None or metrics.first_token_time is None:
            return None
        return metrics.first_token_time - metrics.arrival_time


def position_logprobs(entry: TokenLogprob, decode: Callable[[list[int]], str]) -> dict[int, Logprob]:
    """One position's TokenLogprob -> {token id: Logprob}: the most likely tokens (ranked), and the chosen one."""
    ranked = {token: Logprob(logprob, rank, decode([token])) for rank, (token, logprob) in
              enumerate(entry.top or (), start=1)}
    if entry.token not in ranked:
        ranked = {entry.token: Logprob(entry.logprob, None, decode([entry.token])), **ranked}
    return ranked


def _answer_text(seq: Sequence, decode: Callable[[list[int]], str]) -> tuple[str, int | str | None]:
    """-> (the answer's text, cut before the stop string that ended it; that stop string or stop token id)."""
    text = decode(seq.output_ids)
    if seq.finish_reason != "stop":
        return text, None
    hits = [(text.find(stop), stop) for stop in seq.params.stop if stop and stop in text]
    if hits:
        cut, stop = min(hits)
        return text[:cut], stop
    last = seq.output_ids[-1] if seq.output_ids else None
    return text, last if last in seq.params.stop_token_ids else None


def completion_output(index: int, seq: Sequence, decode: Callable[[list[int]], str]) -> CompletionOutput:
    text, stop_reason = _answer_text(seq, decode)
    if seq.logprobs is None:
        return CompletionOutput(index, text, list(seq.output_ids), None, None, seq.finish_reason, stop_reason)
    logprobs = [position_logprobs(entry, decode) for entry in seq.logprobs]
    return CompletionOutput(index, text, list(seq.output_ids), sum(e.logprob for e in seq.logprobs), logprobs,
                            seq.finish_reason, stop_reason)


def request_output(prompt: str | None, seqs: list[Sequence], decode: Callable[[list[int]], str], arrival: float,
                   first_token_times: list[float | None]) -> RequestOutput:
    """The answers (seqs, one a choice) to one prompt."""
    first = min((t for t in first_token_times if t is not None), default=None)
    scored = seqs[0].prompt_logprobs
    prompt_logprobs = None if scored is None else [None if e is None else position_logprobs(e, decode) for e in scored]
    return RequestOutput(seqs[0].request_id, prompt, list(seqs[0].prompt_ids), prompt_logprobs,
                         [completion_output(i, seq, decode) for i, seq in enumerate(seqs)], True,
                         RequestMetrics(arrival, first, time.perf_counter()))
