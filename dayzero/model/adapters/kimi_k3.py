"""Kimi K3 / K3.1 (`kimi_k3`): Kimi-Linear's layout with the fields under `text_config` and tensor names under
`language_model.`; K3's gate, full-rank output gate, MLA output gate, AttnRes, latent MoE and SiTU are fields of
the same sections, and K3.1's DSA indexer (no RoPE) is the `index_*` fields."""

from __future__ import annotations

from dayzero.model.adapters.kimi_linear import KimiLinear


class KimiK3(KimiLinear):
    model_type = "kimi_k3"


ADAPTER = KimiK3()
