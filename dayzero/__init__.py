"""dayzero: day-zero deployment of hybrid-attention LLMs (KDA + DSA sparse MLA + AttnRes + MoE)."""

from __future__ import annotations

from dayzero.errors import DayzeroError

__all__ = ["DayzeroError"]
__version__ = "0.1.0"
