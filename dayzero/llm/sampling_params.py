"""`dayzero.SamplingParams`: the runtime's sampling parameters with vLLM's defaults (temperature 1, 16 tokens), so
that code written for vLLM samples the same way. The runtime's own class keeps greedy defaults for its internal
callers, which always say what they want."""

from __future__ import annotations

from dataclasses import dataclass

from dayzero.runtime import sampling


@dataclass(frozen=True)
class SamplingParams(sampling.SamplingParams):
    max_tokens: int = 16
    temperature: float = 1.0
