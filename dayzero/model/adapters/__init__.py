"""Architecture adapters, one file per HF `model_type` (each defines `ADAPTER`), found by listing this folder: adding
an architecture whose ops exist is adding its file."""

from __future__ import annotations

import importlib
import pkgutil

from dayzero.errors import DayzeroError
from dayzero.model.adapters.base import Adapter


def _discover() -> dict[str, Adapter]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        adapter = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ADAPTER", None)
        if adapter is not None:
            found[adapter.model_type] = adapter
    return dict(sorted(found.items()))


ADAPTERS: dict[str, Adapter] = _discover()


def adapter_for(model_type: str, where: str = "config.json") -> Adapter:
    """The adapter of `model_type` (read from `where`, named in the error)."""
    if model_type not in ADAPTERS:
        supported = ", ".join(repr(t) for t in ADAPTERS)
        raise DayzeroError(f"{where}: field 'model_type' must be one of {supported}, got {model_type!r}; dayzero "
                           "has no adapter for this architecture")
    return ADAPTERS[model_type]
