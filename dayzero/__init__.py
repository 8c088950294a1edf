"""dayzero: day-zero deployment of hybrid-attention LLMs (KDA + DSA sparse MLA + AttnRes + MoE)."""

from __future__ import annotations

from dayzero.errors import DayzeroError

__all__ = ["LLM", "DayzeroError", "SamplingParams"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # the runtime pulls in torch and the plugins: load it only when asked for
    if name == "LLM":
        from dayzero.llm.api import LLM

        return LLM
    if name == "SamplingParams":
        from dayzero.runtime.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'dayzero' has no attribute {name!r}")
