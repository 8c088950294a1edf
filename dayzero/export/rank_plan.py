"""The rank plan of tensor parallelism: which heads, neurons and experts a rank holds, and where its partial
outputs are summed.

A rank holds a contiguous 1/tp of the KDA heads, of the gated DeltaNet key heads (with the value heads they serve),
of the MLA heads, of the GQA query and KV heads (and so of the GQA K/V cache), of the dense MLP's and of every routed
and shared expert's intermediate dim; with expert parallelism (ep = tp) it holds 1/tp of the routed experts whole
instead of a slice of each. Each such sublayer ends in one all-reduce. Everything else (embeddings, the LM head,
norms, AttnRes mixes, the router, the low-rank and latent projections, the MLA latent cache and the DSA indexer) is
whole on every rank: every rank computes the same Top-K and writes the same latent rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from dayzero.errors import DayzeroError
from dayzero.model.collectives import WORLD_GROUP
from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import check_packed_split


def check_expert_split(ep: int, tp: int) -> None:
    """The expert-parallel degrees dayzero builds: none, or every tensor-parallel rank owning whole experts."""
    if ep not in (1, tp):
        raise DayzeroError(f"--ep {ep} must be 1 (each expert's neurons split over the --tp ranks) or equal --tp {tp} "
                           "(whole experts split over them)")


@dataclass(frozen=True)
class RankPlan:
    tp: int
    rank: int
    ep: int = 1  # 1, or tp: the routed experts are split whole over the tensor-parallel ranks
    group: str = WORLD_GROUP

    def __post_init__(self):
        if not 0 <= self.rank < self.tp:
            raise DayzeroError(f"rank {self.rank} is outside a tensor-parallel world of {self.tp}")
        check_expert_split(self.ep, self.tp)

    def split_sizes(self, cfg: ModelConfig) -> dict[str, int]:
        """The sizes tp must divide, by the config field that holds them."""
        sizes = {"intermediate_size": cfg.intermediate_size}
        if cfg.kda is not None:
            sizes["linear_attn_config.num_heads"] = cfg.kda.num_heads
        if cfg.mla is not None:
            sizes["num_attention_heads"] = cfg.mla.num_heads
        if cfg.gdn is not None:
            sizes["linear_num_key_heads"] = cfg.gdn.num_key_heads
        if cfg.gqa is not None:
            sizes["num_key_value_heads"] = cfg.gqa.num_kv_heads
        if cfg.moe is not None and self.ep == 1:
            sizes["moe_intermediate_size"] = cfg.moe.intermediate_size
            if cfg.moe.shared_intermediate_size:
                sizes["shared_expert_intermediate_size"] = cfg.moe.shared_intermediate_size
        elif cfg.moe is not None:
            sizes["num_experts"] = cfg.moe.num_experts
            sizes["moe_intermediate_size x num_shared_experts"] = cfg.moe.shared_size
        return sizes

    def local_config(self, cfg: ModelConfig) -> ModelConfig:
        """The config of the network this rank runs (its share of heads and neurons)."""
        if self.tp == 1:
            return cfg
        uneven = {name: size for name, size in self.split_sizes(cfg).items() if size % self.tp}
        if uneven:
            listed = ", ".join(f"{name} = {size}" for name, size in uneven.items())
            raise DayzeroError(f"--tp {self.tp} does not divide this model ({listed}); choose a tp that divides them")
        check_packed_split(cfg, self.tp if self.ep == 1 else 1)
        share = {"intermediate_size": cfg.intermediate_size // self.tp}
        if cfg.kda is not None:
            share["kda"] = dataclasses.replace(cfg.kda, num_heads=cfg.kda.num_heads // self.tp)
        if cfg.mla is not None:
            share["mla"] = dataclasses.replace(cfg.mla, num_heads=cfg.mla.num_heads // self.tp)
        if cfg.gdn is not None:
            share["gdn"] = dataclasses.replace(cfg.gdn, num_key_heads=cfg.gdn.num_key_heads // self.tp,
                                               num_value_heads=cfg.gdn.num_value_heads // self.tp)
        if cfg.gqa is not None:
            share["gqa"] = dataclasses.replace(cfg.gqa, num_heads=cfg.gqa.num_heads // self.tp,
                                               num_kv_heads=cfg.gqa.num_kv_heads // self.tp)
        if cfg.moe is not None and self.ep == 1:
            shared = cfg.moe.shared_intermediate_size and cfg.moe.shared_intermediate_size // self.tp
            share["moe"] = dataclasses.replace(cfg.moe, intermediate_size=cfg.moe.intermediate_size // self.tp,
                                               shared_intermediate_size=shared or None)
        elif cfg.moe is not None:
            share["moe"] = dataclasses.replace(cfg.moe, expert_shards=self.ep)
        return dataclasses.replace(cfg, **share)

    def shard(self, full: torch.Tensor, local_shape: torch.Size, segments: tuple[int, ...] = ()) -> torch.Tensor:
        """This rank's part of a whole tensor: the one dim that the local shape shrinks by tp, else all of it.

        Heads and neurons are laid out contiguously along that dim (head-major projections, conv channels, expert
        rows), so a contiguous chunk is a set of whole heads. A tensor of row groups side by side (`segments`: their
        local sizes; gated DeltaNet's conv over q, k, v) is this rank's chunk of each group, in order."""
        if segments and full.shape != local_shape:
            parts = full.split([n * self.tp for n in segments])
            return torch.cat([self.shard(part, (n, *local_shape[1:])) for part, n in zip(parts, segments)])
        if full.shape == local_shape:
            return full
        dims = [d for d, (a, b) in enumerate(zip(full.shape, local_shape)) if a != b]
        one_dim_split = len(full.shape) == len(local_shape) and len(dims) == 1
        if not one_dim_split or full.shape[dims[0]] != local_shape[dims[0]] * self.tp:
            raise DayzeroError(f"cannot shard a tensor of shape {list(full.shape)} into {list(local_shape)} over "
                               f"{self.tp} ranks")
        return full.chunk(self.tp, dim=dims[0])[self.rank]

    def first_expert(self, local_experts: int) -> int:
        """The global index of this rank's first routed expert (every rank holds all of them without ep)."""
        return self.rank * local_experts if self.ep > 1 else 0

    def mark_reductions(self, model: nn.Module) -> None:
        """Point every sublayer whose output is a partial sum at the group (shared experts: their MoE reduces)."""
        from dayzero.model.gated_attention import GatedAttention
        from dayzero.model.gated_deltanet import GatedDeltaNet
        from dayzero.model.kda import KDAttention
        from dayzero.model.mla import MLAttention
        from dayzero.model.mlp import GatedMLP
        from dayzero.model.moe import MoE

        if self.tp == 1:
            return
        shared = {id(m.shared_experts) for m in model.modules() if isinstance(m, MoE) and hasattr(m, "shared_experts")}
        for module in model.modules():
            if isinstance(module, KDAttention | GatedDeltaNet | MLAttention | GatedAttention | MoE) or (
                    isinstance(module, GatedMLP) and id(module) not in shared):
                module.tp_group = self.group
            if isinstance(module, MoE) and self.ep > 1:
                module.first_expert = self.first_expert(module.cfg.local_experts)
