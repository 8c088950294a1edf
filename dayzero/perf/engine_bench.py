"""Throughput of a loaded engine through the runtime, as `dayzero bench` reports it: B requests of random prompt
tokens arrive together, prefill (chunked under the token budget), then decode greedily to a fixed length (EOS
ignored). Prefill is timed to the last request's first token; decode over the steps after it, against the decode
traffic floor (decode_traffic.py) at the device's measured copy bandwidth.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import torch

from dayzero.perf.decode_profile import WARM_STEPS, traced_steps
from dayzero.perf.step_trace import KindTimes
from dayzero.runtime.llm_engine import LLMEngine
from dayzero.runtime.sampling import SamplingParams


@dataclass(frozen=True)
class EngineRun:
    batch: int
    prompt_tokens: int
    output_tokens: int
    prefill_s: float  # until every request has its first token
    ttft_p50_s: float
    decode_s: float
    decode_steps: int
    decode_tokens: int
    profile: KindTimes | None = None  # profiled decode steps of the untimed run (run_engine's profile_steps)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.batch * self.prompt_tokens / self.prefill_s

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / max(self.decode_s, 1e-9)

    @property
    def step_ms(self) -> float:
        return 1e3 * self.decode_s / self.decode_steps


def copy_bandwidth(device: str, nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes moved per second (read + write) by the fastest of `repeats` tensor copies on `device`."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        _synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * nbytes / min(times[1:])


def matmul_rate(device: str, dtype: torch.dtype) -> float:
    """Floating-point operations per second of the fastest of a few square matmuls in `dtype` on `device` (8192 on a
    GPU, 1024 on a CPU)."""
    n = 8192 if torch.device(device).type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    times = []
    for _ in range(4):
        _synchronize(device)
        start = time.perf_counter()
        a @ b
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times[1:])


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def random_prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, min(vocab, 256), (length,), generator=gen).tolist() for _ in range(batch)]


def run_engine(engine: LLMEngine, batch: int, prompt_tokens: int, output_tokens: int, seed: int = 0,
               profile_steps: int = 0) -> EngineRun:
    """One timed run, after an untimed one of the same batch and prompt length (first-call allocations, compiles,
    graphs). With `profile_steps`, the untimed run also decodes WARM_STEPS + profile_steps steps, the last ones
    under the profiler (decode_profile.py), at the timed run's context; the result carries their KindTimes."""
    vocab = engine.manifest.vocab_size
    warm = random_prompts(batch, prompt_tokens, vocab, seed + 1)
    profile = _profiled(engine, warm, profile_steps) if profile_steps else None
    if not profile_steps:
        _generate(engine, warm, 2)
    run = _generate(engine, random_prompts(batch, prompt_tokens, vocab, seed), output_tokens)
    return dataclasses.replace(run, profile=profile)


def _profiled(engine: LLMEngine, prompts: list[list[int]], steps: int) -> KindTimes:
    params = SamplingParams(max_tokens=1 + WARM_STEPS + steps, ignore_eos=True)
    seqs = [engine.add_request(p, params) for p in prompts]
    while any(not s.output_ids for s in seqs):
        engine.step()
    for _ in range(WARM_STEPS):
        engine.step()
    times = traced_steps(engine, steps)
    while engine.has_work:
        engine.step()
    return times


def _generate(engine: LLMEngine, prompts: list[list[int]], output_tokens: int) -> EngineRun:
    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True)
    start = time.perf_counter()
    seqs = [engine.add_request(p, params) for p in prompts]
    first: dict[str, float] = {}
    steps_at_prefill_end = None
    while engine.has_work:
        engine.step()
        now = time.perf_counter()
        first.update({s.request_id: now - start for s in seqs if s.output_ids and s.request_id not in first})
        if steps_at_prefill_end is None and len(first) == len(seqs):
            steps_at_prefill_end, prefill_end, tokens_then = engine.stats.steps, now, _emitted(seqs)
    end = time.perf_counter()
    return EngineRun(len(prompts), len(prompts[0]), output_tokens, prefill_end - start,
                     statistics.median(first.values()), end - prefill_end,
                     max(1, engine.stats.steps - steps_at_prefill_end), _emitted(seqs) - tokens_then)


def _emitted(seqs) -> int:
    return sum(len(s.output_ids) for s in seqs)
