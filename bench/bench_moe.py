"""MoE layer benchmark on the GPU at the K3.1 and Kimi-Linear shapes, 64 and 8192 tokens, bf16.

    PYTHONPATH=. python bench/bench_moe.py --out DIR

K3.1: D 7168, latent 3584 (down-proj, experts, RMSNorm, up-proj), 896 experts of intermediate 3072, top-16,
2 shared experts of 3072 each, SiTU beta 4 / linear_beta 25. Kimi-Linear: D 2304, 256 experts of 1024, top-8,
1 shared, SwiGLU, no latent. Expert weights are allocated once per shape (K3.1: ~59 GB) and freed after.

Reported: the layer time (eager, and a CUDA-graph replay at 64 tokens), each stage's time, TFLOP/s over the matmul
FLOPs the layer needs (routed 2*3*D_e*I per token-expert + shared 2*3*D*I_shared per token + latent 2*2*D*L per
token; the router GEMM is listed but not counted) against the measured bf16 8192^3 matmul ceiling, the
expert-weight bandwidth (bytes of the distinct experts touched) against the copy ceiling, and routing + permutation
(router GEMM + route + permute, the layer's own kernels) as a share of the layer. Also timed for comparison: the
torch fp32 router GEMM the layer used before (`router_gemm_fp32_torch_us`), and the permutation's bytes per
second. Every stage is checked against the reference first. JSON to DIR/bench_moe.json; the table
is printed last. Times: triton.testing.do_bench medians (L2 cleared before each call).
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from bench.common import out_dir_argument
from dayzero.plugins.moe import LatentProjection, MoEWeights, RouterSpec, moe_layer, reference
from dayzero.plugins.moe.grouped_mlp import grouped_mlp_grouped_mm, grouped_mlp_triton, grouped_mm_available
from dayzero.plugins.moe.op import gated_mlp
from dayzero.plugins.moe.permute_kernel import permute_launcher, unpermute_launcher
from dayzero.plugins.moe.route_kernel import route_launcher
from dayzero.plugins.moe.router_gemm_kernel import router_logits_launcher

DEVICE = "cuda"
DTYPE = torch.bfloat16


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
TOKENS = (64, 8192)


def bench_ms(fn, rep=500) -> float:
    return do_bench(fn, warmup=100, rep=rep, return_mode="median")


def ceilings() -> dict:
    a = torch.randn(8192, 8192, device=DEVICE, dtype=DTYPE)
    b = torch.randn(8192, 8192, device=DEVICE, dtype=DTYPE)
    matmul_ms = bench_ms(lambda: a @ b)
    src = torch.randn(2**28, device=DEVICE, dtype=DTYPE)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    return {"matmul_tflops": 2 * 8192**3 / matmul_ms / 1e9, "copy_gbs": 2 * src.numel() * 2 / copy_ms / 1e6}


def _randn(*shape, fan_in: int) -> torch.Tensor:
    # filled in place, expert by expert, so no fp32 temporary of the whole bank exists
    t = torch.empty(*shape, device=DEVICE, dtype=DTYPE)
    for chunk in t.view(-1, *shape[-2:]) if t.dim() > 2 else [t]:
        chunk.normal_(0.0, fan_in ** -0.5)
    return t


def build_weights(s: Shape) -> MoEWeights:
    expert_dim = s.latent or s.dim
    latent = None
    if s.latent:
        latent = LatentProjection(_randn(s.latent, s.dim, fan_in=s.dim), _randn(s.dim, s.latent, fan_in=s.latent),
                                  torch.rand(s.latent, device=DEVICE, dtype=DTYPE) + 0.5, 1e-5)
    shared_inter = s.inter * s.shared
    shared = (_randn(shared_inter, s.dim, fan_in=s.dim), _randn(shared_inter, s.dim, fan_in=s.dim),
              _randn(s.dim, shared_inter, fan_in=shared_inter)) if s.shared else None
    # the router is kept in fp32, as the model's F.linear(x.float(), W.float()) computes it
    router = torch.randn(s.experts, s.dim, device=DEVICE) * s.dim ** -0.5
    return MoEWeights(router, torch.randn(s.experts, device=DEVICE) * 0.01,
                      _randn(s.experts, s.inter, expert_dim, fan_in=expert_dim),
                      _randn(s.experts, s.inter, expert_dim, fan_in=expert_dim),
                      _randn(s.experts, expert_dim, s.inter, fan_in=s.inter), shared, latent, s.activation,
                      s.act_params)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def reference_layer(x, w: MoEWeights, spec: RouterSpec) -> torch.Tensor:
    """The model's composition with the reference ops (per-expert loop)."""
    weights, ids = reference.route(F.linear(x.float(), w.router), w.correction_bias, spec.top_k, spec.num_groups,
                                   spec.topk_group, spec.renormalize, spec.scaling, spec.activation)
    h = x if w.latent is None else x @ w.latent.down.t()
    y = reference.moe_experts(h, weights, ids, w.w1, w.w3, w.w2, w.activation, **w.act_params)
    if w.latent is not None:
        yf = y.float()
        y = (yf * torch.rsqrt(yf.pow(2).mean(-1, keepdim=True) + w.latent.eps) * w.latent.norm_weight.float())
        y = y.to(x.dtype) @ w.latent.up.t()
    if w.shared is not None:
        y = y + reference.gated_mlp(x, *w.shared, w.activation, **w.act_params)
    return y


def flops(s: Shape, tokens: int) -> dict:
    expert_dim = s.latent or s.dim
    return {"routed": tokens * s.top_k * 6 * expert_dim * s.inter,
            "shared": tokens * 6 * s.dim * s.inter * s.shared,
            "latent": tokens * 4 * s.dim * s.latent if s.latent else 0,
            "router_fp32_not_counted": tokens * 2 * s.dim * s.experts}


def graph_ms(fn) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    return bench_ms(graph.replay)


def timed(result: dict, name: str, fn, rep=500) -> None:
    try:
        result[name] = bench_ms(fn, rep) * 1e3
    except Exception as exc:  # noqa: BLE001 (record and go on)
        result[f"{name}_error"] = repr(exc)


def stages(x, w: MoEWeights, spec: RouterSpec):
    """The layer's inputs at each stage, computed once (the timed calls then repeat each stage on them)."""
    logits = router_logits_launcher(x, w.router)
    weights, ids = route_launcher(logits, w.correction_bias, spec.top_k, scaling=spec.scaling)
    expert_in = x if w.latent is None else x @ w.latent.down.t()
    x_sorted, _, positions, offsets = permute_launcher(expert_in, ids, w.w1.shape[0])
    return logits, weights, ids, expert_in, x_sorted, positions, offsets


def check(x, w: MoEWeights, spec: RouterSpec, st) -> dict:
    logits, weights, ids, expert_in, x_sorted, positions, offsets = st
    ref_logits = reference.router_logits(x, w.router)
    ref_weights, ref_ids = reference.route(ref_logits, w.correction_bias, spec.top_k, scaling=spec.scaling)
    perm = reference.permute(expert_in, ids, w.w1.shape[0])
    act = (w.activation, w.act_params.get("beta", 1.0), w.act_params.get("linear_beta"))
    y_triton = grouped_mlp_triton(x_sorted, offsets, w.w1, w.w3, w.w2, *act)
    y_expected = reference.grouped_mlp(x_sorted, offsets, w.w1, w.w3, w.w2, w.activation, **w.act_params)
    errors = {"router_logits_rel_err": rel_err(logits, ref_logits),
              "route_ids_match": (ids == ref_ids).float().mean().item(),
              "route_weights_rel_err": rel_err(weights, ref_weights),
              "permute_exact": all(torch.equal(a, b) for a, b in zip(permute_launcher(expert_in, ids, w.w1.shape[0]),
                                                                   perm)),
              "grouped_mlp_triton_rel_err": rel_err(y_triton, y_expected),
              "unpermute_rel_err": rel_err(unpermute_launcher(y_expected, weights, positions),
                                           reference.unpermute(y_expected, weights, positions)),
              "layer_rel_err": rel_err(moe_layer(x, w, spec), reference_layer(x, w, spec))}
    if grouped_mm_available(x_sorted):
        errors["grouped_mlp_grouped_mm_rel_err"] = rel_err(
            grouped_mlp_grouped_mm(x_sorted, offsets, w.w1, w.w3, w.w2, *act), y_expected)
    bad = {k: v for k, v in errors.items() if (k.endswith("rel_err") and v > 3e-2) or v is False}
    # tensor-core fp32 accumulation is not round-to-nearest: 2.4e-5 at D 7168 (an fp32 GEMM's rounding is ~1e-6)
    if errors["router_logits_rel_err"] > 1e-4:
        bad["router_logits_rel_err"] = errors["router_logits_rel_err"]
    if bad or errors["route_ids_match"] < 0.99:
        raise AssertionError(f"results differ from the reference: {errors}")
    return errors


def run_case(s: Shape, w: MoEWeights, tokens: int, ceiling: dict) -> dict:
    spec = RouterSpec(s.top_k, scaling=2.5)
    x = torch.randn(tokens, s.dim, device=DEVICE, dtype=DTYPE)
    st = stages(x, w, spec)
    logits, weights, ids, expert_in, x_sorted, positions, offsets = st
    act = (w.activation, w.act_params.get("beta", 1.0), w.act_params.get("linear_beta"))
    result = {"shape": s.name, "tokens": tokens, "dtype": "bf16", **check(x, w, spec, st),
              "grouped_mm_available": grouped_mm_available(x_sorted)}
    rep = 1500 if tokens > 1000 else 500
    timed(result, "layer_us", lambda: moe_layer(x, w, spec), rep)
    if tokens <= 64:
        try:
            result["layer_graph_us"] = graph_ms(lambda: moe_layer(x, w, spec)) * 1e3
        except Exception as exc:  # noqa: BLE001
            result["layer_graph_us_error"] = repr(exc)
    timed(result, "router_gemm_us", lambda: router_logits_launcher(x, w.router))
    timed(result, "router_gemm_fp32_torch_us", lambda: F.linear(x.float(), w.router))
    timed(result, "route_us", lambda: route_launcher(logits, w.correction_bias, spec.top_k, scaling=spec.scaling))
    timed(result, "permute_us", lambda: permute_launcher(expert_in, ids, s.experts))
    timed(result, "unpermute_us", lambda: unpermute_launcher(x_sorted, weights, positions))
    if result["grouped_mm_available"]:
        timed(result, "experts_grouped_mm_us",
              lambda: grouped_mlp_grouped_mm(x_sorted, offsets, w.w1, w.w3, w.w2, *act), rep)
    timed(result, "experts_triton_us", lambda: grouped_mlp_triton(x_sorted, offsets, w.w1, w.w3, w.w2, *act), rep)
    if w.shared is not None:
        timed(result, "shared_us", lambda: gated_mlp(x, *w.shared, w.activation, **w.act_params))
    if w.latent is not None:
        timed(result, "latent_down_us", lambda: x @ w.latent.down.t())
    if "permute_us" in result:
        # token rows read once, written k times; ids read twice; index maps written; [blocks, E] counts (small)
        moved = tokens * expert_in.shape[1] * 2 * (1 + s.top_k) + tokens * s.top_k * 8 * 4
        result["permute_gbs"] = moved / result["permute_us"] / 1e3
    result.update(derived(s, tokens, ids, result, ceiling))
    return result


def derived(s: Shape, tokens: int, ids: torch.Tensor, r: dict, ceiling: dict) -> dict:
    counts = flops(s, tokens)
    needed = counts["routed"] + counts["shared"] + counts["latent"]
    expert_dim = s.latent or s.dim
    touched = int(ids.unique().numel())
    out = {"flops": counts, "needed_flops": needed, "experts_touched": touched,
           "expert_weight_bytes": touched * 3 * expert_dim * s.inter * 2}
    layer = r.get("layer_graph_us", r.get("layer_us"))
    if layer:
        out["layer_tflops"] = needed / layer / 1e6
        out["layer_matmul_fraction"] = out["layer_tflops"] / ceiling["matmul_tflops"]
        out["layer_weight_gbs"] = out["expert_weight_bytes"] / layer / 1e3
        out["layer_weight_copy_fraction"] = out["layer_weight_gbs"] / ceiling["copy_gbs"]
        routing = sum(r.get(k, 0.0) for k in ("router_gemm_us", "route_us", "permute_us"))
        out["routing_permute_share"] = routing / layer
        out["route_permute_share_without_router_gemm"] = (r.get("route_us", 0.0) + r.get("permute_us", 0.0)) / layer
    experts = r.get("experts_grouped_mm_us", r.get("experts_triton_us"))
    if experts:
        out["experts_tflops"] = counts["routed"] / experts / 1e6
        out["experts_weight_gbs"] = out["expert_weight_bytes"] / experts / 1e3
    return out


def fmt(value, spec) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return "-".rjust(int("".join(c for c in spec.split(".")[0] if c.isdigit()) or 1))


def print_table(cases, ceiling) -> None:
    print(f"\nceilings: bf16 8192^3 matmul {ceiling['matmul_tflops']:.0f} TFLOP/s, copy {ceiling['copy_gbs']:.0f} GB/s")
    print("layer us: eager (graph replay in brackets at 64 tokens); TFLOP/s over the needed matmul FLOPs, from the "
          "graph time when there is one; weights GB/s: distinct experts' bytes / layer time")
    print(f"{'shape':<12} {'T':>5} {'layer us':>10} {'(graph)':>9} {'TFLOP/s':>8} {'of mm':>6} {'wGB/s':>6} "
          f"{'route+perm':>10} {'router':>7} {'route':>6} {'perm':>6} {'experts mm':>10} {'triton':>9} "
          f"{'shared':>8} {'unperm':>7}")
    for c in cases:
        if "error" in c:
            print(f"{c['shape']:<12} {c['tokens']:>5} ERROR {c['error'][:100]}")
            continue
        print(f"{c['shape']:<12} {c['tokens']:>5} {fmt(c.get('layer_us'), '10.0f')} "
              f"{fmt(c.get('layer_graph_us'), '9.0f')} {fmt(c.get('layer_tflops'), '8.1f')} "
              f"{fmt(c.get('layer_matmul_fraction'), '6.1%')} {fmt(c.get('layer_weight_gbs'), '6.0f')} "
              f"{fmt(c.get('routing_permute_share'), '10.1%')} {fmt(c.get('router_gemm_us'), '7.0f')} "
              f"{fmt(c.get('route_us'), '6.0f')} {fmt(c.get('permute_us'), '6.0f')} "
              f"{fmt(c.get('experts_grouped_mm_us'), '10.0f')} "
              f"{fmt(c.get('experts_triton_us'), '9.0f')} {fmt(c.get('shared_us'), '8.0f')} "
              f"{fmt(c.get('unpermute_us'), '7.0f')}")
    print("route+perm = (router GEMM + route kernel + permute) / layer, each in us after it; experts mm / triton: "
          "the grouped expert MLP through torch._grouped_mm / the Triton grouped GEMM (us)")


def run_cases(build, run, token_counts=TOKENS) -> list[dict]:
    """Each shape's weights built once (build(shape)), then a case per token count (run(shape, weights, tokens)); a
    failure is recorded in its case rather than raised: one failing case must not stop the rest."""
    cases = []
    for shape in SHAPES:
        try:
            weights = build(shape)
        except Exception as exc:  # noqa: BLE001
            cases += [{"shape": shape.name, "tokens": t, "error": f"weights: {exc!r}"} for t in token_counts]
            continue
        for tokens in token_counts:
            try:
                cases.append(run(shape, weights, tokens))
            except Exception as exc:  # noqa: BLE001
                cases.append({"shape": shape.name, "tokens": tokens, "error": repr(exc),
                              "traceback": traceback.format_exc()})
            torch.cuda.empty_cache()
        del weights
        torch.cuda.empty_cache()
    return cases


def main() -> None:
    out = out_dir_argument(__doc__.splitlines()[0])
    ceiling = ceilings()
    torch.cuda.empty_cache()
    cases = run_cases(build_weights, lambda shape, weights, tokens: run_case(shape, weights, tokens, ceiling))
    report = {"ceilings": ceiling, "cases": cases, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__}
    (out / "bench_moe.json").write_text(json.dumps(report, indent=1, default=str))
    print_table(cases, ceiling)


if __name__ == "__main__":
    main()
