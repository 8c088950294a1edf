"""MoE feed-forward at the K3.1 and Kimi-Linear shapes: dayzero's MoE layer against the matmul and copy ceilings, and
the grouped expert MLP (bf16 and MXFP4 weights) against torch._grouped_mm.

    python -m bench.bench_moe [--out DIR]

K3.1: D 7168, latent 3584 (down-projection, experts, RMSNorm, up-projection), 896 experts of 3072, top-16, 2 shared
experts, SiTU (beta 4, linear beta 25). Kimi-Linear: D 2304, 256 experts of 1024, top-8, 1 shared, SwiGLU. bf16,
random weights (K3.1's expert bank is 59 GB), the router in fp32.
Layer: `dayzero.model.moe.MoE` as a prefill step calls it (router GEMM kernel, route, permute, grouped MLP, unpermute,
shared experts), checked against the reference composition; 64 tokens timed as a CUDA-graph replay, 8192 eagerly.
TFLOP/s over the matmul FLOPs the layer needs (routed 6 D_e I a token-expert, shared 6 D I_shared a token, latent
4 D L a token) against the bf16 matmul ceiling; at 64 tokens the distinct experts' weight bytes a second against the
copy ceiling. Experts: the grouped MLP alone on a random top-8 routing, MXFP4 weights (4.25 bits, dequantized in the
Triton tiles), their bf16 dequantization through the Triton grouped GEMM, and torch._grouped_mm on the same bf16
weights. Target: the layer >= 50% of the matmul ceiling at 8192 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from bench.common import (
    attempt,
    bench_ms,
    copy_gbs,
    graph_replay_ms,
    matmul_tflops,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.model.config import MoEConfig
from dayzero.model.moe import MoE
from dayzero.plugins import moe as moe_ops
from dayzero.plugins.moe import reference
from dayzero.plugins.moe.grouped_mlp_paths import (
    grouped_mlp_grouped_mm,
    grouped_mlp_mxfp4_cuda,
    grouped_mlp_triton,
    grouped_mm_available,
)
from dayzero.plugins.quant.reference import MX_BLOCK, mxfp4_dequantize

DTYPE = torch.bfloat16
TOKENS = (64, 8192)
DECODE_TOKENS = 64
# packed nibbles plus one E8M0 byte per 32 weights
MXFP4_BYTES_PER_WEIGHT = 0.5 + 1 / MX_BLOCK
EXPERTS_TOP_K = 8


@dataclass(frozen=True)
class Shape:
    name: str
    dim: int
    experts: int
    inter: int
    top_k: int
    shared: int
    activation: str
    act_params: dict = field(default_factory=dict)
    latent: int | None = None


SHAPES = [
    Shape("K3.1", 7168, 896, 3072, 16, 2, "situ", {"beta": 4.0, "linear_beta": 25.0}, latent=3584),
    Shape("Kimi-Linear", 2304, 256, 1024, 8, 1, "silu"),
]


def random_layer(s: Shape) -> MoE:
    """The layer built on the GPU in bf16, each parameter filled in place (no fp32 copy of the expert bank)."""
    cfg = MoEConfig(s.experts, s.top_k, s.inter, num_shared_experts=s.shared, scaling=2.5, latent_size=s.latent)
    default = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        with torch.device("cuda"):
            layer = MoE(s.dim, cfg, 1e-5, s.activation, s.act_params)
    finally:
        torch.set_default_dtype(default)
    for name, p in layer.named_parameters():
        if p.dim() == 1:
            p.data.copy_(torch.randn_like(p) * 0.01 if "bias" in name else torch.rand_like(p) + 0.5)
            continue
        for chunk in p.data.view(-1, *p.shape[-2:]):
            chunk.normal_(0.0, p.shape[-1] ** -0.5)
    # the router stays fp32, as the checkpoint holds it
    layer.gate.weight.data = layer.gate.weight.data.float()
    return layer.eval()


def reference_layer(layer: MoE, x: torch.Tensor) -> torch.Tensor:
    """The layer's composition from the reference ops (a loop over the experts)."""
    cfg, act = layer.cfg, layer.act_params
    weights, ids = reference.route(reference.router_logits(x, layer.gate.weight), layer.gate.e_score_correction_bias,
                                   cfg.top_k, cfg.num_groups, cfg.topk_group, cfg.renormalize, cfg.scaling,
                                   cfg.router_activation)
    h = x if cfg.latent_size is None else layer.routed_expert_down_proj(x)
    y = reference.moe_experts(h, weights, ids, *layer.experts.weights(), layer.activation, **act)
    if cfg.latent_size is not None:
        y = layer.routed_expert_up_proj(layer.routed_expert_norm(y))
    shared = layer.shared_experts
    return y + reference.gated_mlp(x, shared.gate_proj.weight, shared.up_proj.weight, shared.down_proj.weight,
                                   layer.activation, **act)


def layer_row(s: Shape, layer: MoE, tokens: int, ceilings: dict) -> dict:
    x = torch.randn(tokens, s.dim, device="cuda", dtype=DTYPE)
    cfg = layer.cfg
    error = rel_err(layer(x), reference_layer(layer, x))
    if error > 3e-2:
        raise AssertionError(f"{s.name}: the layer differs from the reference composition: {error}")
    logits = moe_ops.router_logits(x, layer.gate.weight)
    weights, ids = moe_ops.route(logits, layer.gate.e_score_correction_bias, cfg.top_k, scaling=cfg.scaling)
    expert_in = x if cfg.latent_size is None else layer.routed_expert_down_proj(x)
    x_sorted, _, positions, offsets = moe_ops.permute(expert_in, ids, s.experts)
    bank = layer.experts.weights()
    row = {"case": f"{s.name} T{tokens}", "shape": s.name, "tokens": tokens, "rel_err": error,
           "layer_us": 1e3 * (graph_replay_ms([lambda: layer(x)]) if tokens <= DECODE_TOKENS else bench_ms(
               lambda: layer(x), rep_ms=1500)),
           "router_us": 1e3 * bench_ms(lambda: moe_ops.router_logits(x, layer.gate.weight)),
           "route_us": 1e3 * bench_ms(lambda: moe_ops.route(logits, layer.gate.e_score_correction_bias, cfg.top_k,
                                                            scaling=cfg.scaling)),
           "permute_us": 1e3 * bench_ms(lambda: moe_ops.permute(expert_in, ids, s.experts)),
           "experts_us": 1e3 * bench_ms(lambda: moe_ops.grouped_mlp(x_sorted, offsets, *bank, layer.activation,
                                                                    **layer.act_params)),
           "unpermute_us": 1e3 * bench_ms(lambda: moe_ops.unpermute(x_sorted, weights, positions))}
    expert_dim = s.latent or s.dim
    flops = tokens * (s.top_k * 6 * expert_dim * s.inter + 6 * s.dim * s.inter * s.shared
                      + (4 * s.dim * s.latent if s.latent else 0))
    row["tflops"] = flops / row["layer_us"] / 1e6
    row["matmul_pct"] = 100 * row["tflops"] / ceilings["bf16_matmul_tflops"]
    if tokens <= DECODE_TOKENS:
        weight_bytes = int(ids.unique().numel()) * 3 * expert_dim * s.inter * 2
        row["weight_copy_pct"] = 100 * weight_bytes / row["layer_us"] / 1e3 / ceilings["copy_gbs"]
    return row


def mxfp4_bank(experts: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random packed [E, N, K/2] and scales [E, N, K/32] with weights of about 1/sqrt(K) (E2M1's rms is ~2.9)."""
    packed = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, device="cuda")
    center = 127 - round(math.log2(2.9 * math.sqrt(k)))
    return packed, torch.randint(center - 1, center + 2, (experts, n, k // MX_BLOCK), dtype=torch.uint8, device="cuda")


def dequantized(packed: torch.Tensor, scales: torch.Tensor, at_once: int = 8) -> torch.Tensor:
    out = torch.empty(*packed.shape[:2], packed.shape[2] * 2, device="cuda", dtype=DTYPE)
    for start in range(0, packed.shape[0], at_once):
        end = start + at_once
        out[start:end] = mxfp4_dequantize(packed[start:end], scales[start:end], dtype=DTYPE)
    return out


def expert_banks(s: Shape) -> tuple[dict, dict]:
    """Random MXFP4 banks w1, w3, w2 (packed, scales) and their bf16 dequantization."""
    dim = s.latent or s.dim
    q = {"w1": mxfp4_bank(s.experts, s.inter, dim), "w3": mxfp4_bank(s.experts, s.inter, dim),
         "w2": mxfp4_bank(s.experts, dim, s.inter)}
    return q, {name: dequantized(*pair) for name, pair in q.items()}


def expert_row(s: Shape, q: dict, d: dict, tokens: int, ceilings: dict) -> dict:
    dim = s.latent or s.dim
    act = (s.activation, s.act_params.get("beta", 1.0), s.act_params.get("linear_beta"))
    ids = torch.rand(tokens, s.experts, device="cuda").topk(EXPERTS_TOP_K, dim=-1).indices
    x_sorted, _, _, offsets = reference.permute(torch.randn(tokens, dim, device="cuda", dtype=DTYPE), ids, s.experts)
    calls = {"mxfp4": lambda: grouped_mlp_mxfp4_cuda(x_sorted, offsets, *q["w1"], *q["w3"], *q["w2"], *act),
             "bf16": lambda: grouped_mlp_triton(x_sorted, offsets, d["w1"], d["w3"], d["w2"], *act)}
    if grouped_mm_available(x_sorted):
        calls["grouped_mm"] = lambda: grouped_mlp_grouped_mm(x_sorted, offsets, d["w1"], d["w3"], d["w2"], *act)
    expected = reference.grouped_mlp(x_sorted, offsets, d["w1"], d["w3"], d["w2"], s.activation, **s.act_params)
    row = {"case": f"{s.name} T{tokens}", "experts_touched": int(ids.unique().numel())}
    for name, call in calls.items():
        if rel_err(call(), expected) > 3e-2:
            raise AssertionError(f"{s.name} T{tokens}: the {name} grouped MLP differs from the reference")
        ms = graph_replay_ms([call]) if tokens <= DECODE_TOKENS else bench_ms(call, rep_ms=1500)
        row[f"{name}_us"] = ms * 1e3
    weights = row["experts_touched"] * 3 * dim * s.inter * MXFP4_BYTES_PER_WEIGHT
    row["mxfp4_copy_pct"] = 100 * weights / row["mxfp4_us"] / 1e3 / ceilings["copy_gbs"]
    return row


def tables(layers: list, experts: list) -> dict:
    return {
        "layer": {"title": "MoE layer, bf16", "rows": layers,
                  "columns": {"case": "case", "layer_us": "layer us", "tflops": "TFLOP/s", "matmul_pct": "% of matmul",
                              "weight_copy_pct": "expert weights, % of copy", "router_us": "router us",
                              "route_us": "route us", "permute_us": "permute us", "experts_us": "experts us",
                              "unpermute_us": "unpermute us"},
                  "plot": {"x": "case", "y": ["matmul_pct", "weight_copy_pct"], "ylabel": "% of the ceiling",
                           "hlines": [[50, "50% of matmul target"]]}},
        "experts": {"title": f"Grouped expert MLP, top-{EXPERTS_TOP_K}", "rows": experts,
                    "columns": {"case": "case", "mxfp4_us": "MXFP4 us", "mxfp4_copy_pct": "MXFP4 weights, % of copy",
                                "bf16_us": "bf16 Triton us", "grouped_mm_us": "torch._grouped_mm us"},
                    "plot": {"x": "case", "y": ["mxfp4_us", "bf16_us", "grouped_mm_us"], "ylabel": "us",
                             "log": True}},
    }



def shape_rows(s: Shape, ceilings: dict, layers: list, experts: list) -> None:
    """The layer's rows, then the grouped MLP's, each with its own weights (K3.1's do not fit twice)."""
    layer = random_layer(s)
    for tokens in TOKENS:
        attempt(layers, f"{s.name} T{tokens}", lambda t=tokens, m=layer: layer_row(s, m, t, ceilings))
    layer = None
    torch.cuda.empty_cache()
    q, d = expert_banks(s)
    for tokens in TOKENS:
        attempt(experts, f"{s.name} T{tokens}", lambda t=tokens, q=q, d=d: expert_row(s, q, d, t, ceilings))


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    ceilings = {"bf16_matmul_tflops": matmul_tflops(), "copy_gbs": copy_gbs()}
    layers, experts = [], []
    with torch.inference_mode():
        for s in SHAPES:
            shape_rows(s, ceilings, layers, experts)
            torch.cuda.empty_cache()
    print_tables(write_result(args.out, "moe", tables(layers, experts), ceilings=ceilings,
                              peer="torch._grouped_mm (CUTLASS)"))


if __name__ == "__main__":
    main()
