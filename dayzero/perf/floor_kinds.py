"""The decode traffic floor (decode_traffic.py) split by op kind (op_kinds.py): what each kind of work must move in a
step, so that `dayzero bench --profile` can hold each kind's time against its own share of the floor."""

from __future__ import annotations

import torch

from dayzero.contract import EngineManifest
from dayzero.model.config import ModelConfig
from dayzero.perf.decode_traffic import cache_bytes_by_tensor, state_bytes_by_layer, weight_bytes_by_name
from dayzero.perf.op_kinds import GQA, INDEXER, KDA, MLA, param_kind

# paged cache tensor -> the kind that reads it in a decode step
CACHE_KINDS = {"index_k": INDEXER, "latent_kv": MLA, "kv": GQA}


def floor_bytes_by_kind(cfg: ModelConfig, manifest: EngineManifest, batch: int, context: int) -> dict[str, float]:
    """Kind -> bytes of decode_traffic(cfg, manifest, batch, context) that kind's work moves; they sum to its total."""
    dtype = getattr(torch, manifest.dtype)
    by_kind: dict[str, float] = {}

    def add(kind: str, nbytes: float) -> None:
        by_kind[kind] = by_kind.get(kind, 0.0) + nbytes

    for name, nbytes in weight_bytes_by_name(cfg, dtype, batch * (1 + manifest.num_draft)).items():
        add(param_kind(name), nbytes)
    add(KDA, sum(state_bytes_by_layer(manifest, batch).values()))
    for (_, tensor), nbytes in cache_bytes_by_tensor(cfg, manifest, context).items():
        add(CACHE_KINDS[tensor], batch * nbytes)
    return by_kind
