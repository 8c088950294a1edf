"""Where dayzero keeps things: bundled configs and the user's cache directory."""

from __future__ import annotations

import os
from pathlib import Path

from dayzero.errors import DayzeroError

EMBEDDED_MODEL = "tiny-hybrid"


def configs_dir() -> Path:
    """The bundled configs, package data: in a checkout and in an installed wheel alike."""
    return Path(__file__).resolve().parent / "configs"


def bundled_config(name: str) -> Path:
    """dayzero/configs/<name>/config.json."""
    path = configs_dir() / name / "config.json"
    if not path.exists():
        known = sorted(p.name for p in configs_dir().iterdir() if (p / "config.json").exists())
        raise DayzeroError(f"no bundled config {name!r}; known: {', '.join(known)}")
    return path


def resolve_config(config: str) -> Path:
    """A config.json, a folder holding one, or the name of a bundled config."""
    return Path(config) if Path(config).exists() else bundled_config(config)


def cache_dir() -> Path:
    """$DAYZERO_CACHE_DIR, default ~/.cache/dayzero."""
    return Path(os.environ.get("DAYZERO_CACHE_DIR", Path.home() / ".cache" / "dayzero"))


def embedded_checkpoint() -> Path:
    return cache_dir() / "checkpoints" / EMBEDDED_MODEL
