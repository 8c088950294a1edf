"""GLM-5 (`glm_moe_dsa`): DeepSeek-V3.2's layers and names; its indexer rotates interleaved pairs
(`indexer_rope_interleave`), and the released config uses plain RoPE. Layers marked "shared" (IndexShare, GLM-5.2)
run no indexer and attend over the Top-K of the closest earlier layer that does: `indexer_types` lists them, or
`index_topk_pattern` ("F" full, "S" shared) or `index_topk_freq` / `index_skip_topk_offset` say which."""

from __future__ import annotations

from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.adapters import sections
from dayzero.model.adapters.deepseek_v32 import DeepseekV32
from dayzero.model.fields import ConfigFields

INDEXER_TYPES = {"F": "full", "S": "shared"}


def indexer_types(f: ConfigFields, num_layers: int) -> list[str]:
    """Per layer "full" or "shared", as transformers derives them."""
    types = f.data.get("indexer_types") or f.data.get("index_topk_pattern")
    if types is None:
        freq = f.int("index_topk_freq", 1)
        offset = f.int("index_skip_topk_offset", 2, minimum=0)
        return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(num_layers)]
    if isinstance(types, str):
        types = [INDEXER_TYPES.get(c, c) for c in types]
    if len(types) != num_layers or any(t not in ("full", "shared") for t in types):
        raise DayzeroError(f"{f.where}: field 'indexer_types' (or 'index_topk_pattern') must give 'full' or 'shared' "
                           f"for each of the {num_layers} layers, got {types!r}")
    return list(types)


class GlmMoeDsa(DeepseekV32):
    model_type = "glm_moe_dsa"
    indexer_rope_interleaved = True

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        types = indexer_types(f, sections.num_layers(f))
        if types[0] != "full":
            raise DayzeroError(f"{f.where}: layer 0 shares an earlier layer's Top-K, but none comes before it")
        shared = tuple(i for i, t in enumerate(types) if t == "shared")
        return dict(super().describe(f), index_shared_layers=shared)


ADAPTER = GlmMoeDsa()
