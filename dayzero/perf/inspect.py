"""`dayzero inspect`: the operator profile of a model from its config alone (no weights loaded), per layer kind.

For each kind (layer_ops.py): the ops that serve it, its layers, parameters and weight bytes (what `dayzero plan`
counts, export/sizing.py), the work of a prefill token (perf/prefill_work.py, the mean over a prompt of `context`
tokens), the bytes a decode token moves at batch 1 with `context` tokens cached (perf/decode_traffic.py, the floor
`dayzero bench` holds decode steps against) and the cache bytes a layer keeps, per token (MLA latent KV and index
keys) or per sequence (KDA state and conv windows), in each cache format (model/caches.py). All of it for the whole
model and for one rank of `--tp` / `--ep` (rank 0; every rank holds the same share).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from dayzero.contract import EngineManifest
from dayzero.errors import DayzeroError
from dayzero.export.options import DTYPES, INDEX_CACHES, KV_CACHES
from dayzero.export.rank_plan import RankPlan
from dayzero.export.sizing import model_parameters, parameter_bytes
from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import config_manifest
from dayzero.model.expert_format import with_mxfp4_experts
from dayzero.model.weights import parameter_shapes
from dayzero.perf import layer_ops
from dayzero.perf.decode_traffic import cache_bytes_by_layer, state_bytes_by_layer, weight_read_share
from dayzero.perf.layer_caches import CacheLine, cache_lines
from dayzero.perf.layer_ops import SUBLAYERS, Group, Piece
from dayzero.perf.prefill_work import attention_flops, weight_flops


@dataclass(frozen=True)
class InspectOptions:
    context: int = 8192  # cached tokens of the decode token, prompt tokens of the prefill
    tp: int = 1
    cp: int = 1
    ep: int = 1
    dtype: str = "bfloat16"
    kv_cache: str = "bf16"  # the cache formats the decode traffic reads (bf16: unquantized, in dtype)
    index_cache: str = "bf16"
    mxfp4_experts: bool = False  # routed experts held packed as MXFP4

    def __post_init__(self):
        for name in ("context", "tp", "cp", "ep"):
            if getattr(self, name) < 1:
                raise DayzeroError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name, value, allowed in (("dtype", self.dtype, DTYPES), ("kv-cache", self.kv_cache, KV_CACHES),
                                     ("index-cache", self.index_cache, INDEX_CACHES)):
            if value not in allowed:
                raise DayzeroError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def cache_format(self) -> CacheFormat:
        return CacheFormat(kv_fp8=self.kv_cache == "fp8", index_mxfp8=self.index_cache == "mxfp8")


@dataclass(frozen=True)
class Cost:
    """What a row (or a model) costs: its weights, a prefill token's work and a decode token's traffic."""

    params: int = 0
    weight_bytes: int = 0
    prefill_flops: float = 0.0
    decode_weight_bytes: float = 0.0
    decode_state_bytes: float = 0.0
    decode_cache_bytes: float = 0.0

    @property
    def decode_bytes(self) -> float:
        return self.decode_weight_bytes + self.decode_state_bytes + self.decode_cache_bytes

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(Cost)))

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "decode_bytes": self.decode_bytes}


@dataclass(frozen=True)
class KindRow:
    sublayer: str
    kind: str
    label: str
    layers: int
    pieces: tuple[Piece, ...]
    model: Cost
    rank: Cost
    caches: tuple[CacheLine, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    model_type: str
    num_layers: int
    options: InspectOptions
    rows: tuple[KindRow, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def model_total(self) -> Cost:
        return sum((row.model for row in self.rows), Cost())

    @property
    def rank_total(self) -> Cost:
        return sum((row.rank for row in self.rows), Cost())

    def cache_bytes(self, per: str, quantized: bool = False, rank: bool = False) -> int | None:
        """All layers' cache bytes a token adds (per TOKEN) or a sequence holds (per SEQUENCE), plain or quantized
        (None: the quantized format does not fit some layer)."""
        total = 0
        for row in self.rows:
            for line in row.caches:
                if line.per == per:
                    nbytes = (line.rank_bytes if rank else line.bytes)[-1 if quantized else 0]
                    if nbytes is None:
                        return None
                    total += row.layers * nbytes
        return total

    def to_json(self) -> dict:
        rows = [{**dataclasses.asdict(row), "model": row.model.to_json(), "rank": row.rank.to_json()}
                for row in self.rows]
        return {"name": self.name, "model_type": self.model_type, "num_layers": self.num_layers,
                "options": dataclasses.asdict(self.options), "rows": rows, "model_total": self.model_total.to_json(),
                "rank_total": self.rank_total.to_json(), "notes": list(self.notes)}


def decode_manifest(cfg: ModelConfig, options: InspectOptions) -> EngineManifest:
    """The cache manifest a decode token of `cfg` (one rank's config) reads, in the chosen formats."""
    try:
        return config_manifest(cfg, options.torch_dtype, options.cache_format, max_batch=1)
    except ValueError as err:
        raise DayzeroError(f"--kv-cache {options.kv_cache}: {err}") from None


def costs(cfg: ModelConfig, options: InspectOptions) -> dict[Group, Cost]:
    """Each row's cost in the network `cfg` describes (the whole model, or one rank's local config)."""
    dtype, context = options.torch_dtype, options.context
    parts: dict[Group, dict[str, float]] = {}

    def add(group: Group, name: str, value: float) -> None:
        row = parts.setdefault(group, {})
        row[name] = row.get(name, 0) + value

    for name, shape in parameter_shapes(cfg).items():
        group, nbytes = layer_ops.param_group(cfg, name), parameter_bytes(name, shape, dtype)
        add(group, "params", model_parameters(name, shape))
        add(group, "weight_bytes", nbytes)
        add(group, "prefill_flops", weight_flops(cfg, name, shape))
        add(group, "decode_weight_bytes", nbytes * weight_read_share(cfg, name, shape, 1))
    for layer in range(cfg.num_layers):
        add(layer_ops.layer_group(cfg, layer), "prefill_flops", attention_flops(cfg, layer, context) / context)
    manifest = decode_manifest(cfg, options)
    for layer, nbytes in state_bytes_by_layer(manifest, 1).items():
        add(layer_ops.layer_group(cfg, layer), "decode_state_bytes", nbytes)
    for layer, nbytes in cache_bytes_by_layer(cfg, manifest, context).items():
        add(layer_ops.layer_group(cfg, layer), "decode_cache_bytes", nbytes)
    return {group: Cost(**row) for group, row in parts.items()}


def layer_counts(cfg: ModelConfig) -> dict[Group, int]:
    """How many layers hold each kind (every layer holds a mixer, a feed-forward and, with AttnRes, depth mixes)."""
    counts: dict[Group, int] = {}
    for layer in range(cfg.num_layers):
        groups = {layer_ops.layer_group(cfg, layer), (layer_ops.FFN, cfg.mlp_kinds[layer])}
        residual = layer_ops.residual_kind(cfg)
        if residual is not None:
            groups.add((layer_ops.RESIDUAL, residual))
        for group in groups:
            counts[group] = counts.get(group, 0) + 1
    return counts


def _rows(cfg: ModelConfig, local: ModelConfig, options: InspectOptions) -> tuple[KindRow, ...]:
    counts, caches, whole_costs = layer_counts(cfg), cache_lines(cfg, local, options.torch_dtype), costs(cfg, options)
    # a single rank holds the whole model
    rank_costs = whole_costs if local is cfg else costs(local, options)
    return tuple(KindRow(group[0], group[1], layer_ops.label(group), counts.get(group, 0),
                         layer_ops.pieces(group, cfg, options.cache_format, options.cp),
                         whole_costs[group], rank_costs.get(group, Cost()), caches.get(group, ()))
                 for group in sorted(whole_costs, key=lambda g: SUBLAYERS.index(g[0])))


def profile(cfg: ModelConfig, name: str, options: InspectOptions) -> Profile:
    """The operator profile of `cfg` (named `name`) under `options`."""
    cfg = with_mxfp4_experts(cfg, options.mxfp4_experts)
    local = RankPlan(options.tp, 0, options.ep).local_config(cfg)
    notes = ["prefill/token: the mean over a prompt of --context tokens (the KDA recurrences' O(H K V) left out)",
             "decode: one token at batch 1 after --context tokens: each weight it reaches read once, the KDA state",
             "read and written once, the latent rows (at most top-k of them under DSA) and the index keys read"]
    notes += list(cfg.ignored_parts)
    if options.cp > 1:
        notes.append(f"--cp {options.cp}: {options.tp * options.cp} ranks, each group of {options.tp} holding the "
                     "whole model; a prefill's tokens split over the groups")
    return Profile(name, cfg.model_type, cfg.num_layers, options, _rows(cfg, local, options), tuple(notes))
