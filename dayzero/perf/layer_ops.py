"""Which plugin op serves each piece of each layer kind (docs/ops.md, "Where each layer kind is served"): the operator
profile `dayzero inspect` prints.

Kinds come from the ModelConfig alone: a layer's token mixer (KDA, gated DeltaNet, MLA with a DSA indexer, dense
MLA, gated GQA), its feed-forward (dense MLP, MoE) and, with AttnRes, its depth mixes; the embedding, final norm and
LM head sit outside the layers. Ops are named as registered (`torch.ops.dayzero.<name>`); a piece whose op is not
registered, and every piece of a kind this table does not know, is "reference only" (served by the reference network,
no kernel yet).
Pieces marked "torch" are plain PyTorch by design (the projections everywhere, the prefill gate, the decode router):
a compiled engine fuses them with Inductor.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dayzero.model.caches import CacheFormat
from dayzero.model.config import GQA, MLA, ModelConfig
from dayzero.plugins.registry import PLUGIN_OPS

MIXER, RESIDUAL, FFN, OUTSIDE = "token mixer", "residual", "feed-forward", "outside layers"
SUBLAYERS = (MIXER, RESIDUAL, FFN, OUTSIDE)
REFERENCE_ONLY = "reference only"
ATTNRES, HYPER, EMBEDDING_AND_HEAD, MLA_DSA = "attnres", "mhc", "embedding", "mla_dsa"
LABELS = {"kda": "KDA", "gdn": "gated DeltaNet", MLA_DSA: "MLA + DSA indexer", MLA: "dense MLA", GQA: "gated GQA",
          "dense": "dense MLP", "moe": "MoE", ATTNRES: "AttnRes", HYPER: "hyper-connections",
          EMBEDDING_AND_HEAD: "embedding, LM head"}

_LAYER_PARAM = re.compile(r"^model\.layers\.(?P<layer>\d+)\.(?P<module>[^.]+)\.")
# a layer's modules that belong to its feed-forward and to its AttnRes depth mixes (the rest is its token mixer)
_FFN_MODULES = ("mlp", "block_sparse_moe", "post_attention_layernorm")
_RESIDUAL_MODULES = ("self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj")
_HYPER_MODULES = ("attn_hc", "ffn_hc")

Group = tuple[str, str]  # (sublayer, kind)


@dataclass(frozen=True)
class Piece:
    """One piece of a layer kind and what serves it in a prefill and in a decode step."""

    name: str
    prefill: str
    decode: str


def mixer_kind(cfg: ModelConfig, layer: int) -> str:
    kind = cfg.layer_kinds[layer]
    return MLA_DSA if kind == MLA and cfg.indexer is not None else kind


def layer_group(cfg: ModelConfig, layer: int) -> Group:
    """The row a layer's caches and attention work belong to: its token mixer's."""
    return MIXER, mixer_kind(cfg, layer)


def param_group(cfg: ModelConfig, name: str) -> Group:
    """The row parameter `name` belongs to (its layer's mixer, feed-forward or depth mixes, or outside the layers)."""
    match = _LAYER_PARAM.match(name)
    if match is None:
        return OUTSIDE, EMBEDDING_AND_HEAD
    layer, module = int(match["layer"]), match["module"]
    if module in _RESIDUAL_MODULES:
        return RESIDUAL, ATTNRES
    if module in _HYPER_MODULES:
        return RESIDUAL, HYPER
    if module in _FFN_MODULES:
        return FFN, cfg.mlp_kinds[layer]
    return layer_group(cfg, layer)


def residual_kind(cfg: ModelConfig) -> str | None:
    """The residual row every layer holds: AttnRes depth mixes, hyper-connections, or none (the plain add)."""
    if cfg.attn_res_block_size is not None:
        return ATTNRES
    return HYPER if cfg.hyper_connections is not None else None


def served(op: str) -> str:
    """`op` if it is a registered plugin op with a kernel of its own, else "reference only (op)"; "torch ..." as
    given."""
    if op.startswith("torch"):
        return op
    registered = PLUGIN_OPS.get(op)
    impls = getattr(registered, "dayzero_impls", {})
    return op if registered is not None and impls.get("cuda") is not impls.get("cpu") else f"{REFERENCE_ONLY} ({op})"


def _same(name: str, *ops: str) -> Piece:
    return Piece(name, " + ".join(ops), " + ".join(ops))


def _kda(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    recurrence = "chunk_kda + kda_summary" if cp > 1 else "chunk_kda"
    return (Piece("short conv", "short_conv_prefill", "fused_kda_decode"),
            Piece("gate", "torch (kda_gate)", "fused_kda_decode"),
            Piece("delta rule", recurrence, "fused_kda_decode"), _same("gated output norm", "gated_rms_norm"))


def _gdn(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    recurrence = "chunk_kda + kda_summary" if cp > 1 else "chunk_kda"
    return (Piece("short conv", "short_conv_prefill", "fused_gdn_decode"),
            Piece("gate", "torch (gdn_gate)", "fused_gdn_decode"),
            Piece("delta rule", recurrence, "fused_gdn_decode"), _same("gated output norm", "gated_rms_norm"))


def _mla(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    latent = _same("latent write", "write_latent")
    if cfg.indexer is None:
        return latent, _same("attention", "dense_mla_paged")
    quantize = ("mxfp8_quantize",) if fmt.index_mxfp8 else ()
    if cfg.indexer.pooled:
        keys = Piece("pooled key write", "write_pooled_index_keys_prefill", "write_pooled_index_keys_decode")
        select = (*quantize, "pooled_index_topk_paged")
    else:
        keys, select = _same("index key write", "write_index_keys"), (*quantize, "index_topk_paged")
    return latent, keys, _same("top-k", *select), _same("sparse attention", "sparse_mla_paged")


def _gqa(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    return _same("K/V write", "write_kv"), Piece("attention", "gqa_prefill_paged", "gqa_decode_paged")


def _moe(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    moe = cfg.moe
    experts = "moe_grouped_mlp_mxfp4" if moe.mxfp4_experts else "moe_grouped_mlp"
    # a plain shared expert of the routed experts' size decodes as one more expert of their grouped GEMMs
    # (model/moe.py, on one rank)
    fused = moe.shared_expert_like_routed and not moe.mxfp4_experts
    decode_experts = "moe_grouped_mlp_shared" if fused else experts
    pieces = (Piece("router logits", "moe_router_logits", "torch (fp32 GEMM)"), _same("routing", "moe_route"),
              _same("dispatch", "moe_permute", "moe_unpermute"), Piece("experts", experts, decode_experts))
    shared = (Piece("shared experts", "moe_gated_activation", "moe_grouped_mlp_shared" if fused
                    else "moe_gated_activation"),) if moe.num_shared_experts else ()
    gate = (_same("shared expert gate", "torch (sigmoid)"),) if moe.shared_expert_gate else ()
    return pieces + shared + gate


def _dense(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    return (_same("gated activation", "moe_gated_activation"),)


def _attnres(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    return (_same("depth mix and the next input norm", "attnres_mix_norm"),)


def _hyper(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    return (_same("collapse (pre, Sinkhorn)", "mhc_pre"), _same("expand, mix", "mhc_post"))


# the final norm, by residual kind: the plain residual adds each sublayer output with the norm after it (the last
# with the final norm), AttnRes mixes the final state with it; hyper-connections collapse their streams first
FINAL_NORM = {None: ("last add, final norm", "add_rms_norm"), ATTNRES: ("final depth mix and norm", "attnres_mix_norm"),
              HYPER: ("final norm", "rms_norm")}


def _outside(cfg: ModelConfig, fmt: CacheFormat, cp: int) -> tuple[Piece, ...]:
    return _same(*FINAL_NORM[residual_kind(cfg)]), _same("lookup, LM head", "torch")


PIECES: dict[Group, Callable[[ModelConfig, CacheFormat, int], tuple[Piece, ...]]] = {
    (MIXER, "kda"): _kda,
    (MIXER, "gdn"): _gdn,
    (MIXER, MLA_DSA): _mla,
    (MIXER, MLA): _mla,
    (MIXER, GQA): _gqa,
    (RESIDUAL, ATTNRES): _attnres,
    (RESIDUAL, HYPER): _hyper,
    (FFN, "moe"): _moe,
    (FFN, "dense"): _dense,
    (OUTSIDE, EMBEDDING_AND_HEAD): _outside,
}


def pieces(group: Group, cfg: ModelConfig, fmt: CacheFormat, cp: int = 1) -> tuple[Piece, ...]:
    """What serves each piece of `group` under cache format `fmt` and `cp` context-parallel ranks."""
    table = PIECES.get(group)
    if table is None:
        return (Piece("all", REFERENCE_ONLY, REFERENCE_ONLY),)
    return tuple(Piece(p.name, _served_all(p.prefill), _served_all(p.decode)) for p in table(cfg, fmt, cp))


def _served_all(ops: str) -> str:
    return " + ".join(served(op) for op in ops.split(" + "))


def label(group: Group) -> str:
    return LABELS.get(group[1], group[1])
