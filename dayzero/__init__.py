"""dayzero: day-zero deployment of hybrid-attention LLMs (KDA + DSA sparse MLA + AttnRes + MoE)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dayzero.errors import DayzeroError
from dayzero.version import __version__ as __version__

if TYPE_CHECKING:
    from dayzero.llm.api import LLM
    from dayzero.llm.outputs import CompletionOutput, RequestOutput
    from dayzero.llm.sampling_params import SamplingParams

__all__ = ["LLM", "CompletionOutput", "DayzeroError", "RequestOutput", "SamplingParams"]

# the runtime pulls in torch and the plugins: each public name loads its module only when asked for
_LAZY = {"LLM": "dayzero.llm.api", "CompletionOutput": "dayzero.llm.outputs", "RequestOutput": "dayzero.llm.outputs",
         "SamplingParams": "dayzero.llm.sampling_params"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'dayzero' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
