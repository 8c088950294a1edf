"""DeepSeek-V3.2 (`deepseek_v32`): every layer DSA sparse MLA with q LoRA and RoPE on interleaved pairs (YaRN in the
released config), its indexer rotating the first `qk_rope_head_dim` dims of its query and key in halves; dense
first layers, then MoE with grouped routing; multi-token-prediction layers stored after the last layer.

Tensor names: the feed-forward is `mlp.` whether dense or MoE (dayzero's MoE is `block_sparse_moe.`); routed experts
are `mlp.experts.{e}.{gate,up,down}_proj.weight`, or transformers' fused `mlp.experts.gate_up_proj [E, 2I, D]`
(gate rows first) and `mlp.experts.down_proj [E, D, I]`.
"""

from __future__ import annotations

from typing import Any

from dayzero.model.adapters import sections
from dayzero.model.adapters.base import Adapter, Stored
from dayzero.model.fields import ConfigFields

EXPERT_NAMES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


class DeepseekV32(Adapter):
    model_type = "deepseek_v32"
    # the indexer's RoPE layout (GLM-5 rotates interleaved pairs); `indexer_rope_interleave` may say otherwise
    indexer_rope_interleaved = False
    # the names transformers writes in its layer_types mirror (older releases: deepseek_sparse_attention)
    layer_types = ("indexed_attention", "deepseek_sparse_attention", "full_attention")

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        sections.refuse_true(f, "attention_bias", "mlp_bias")
        num_layers = sections.num_layers(f)
        mla = sections.mla(f, use_nope=False, rope_interleaved=True)
        interleaved = f.bool("indexer_rope_interleave", self.indexer_rope_interleaved)
        if not f.has("dsa_config"):
            # every layer is DSA: the indexer's fields are required
            f.int("index_topk")
        return dict(
            **sections.common(f),
            **sections.feed_forward(f, num_layers),
            layer_kinds=sections.attention_layer_kinds(f, num_layers, self.layer_types),
            kda=None,
            mla=mla,
            indexer=sections.indexer(f, rope_dim=mla.qk_rope_head_dim, rope_interleaved=interleaved),
        )

    def stored_names(self, name: str) -> tuple[str, ...]:
        return (name.replace(".block_sparse_moe.", ".mlp."),)

    def expert_sources(self, base: str, w: str, suffix: str, expert: int, shape: tuple[int, ...]) -> tuple[Stored, ...]:
        base = base.replace(".block_sparse_moe.", ".mlp.")
        own = Stored(f"{base}.{expert}.{EXPERT_NAMES[w]}.weight{suffix}")
        if suffix:
            return (own,)
        if w == "w2":
            return own, Stored(f"{base}.down_proj", (expert,), tuple(shape))
        num_experts, rows, dim = shape
        fused_rows = slice(0, rows) if w == "w1" else slice(rows, 2 * rows)
        return own, Stored(f"{base}.gate_up_proj", (expert, fused_rows), (num_experts, 2 * rows, dim))


ADAPTER = DeepseekV32()
