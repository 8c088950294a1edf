"""Accuracy of the layered DSA quantization (docs/models.md) on the h200-slice config with random weights.

One DSA-MLA decoder layer of dayzero/configs/h200-slice (hidden 7168, 96 MLA heads, q_lora 1536, indexer 32 x 128,
top-k 2048) gets random_init weights on the GPU; hidden states x ~ N(0, 1) of 8K and 32K tokens go through
input_layernorm, q_a_proj + q_a_layernorm and the indexer / latent projections (references in torch, no kernels):
(a) recall@2048 of the MXFP8 indexer (q and k MXFP8, the prescribed scheme and the model's path over an MXFP8 cache;
    also k alone, with a BF16 query) against the BF16 indexer, over every query position >= 2048
    (below that every visible token is selected), queries chunked so no [chunk, HI, T] fp32 block exceeds ~1 GB;
(b) the relative error of the sparse MLA output o [T, H, 512] (absorbed q against the selected latent rows) with
    the FP8 latent cache vs the BF16 one, on evenly spaced query positions >= 2048: with the BF16 selection (the
    cache format alone) and end to end (MXFP8 selection + FP8 latent);
(c) cache bytes per token per MLA layer (and KDA bytes per sequence slot) for h200-slice and kimi-k3.1.

    python -m bench.bench_dsa_accuracy [--out DIR]
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import torch

from bench.common import parser, print_tables, write_result
from dayzero.model.block import DecoderLayer
from dayzero.model.caches import CacheFormat, cache_bytes
from dayzero.model.config import MLA, ModelConfig
from dayzero.model.random_init import random_tensor
from dayzero.plugins.indexer.reference import index_scores
from dayzero.plugins.paged_cache.formats import pack_fp8_latent, unpack_fp8_latent
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize

CONFIGS = Path(__file__).resolve().parent.parent / "dayzero" / "configs"
CONTEXTS = (8192, 32768)
SCORE_BLOCK_BYTES = 1 << 30
ATTENTION_QUERIES = 2048
ATTENTION_CHUNK = 64


def mla_layer(cfg: ModelConfig, device: str) -> DecoderLayer:
    """The first MLA layer of `cfg`: norms and attention weights (no feed-forward) from random_init, bf16."""
    index = cfg.layer_kinds.index(MLA)
    with torch.device("meta"):
        layer = DecoderLayer(cfg, index)
    for part in (layer.input_layernorm, layer.self_attn):
        part.to_empty(device=device)
    prefix = f"model.layers.{index}."
    with torch.no_grad():
        for module_name in ("input_layernorm", "self_attn"):
            for name, param in getattr(layer, module_name).named_parameters():
                full = f"{prefix}{module_name}.{name}"
                param.data = random_tensor(full, tuple(param.shape), cfg, 0, device).to(torch.bfloat16)
    return layer.eval()


def mxfp8_round_trip(x: torch.Tensor) -> torch.Tensor:
    q, scales = mxfp8_quantize(x)
    return mxfp8_dequantize(q, scales)


@torch.no_grad()
def projections(layer: DecoderLayer, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """x [T, D] -> indexer q [T, HI, DI], k [T, DI], w [T, HI], latent rows [T, 576] (bf16) and absorbed q."""
    attn = layer.self_attn
    h = layer.input_layernorm(x)
    q, c_q = attn._query(h)
    indexer = attn.indexer
    heads, dim = indexer.cfg.num_heads, indexer.cfg.head_dim
    c_kv, k_pe = attn.kv_a_proj_with_mqa(h).split([attn.cfg.kv_lora_rank, attn.cfg.qk_rope_head_dim], dim=-1)
    return {
        "q": indexer.wq_b(c_q).view(x.shape[0], heads, dim),
        "k": indexer.k_norm(indexer.wk(h)),
        "w": indexer.weights_proj(h).float() * heads ** -0.5,
        "rows": torch.cat([attn.kv_a_layernorm(c_kv), k_pe], dim=-1),
        "q_nope_pe": q,
    }


def absorbed_query(layer: DecoderLayer, q: torch.Tensor) -> torch.Tensor:
    """q [S, H, 192] -> [S, H, 576] fp32: q_nope W_UK | q_pe, as MLAttention.forward."""
    attn = layer.self_attn
    q_nope, q_pe = q.float().split([attn.cfg.qk_nope_head_dim, attn.cfg.qk_rope_head_dim], dim=-1)
    w_uk, _ = attn._absorbed_weights()
    return torch.cat([torch.einsum("thn,hnc->thc", q_nope, w_uk.float()), q_pe], dim=-1)


def causal_topk(scores: torch.Tensor, positions: torch.Tensor, topk: int) -> torch.Tensor:
    """scores [C, S] of queries at `positions` [C] (all >= topk) -> indices [C, topk] over s <= position."""
    visible = torch.arange(scores.shape[1], device=scores.device)[None, :] <= positions[:, None]
    return scores.masked_fill(~visible, float("-inf")).topk(topk, dim=-1).indices


def recall(chosen: torch.Tensor, truth: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Per query, the fraction of `truth` [C, K] found in `chosen` [C, K]."""
    hit = torch.zeros(truth.shape[0], num_keys, dtype=torch.bool, device=truth.device).scatter_(1, truth, True)
    return hit.gather(1, chosen).float().mean(dim=1)


@torch.no_grad()
def indexer_recall(p: dict, topk: int, sampled: torch.Tensor) -> tuple[dict, dict]:
    """Recall of the MXFP8 variants over all queries >= topk; the selections of the `sampled` query positions."""
    length = p["k"].shape[0]
    variants = {"bf16": (p["q"], p["k"]), "mxfp8_qk": (mxfp8_round_trip(p["q"]), mxfp8_round_trip(p["k"])),
                "mxfp8_k": (p["q"], mxfp8_round_trip(p["k"]))}
    chunk = max(16, SCORE_BLOCK_BYTES // (4 * p["q"].shape[1] * length))
    recalls = {name: [] for name in variants if name != "bf16"}
    selections = {"bf16": [], "mxfp8_qk": []}
    for start in range(topk, length, chunk):
        end = min(start + chunk, length)
        positions = torch.arange(start, end, device=p["k"].device)
        picked = {}
        for name, (q, k) in variants.items():
            scores = index_scores(q[start:end], k[:end], p["w"][start:end])
            picked[name] = causal_topk(scores, positions, topk)
        for name in recalls:
            recalls[name].append(recall(picked[name], picked["bf16"], end))
        keep = (sampled >= start) & (sampled < end)
        for name in selections:
            selections[name].append(picked[name][sampled[keep] - start])
    stats = {}
    for name, values in recalls.items():
        values = torch.cat(values)
        stats[f"recall_{name}_mean"] = round(values.mean().item(), 5)
        stats[f"recall_{name}_min"] = round(values.min().item(), 5)
    return stats, {name: torch.cat(s) for name, s in selections.items()}


@torch.no_grad()
def sparse_output(q_abs: torch.Tensor, rows: torch.Tensor, indices: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """o [S, H, 512] fp32 of queries q_abs [S, H, 576] over rows[indices[s]] [S, K, 576], in chunks of queries
    (sparse_mla.reference.latent_attention batched over queries that each have their own rows)."""
    out = []
    for start in range(0, q_abs.shape[0], ATTENTION_CHUNK):
        picked = rows[indices[start : start + ATTENTION_CHUNK]].float()
        scores = torch.einsum("shd,skd->shk", q_abs[start : start + ATTENTION_CHUNK], picked) * sm_scale
        out.append(torch.einsum("shk,skd->shd", scores.softmax(dim=-1), picked[..., :512]))
    return torch.cat(out)


def rel_err_stats(got: torch.Tensor, ref: torch.Tensor, prefix: str) -> dict:
    per_query = (got - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1).clamp_min(1e-30)
    total = ((got - ref).norm() / ref.norm()).item()
    return {f"{prefix}_rel_err": round(total, 6), f"{prefix}_rel_err_max": round(per_query.max().item(), 6)}


@torch.no_grad()
def run_context(layer: DecoderLayer, cfg: ModelConfig, length: int, device: str) -> dict:
    started = time.perf_counter()
    topk = cfg.indexer.topk
    x = torch.randn(length, cfg.hidden_size, device=device, generator=torch.Generator(device).manual_seed(length))
    p = projections(layer, x.to(torch.bfloat16))
    sampled = torch.linspace(topk, length - 1, min(ATTENTION_QUERIES, length - topk), device=device).long()
    row = {"context": length, "queries": length - topk}
    stats, selections = indexer_recall(p, topk, sampled)
    row.update(stats)
    q_abs = absorbed_query(layer, p["q_nope_pe"][sampled])
    sm_scale = cfg.mla.qk_head_dim ** -0.5
    rows_fp8 = unpack_fp8_latent(pack_fp8_latent(p["rows"], cfg.mla.qk_rope_head_dim), cfg.mla.qk_rope_head_dim)
    reference = sparse_output(q_abs, p["rows"].float(), selections["bf16"], sm_scale)
    row.update(rel_err_stats(sparse_output(q_abs, rows_fp8, selections["bf16"], sm_scale), reference, "fp8_latent"))
    row.update(rel_err_stats(sparse_output(q_abs, rows_fp8, selections["mxfp8_qk"], sm_scale), reference,
                             "end_to_end"))
    row["latent_rows_rel_err"] = round(((rows_fp8 - p["rows"].float()).norm() / p["rows"].float().norm()).item(), 6)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def capacity_rows() -> list[dict]:
    """Cache bytes per token per MLA layer, and per sequence slot summed over KDA layers, by cache format."""
    rows = []
    for name in ("h200-slice", "kimi-k3.1"):
        cfg = ModelConfig.from_hf(CONFIGS / name)
        num_mla = cfg.layer_kinds.count(MLA)
        for label, fmt in (("bf16", CacheFormat()), ("fp8 latent + mxfp8 index", CacheFormat(True, True))):
            sizes = cache_bytes(cfg, torch.bfloat16, fmt)
            rows.append({"config": name, "format": label, "mla_layers": num_mla,
                         "latent_B_per_token_layer": sizes.per_token_latent // max(num_mla, 1),
                         "index_B_per_token_layer": sizes.per_token_index // max(num_mla, 1),
                         "B_per_token_all_layers": sizes.per_token,
                         "kda_MB_per_slot": round(sizes.per_slot / 2 ** 20, 2)})
    return rows


ACCURACY_COLUMNS = {"context": "context", "queries": "queries", "recall_mxfp8_qk_mean": "recall, q+k MXFP8",
                    "recall_mxfp8_qk_min": "min", "recall_mxfp8_k_mean": "recall, k MXFP8",
                    "fp8_latent_rel_err": "FP8 latent: rel err of o", "end_to_end_rel_err": "end to end rel err"}


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    capacity = capacity_rows()
    cfg = ModelConfig.from_hf(CONFIGS / "h200-slice")
    layer = mla_layer(cfg, "cuda")
    results = []
    for length in CONTEXTS:
        try:
            results.append(run_context(layer, cfg, length, "cuda"))
        except Exception as exc:  # noqa: BLE001 - one failing context must not stop the other
            traceback.print_exc()
            results.append({"context": length, "error": f"{type(exc).__name__}: {exc}"})
        torch.cuda.empty_cache()
    tables = {"accuracy": {"title": "Layered DSA quantization against BF16, one h200-slice MLA layer",
                           "columns": ACCURACY_COLUMNS, "rows": results},
              "capacity": {"title": "Cache bytes", "columns": {key: key for key in capacity[0]}, "rows": capacity}}
    print_tables(write_result(args.out, "dsa_accuracy", tables, config="h200-slice"))


if __name__ == "__main__":
    main()
