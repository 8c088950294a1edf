"""Grouped expert MLP with MXFP4 weights (W4A16, dequantized in the Triton tiles) vs bf16 weights on the GPU.

    PYTHONPATH=. python bench/bench_moe_mxfp4.py --json OUT.json [--sweep] [--top-k K]

Expert shapes of bench_moe.py: K3.1 (896 experts, D 3584 (the latent), I 3072, SiTU) and Kimi-Linear (256 experts,
D 2304, I 1024, SwiGLU); decode (64 tokens) and prefill (8192 tokens), top-k 8 unless --top-k says otherwise (0:
each shape's own). The MXFP4 weights are random bytes with scales that give the values about 1/sqrt(fan-in); the
bf16 weights are their dequantization (K3.1: ~15.7 + ~59 GB), so all paths compute the same product. Each path is
checked against reference.grouped_mlp on those weights first.

Timed, per case: the MXFP4 Triton path (grouped_mlp_mxfp4_cuda), the bf16 Triton path (grouped_mlp_triton) and
torch._grouped_mm (where available); triton.testing.do_bench medians with L2 cleared, and at decode also a CUDA-graph
replay (launch overhead gone). Reported with each time: the expert-weight bytes streamed (the distinct experts
touched: 3 D I x 2 B in bf16, x 0.53125 B in MXFP4, scales included), those bytes per second and their fraction of
the device-to-device copy ceiling (bytes read + written, as bench_moe.py counts it; weight streaming only reads).
--sweep also times the MXFP4 path under alternative tile configs (the launcher's `config` override, the same for
both GEMMs) to tune _mxfp4_config, and with `scaled_dot` (tl.dot_scaled instead of the kernel's integer decode).
JSON to OUT; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from bench.bench_moe import Shape, ceilings, graph_ms, rel_err, run_cases, timed
from dayzero.plugins.moe import reference
from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher
from dayzero.plugins.moe.grouped_mlp import (
    grouped_mlp_grouped_mm,
    grouped_mlp_mxfp4_cuda,
    grouped_mlp_triton,
    grouped_mm_available,
)
from dayzero.plugins.quant.reference import MX_BLOCK, mxfp4_dequantize

DEVICE = "cuda"
DTYPE = torch.bfloat16
TOKENS = (64, 8192)
DECODE_TOKENS = 64
# packed nibbles plus one E8M0 byte per 32 weights
MXFP4_BYTES_PER_WEIGHT = 0.5 + 1 / MX_BLOCK
DECODE_SWEEP = [dict(BLOCK_M=16, BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=s)
                for n, k, w, s in [(64, 64, 4, 3), (64, 128, 8, 3), (32, 128, 4, 3), (64, 128, 4, 4),
                                   (128, 128, 4, 4), (64, 256, 4, 3), (32, 256, 4, 4), (128, 64, 4, 6),
                                   (128, 256, 8, 3)]]
PREFILL_SWEEP = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=s)
                 for m, n, k, w, s in [(128, 64, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 8, 4),
                                       (64, 128, 64, 4, 4), (128, 64, 128, 8, 3), (64, 64, 128, 4, 4)]]
# the same tiles through tl.dot_scaled (Triton's own E2M1 upcast) instead of the integer decode
DECODE_SWEEP += [{**config, "scaled_dot": True} for config in DECODE_SWEEP[:4]]
PREFILL_SWEEP += [{**config, "scaled_dot": True} for config in PREFILL_SWEEP[:4]]


def mxfp4_bank(experts: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random packed [E, N, K/2] and scales [E, N, K/32]: E2M1 values have an rms of about 2.9, so a scale of
    1/(2.9 sqrt(K)) gives weights of about 1/sqrt(K), as bench_moe.py draws its bf16 ones."""
    packed = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, device=DEVICE)
    center = 127 - round(math.log2(2.9 * math.sqrt(k)))
    scales = torch.randint(center - 1, center + 2, (experts, n, k // MX_BLOCK), dtype=torch.uint8, device=DEVICE)
    return packed, scales


def dequantized(packed: torch.Tensor, scales: torch.Tensor, experts_at_once: int = 8) -> torch.Tensor:
    """The bf16 bank, a few experts at a time (the reference dequantization's temporaries are int64 and fp32)."""
    out = torch.empty(*packed.shape[:2], packed.shape[2] * 2, device=DEVICE, dtype=DTYPE)
    for start in range(0, packed.shape[0], experts_at_once):
        end = start + experts_at_once
        out[start:end] = mxfp4_dequantize(packed[start:end], scales[start:end], dtype=DTYPE)
    return out


def build_banks(s: Shape) -> dict:
    dim = s.latent or s.dim
    quantized = {"w1": mxfp4_bank(s.experts, s.inter, dim), "w3": mxfp4_bank(s.experts, s.inter, dim),
                 "w2": mxfp4_bank(s.experts, dim, s.inter)}
    dense = {name: dequantized(*pair) for name, pair in quantized.items()}
    return {"mxfp4": quantized, "bf16": dense}


def routed_rows(s: Shape, tokens: int, top_k: int):
    """x_sorted [T*k, D] and expert offsets of a random top-k routing (as the router picks: distinct experts)."""
    dim = s.latent or s.dim
    ids = torch.rand(tokens, s.experts, device=DEVICE).topk(top_k, dim=-1).indices
    x = torch.randn(tokens, dim, device=DEVICE, dtype=DTYPE)
    x_sorted, _, _, offsets = reference.permute(x, ids, s.experts)
    return x_sorted, offsets, int(ids.unique().numel())


def mxfp4_with_config(x_sorted, offsets, q: dict, act: tuple, config: dict) -> torch.Tensor:
    """grouped_mlp_mxfp4_cuda with one tile config forced on both GEMMs."""
    (w1, s1), (w3, s3), (w2, s2) = q["w1"], q["w3"], q["w2"]
    h = grouped_gemm_launcher(x_sorted, w1, offsets, w3, *act, b_scale=s1, b_up_scale=s3, config=config)
    return grouped_gemm_launcher(h, w2, offsets, b_scale=s2, config=config)


def paths(x_sorted, offsets, banks: dict, act: tuple) -> dict:
    q, d = banks["mxfp4"], banks["bf16"]
    calls = {"mxfp4": lambda: grouped_mlp_mxfp4_cuda(x_sorted, offsets, *q["w1"], *q["w3"], *q["w2"], *act),
             "triton_bf16": lambda: grouped_mlp_triton(x_sorted, offsets, d["w1"], d["w3"], d["w2"], *act)}
    if grouped_mm_available(x_sorted):
        calls["grouped_mm"] = lambda: grouped_mlp_grouped_mm(x_sorted, offsets, d["w1"], d["w3"], d["w2"], *act)
    return calls


# relative error allowed against the reference on the same (dequantized) weights: bf16 activations and outputs
TOLERANCE = 3e-2


def check(calls: dict, expected: torch.Tensor) -> dict:
    errors = {f"{name}_rel_err": rel_err(call(), expected) for name, call in calls.items()}
    if any(err > TOLERANCE for err in errors.values()):
        raise AssertionError(f"results differ from the reference: {errors}")
    return errors


def bandwidth(result: dict, s: Shape, touched: int, copy_gbs: float) -> None:
    """Weight bytes streamed per path, and each timing's bytes per second against the copy ceiling."""
    weights = touched * 3 * (s.latent or s.dim) * s.inter
    result["weight_bytes"] = {"mxfp4": int(weights * MXFP4_BYTES_PER_WEIGHT), "bf16": weights * 2}
    for key in [k for k in result if k.endswith("_us") and not k.startswith("sweep")]:
        nbytes = result["weight_bytes"]["mxfp4" if key.startswith("mxfp4") else "bf16"]
        result[key.replace("_us", "_weight_gbs")] = nbytes / result[key] / 1e3
        result[key.replace("_us", "_copy_fraction")] = nbytes / result[key] / 1e3 / copy_gbs


def sweep(result: dict, x_sorted, offsets, banks: dict, act: tuple, configs: list[dict], rep: int,
          expected: torch.Tensor) -> None:
    """Each config checked against the reference first; one that differs is recorded, not timed."""
    for config in configs:
        name = "sweep_" + "_".join(f"{k.replace('BLOCK_', '').replace('num_', '')}{v}" for k, v in config.items())
        call = lambda c=config: mxfp4_with_config(x_sorted, offsets, banks["mxfp4"], act, c)  # noqa: E731
        try:
            err = result[name + "_rel_err"] = rel_err(call(), expected)
        except Exception as exc:  # noqa: BLE001 (record and go on)
            result[name + "_us_error"] = repr(exc)
            continue
        if err <= TOLERANCE:
            timed(result, name + "_us", call, rep)


def run_case(s: Shape, banks: dict, tokens: int, top_k: int, ceiling: dict, with_sweep: bool) -> dict:
    x_sorted, offsets, touched = routed_rows(s, tokens, top_k)
    act = (s.activation, s.act_params.get("beta", 1.0), s.act_params.get("linear_beta"))
    calls = paths(x_sorted, offsets, banks, act)
    d = banks["bf16"]
    expected = reference.grouped_mlp(x_sorted, offsets, d["w1"], d["w3"], d["w2"], s.activation, **s.act_params)
    result = {"shape": s.name, "tokens": tokens, "top_k": top_k, "rows": x_sorted.shape[0],
              "experts_touched": touched, **check(calls, expected)}
    rep = 1500 if tokens > 1000 else 500
    for name, call in calls.items():
        timed(result, f"{name}_us", call, rep)
        if tokens <= DECODE_TOKENS:
            try:
                result[f"{name}_graph_us"] = graph_ms(call) * 1e3
            except Exception as exc:  # noqa: BLE001 (record and go on)
                result[f"{name}_graph_us_error"] = repr(exc)
    if with_sweep:
        sweep(result, x_sorted, offsets, banks, act, DECODE_SWEEP if tokens <= DECODE_TOKENS else PREFILL_SWEEP, rep,
              expected)
    bandwidth(result, s, touched, ceiling["copy_gbs"])
    result["routed_flops"] = x_sorted.shape[0] * 6 * (s.latent or s.dim) * s.inter
    result["mxfp4_tflops"] = result["routed_flops"] / result["mxfp4_us"] / 1e6 if "mxfp4_us" in result else None
    return result


def fmt(value, spec: str) -> str:
    width = int(spec.split(".")[0].rstrip("f%") or 1)
    return format(value, spec) if isinstance(value, (int, float)) else "-".rjust(width)


def print_table(cases: list[dict], ceiling: dict) -> None:
    print(f"\nceilings: copy {ceiling['copy_gbs']:.0f} GB/s (read + written), bf16 matmul "
          f"{ceiling['matmul_tflops']:.0f} TFLOP/s; us = do_bench median (graph replay at decode), % = weight bytes "
          "per second of the copy ceiling")
    print(f"{'shape':<12} {'T':>5} {'mxfp4 us':>9} {'%':>6} {'bf16 us':>9} {'%':>6} {'mm us':>9} {'%':>6} "
          f"{'x bf16':>7} {'x mm':>6}")
    for c in cases:
        if "error" in c:
            print(f"{c['shape']:<12} {c['tokens']:>5} ERROR {c['error'][:100]}")
            continue
        graph = "_graph" if c["tokens"] <= DECODE_TOKENS else ""
        t = {p: c.get(f"{p}{graph}_us", c.get(f"{p}_us")) for p in ("mxfp4", "triton_bf16", "grouped_mm")}
        frac = {p: c.get(f"{p}{graph}_copy_fraction", c.get(f"{p}_copy_fraction")) for p in t}
        speedup = {p: t[p] / t["mxfp4"] if t[p] and t["mxfp4"] else None for p in ("triton_bf16", "grouped_mm")}
        print(f"{c['shape']:<12} {c['tokens']:>5} {fmt(t['mxfp4'], '9.1f')} {fmt(frac['mxfp4'], '6.1%')} "
              f"{fmt(t['triton_bf16'], '9.1f')} {fmt(frac['triton_bf16'], '6.1%')} {fmt(t['grouped_mm'], '9.1f')} "
              f"{fmt(frac['grouped_mm'], '6.1%')} {fmt(speedup['triton_bf16'], '7.2f')} "
              f"{fmt(speedup['grouped_mm'], '6.2f')}")
        best = min(((k, v) for k, v in c.items() if k.startswith("sweep") and k.endswith("_us")),
                   key=lambda kv: kv[1], default=None)
        if best:
            print(f"{'':<18} best swept MXFP4 config: {best[0]} {best[1]:.1f} us")
    print("x bf16 / x mm: the bf16 Triton / torch._grouped_mm time over the MXFP4 time")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    parser.add_argument("--top-k", type=int, default=8, help="experts per token (0: each shape's own)")
    parser.add_argument("--sweep", action="store_true", help="also time the MXFP4 path under alternative tiles")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    ceiling = ceilings()
    torch.cuda.empty_cache()
    cases = run_cases(build_banks, lambda shape, banks, tokens: run_case(
        shape, banks, tokens, args.top_k or shape.top_k, ceiling, args.sweep), TOKENS)
    report = {"ceilings": ceiling, "cases": cases, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str))
    print_table(cases, ceiling)


if __name__ == "__main__":
    main()
