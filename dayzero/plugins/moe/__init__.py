from dayzero.plugins.moe.activation import gated_activation
from dayzero.plugins.moe.op import (
    Mxfp4Weight,
    fuses_shared_expert,
    gated_mlp,
    grouped_mlp,
    moe_experts,
    moe_experts_with_shared,
    moe_local_experts,
    permute,
    route,
    router_logits,
    unpermute,
)
from dayzero.plugins.moe.reference import expert_rank_offsets

__all__ = ["Mxfp4Weight", "expert_rank_offsets", "fuses_shared_expert", "gated_activation", "gated_mlp",
           "grouped_mlp", "moe_experts", "moe_experts_with_shared", "moe_local_experts", "permute", "route",
           "router_logits", "unpermute"]
