from dayzero.plugins.moe.activation import gated_activation
from dayzero.plugins.moe.reference import gated_mlp, moe_experts, route

__all__ = ["gated_activation", "gated_mlp", "moe_experts", "route"]
