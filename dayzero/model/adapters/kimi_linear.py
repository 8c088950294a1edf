"""Kimi-Linear (`kimi_linear`): KDA and NoPE MLA layers by 1-indexed lists, a dense first layer, then MoE.

Tensor names are dayzero's own, except that transformers writes dense MLPs under `block_sparse_moe.`."""

from __future__ import annotations

from typing import Any

from dayzero.model.adapters import sections
from dayzero.model.adapters.base import Adapter
from dayzero.model.fields import ConfigFields
from dayzero.model.layer_config import KDA, MLA


class KimiLinear(Adapter):
    model_type = "kimi_linear"

    def text_fields(self, top: ConfigFields) -> ConfigFields:
        return top.sub("text_config") or top

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        num_layers = sections.num_layers(f)
        layer_kinds = sections.hybrid_layer_kinds(f, num_layers)
        return dict(
            **sections.common(f),
            **sections.feed_forward(f, num_layers),
            layer_kinds=layer_kinds,
            kda=sections.kda(f) if KDA in layer_kinds else None,
            mla=sections.mla(f) if MLA in layer_kinds else None,
            indexer=sections.indexer(f),
            attn_res_block_size=f.optional_int("attn_res_block_size"),
        )

    def stored_names(self, name: str) -> tuple[str, ...]:
        if ".mlp." in name:
            return name, name.replace(".mlp.", ".block_sparse_moe.")
        return (name,)


ADAPTER = KimiLinear()
