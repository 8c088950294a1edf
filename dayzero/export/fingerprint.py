"""Ingredients of the compilation-cache key: what a checkpoint, the code and the toolchain are."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import torch

from dayzero.errors import DayzeroError
from dayzero.model.checkpoint import safetensors_header_length

SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _safetensors_header(path: Path) -> bytes:
    """The JSON header (names, dtypes, shapes, offsets) of a safetensors file: cheap to read, changes with the
    layout; weight values are covered by the file's size and mtime."""
    length = safetensors_header_length(path)
    with open(path, "rb") as f:
        f.seek(8)
        return f.read(length)


def weight_fingerprint(checkpoint: Path) -> str:
    """sha256 over every shard's name, size, mtime and safetensors header, and config.json's bytes."""
    digest = hashlib.sha256((checkpoint / "config.json").read_bytes())
    shards = sorted(checkpoint.glob("*.safetensors"))
    if not shards:
        raise DayzeroError(f"no *.safetensors files in {checkpoint}")
    for shard in shards:
        stat = shard.stat()
        digest.update(f"{shard.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        digest.update(hashlib.sha256(_safetensors_header(shard)).digest())
    return digest.hexdigest()


# the code an engine is built from; the runtime, cache and CLI do not change what export compiles
ENGINE_SOURCES = ("plugins", "model", "export", "dist")


def source_fingerprint() -> str:
    """sha256 of the Python sources engines are built from (ENGINE_SOURCES): a change there rebuilds engines."""
    digest = hashlib.sha256()
    for path in sorted(p for part in ENGINE_SOURCES for p in (SOURCE_ROOT / part).rglob("*.py")):
        digest.update(str(path.relative_to(SOURCE_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def toolchain(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "machine": platform.machine()}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        info["arch"] = f"sm_{major}{minor}"
    return info


def config_fingerprint(checkpoint: Path) -> dict:
    path = checkpoint / "config.json"
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise DayzeroError(f"cannot read {path}: {err}") from err
    except ValueError as err:
        raise DayzeroError(f"{path} is not valid JSON ({err}); fix it or download it again") from err
