"""GLM-5 (`glm_moe_dsa`): DeepSeek-V3.2's layers and names; its indexer rotates interleaved pairs
(`indexer_rope_interleave`), and the released config uses plain RoPE. Layers that reuse the previous layer's Top-K
(`indexer_types` "shared", GLM-5.2's IndexShare) are refused: every layer here runs its own indexer."""

from __future__ import annotations

from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.adapters.deepseek_v32 import DeepseekV32
from dayzero.model.fields import ConfigFields


class GlmMoeDsa(DeepseekV32):
    model_type = "glm_moe_dsa"
    indexer_rope_interleaved = True

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        kinds = f.data.get("indexer_types") or []
        shared = [i for i, kind in enumerate(kinds) if kind != "full"]
        if f.has("index_topk_pattern") or f.int("index_topk_freq", 1) > 1:
            raise DayzeroError(f"{f.where}: 'index_topk_pattern' / 'index_topk_freq' make some layers reuse an earlier "
                               "layer's Top-K; dayzero runs an indexer in every layer")
        if shared:
            raise DayzeroError(f"{f.where}: field 'indexer_types' marks layers {shared} {kinds[shared[0]]!r} (reusing "
                               "an earlier layer's Top-K); dayzero runs an indexer in every layer and supports only "
                               "'full'")
        return super().describe(f)


ADAPTER = GlmMoeDsa()
