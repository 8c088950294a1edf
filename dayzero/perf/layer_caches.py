"""The cache a layer keeps, per layer kind and per cache format, from the cache manifest an engine of the config
would carry (model/eager_engine.py: the layouts of model/caches.py and plugins/paged_cache/formats.py).

MLA layers keep paged caches that grow by a row a token (latent KV; index keys with a DSA indexer), GQA layers their
K/V rows, plain in the model dtype or quantized (FP8 latent records and K/V, MXFP8 index keys); KDA layers keep a
state and conv windows per sequence, whatever its length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.contract import PAGE, CacheTensorSpec, EngineManifest
from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import config_manifest
from dayzero.perf.layer_ops import Group, layer_group

TOKEN, SEQUENCE = "token", "sequence"
QUANTIZED = {"latent_kv": "fp8", "kv": "fp8", "index_k": "mxfp8"}


@dataclass(frozen=True)
class CacheLine:
    """One cache tensor of a layer kind: what a token adds to it (paged) or a sequence holds in it (slotted)."""

    tensor: str  # latent_kv | index_k | kv | state | conv
    per: str  # token | sequence
    formats: tuple[str, ...]  # the plain format (the tensor's dtype), then a paged tensor's quantized one
    bytes: tuple[int | None, ...]  # one layer of the whole model, by format (None: the format does not fit it)
    rank_bytes: tuple[int | None, ...]  # one layer on one rank


def cache_lines(cfg: ModelConfig, local: ModelConfig, dtype: torch.dtype) -> dict[Group, tuple[CacheLine, ...]]:
    """Each mixer kind's cache tensors, for the whole model `cfg` and one rank's `local` config."""
    whole = _per_layer(cfg, dtype)
    rank = whole if local is cfg else _per_layer(local, dtype)
    lines: dict[Group, list[CacheLine]] = {}
    for (group, tensor), (per, formats, nbytes) in whole.items():
        lines.setdefault(group, []).append(CacheLine(tensor, per, formats, nbytes, rank[group, tensor][2]))
    return {group: tuple(group_lines) for group, group_lines in lines.items()}


def _per_layer(cfg: ModelConfig, dtype: torch.dtype) -> dict[tuple[Group, str], tuple]:
    """(kind, tensor) -> (per, formats, bytes of one layer by format)."""
    quantized = _quantized_bytes(cfg, dtype)
    plain = config_manifest(cfg, dtype, CacheFormat(), max_batch=1)
    found = {}
    for spec in plain.cache_tensors:
        if spec.unit == PAGE:
            entry = TOKEN, (spec.dtype, QUANTIZED.get(spec.name, "quantized")), (
                _unit_bytes(spec, plain), quantized.get((spec.layer, spec.name)))
        else:
            entry = SEQUENCE, (spec.dtype,), (_unit_bytes(spec, plain),)
        found[layer_group(cfg, spec.layer), spec.name] = entry
    return found


def _unit_bytes(spec: CacheTensorSpec, manifest: EngineManifest) -> int:
    """A paged tensor's bytes a token, a slotted tensor's bytes a sequence."""
    return spec.unit_bytes // manifest.page_size if spec.unit == PAGE else spec.unit_bytes


def _quantized_bytes(cfg: ModelConfig, dtype: torch.dtype) -> dict[tuple[int, str], int]:
    """(layer, tensor) -> bytes a token in the quantized formats (an FP8 latent cache needs whole 128-wide tiles)."""
    for fmt in (CacheFormat(kv_fp8=True, index_mxfp8=True), CacheFormat(index_mxfp8=True)):
        try:
            manifest = config_manifest(cfg, dtype, fmt, max_batch=1)
        except ValueError:
            continue
        return {(s.layer, s.name): _unit_bytes(s, manifest) for s in manifest.cache_tensors if s.dtype == "uint8"}
    return {}
