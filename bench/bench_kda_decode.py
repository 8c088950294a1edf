"""KDA state-pool decode on the GPU: our recurrent_kda_pool and fused_kda_decode vs fla 0.6.0's fused recurrent KDA.

    PYTHONPATH=. python bench/bench_kda_decode.py --out DIR

Cases: B in {1, 64, 256} x H in {32, 96}, K = V = 128, L = 1, bf16 activations, fp32 state pool, slots a random
permutation (`--slot-order`: also random sets with rows in slot order, or the pool in order). Every kernel is
checked against the reference on the bench inputs before it is timed. Times are triton.testing.do_bench medians of
eager calls (Python launch overhead included, as a caller sees it); at B = 1 a CUDA-graph replay of the step is
timed as well (launch overhead removed), and at B >= 64 the kernels' own durations (the profiler's, no launch
gap: bench/common.kernel_ms) against a copy kernel timed the same way, 1 GiB and the step's own state bytes.
Bandwidth counts the state bytes read + written (B*H*K*V*4*2) against the measured device copy ceiling. Inputs
rotate over enough slot sets to exceed the L2
cache. Writes DIR/kda_decode.json and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path

import torch
import triton

from bench.common import copy_calls, graph_replay_ms, kernel_ms, replay_kernel_ms
from dayzero.plugins.kda import reference as R
from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher, recurrent_kda_pool_launcher

DEVICE = "cuda"
K = V = 128
WIDTH = 4
L2_BYTES = 60 * 2**20
CASES = [(b, h) for b in (1, 64, 256) for h in (32, 96)]
# (block_v, num_warps, stream[, maxnreg]): stream = evict-first state reads and streaming (.cs) state writes;
# maxnreg caps the registers a thread (236 uncapped at BV 32, one warp: 8 programs an SM; 192: 10, 44 B spilled)
# BV 128 (run s: slower): a program reads whole 512-byte state rows, 64 state registers a thread. One warp: the sums
# over K stay inside the warp (shuffles, no barrier; the 4-warp build has 21 bar.sync a step), many programs per SM
POOL_CONFIGS = [(16, 1, False), (32, 1, False), (16, 2, False), (32, 2, False), (32, 4, False), (64, 4, False),
                (64, 8, False), (64, 4, True), (32, 1, False, 192), (32, 1, False, 168)]
FUSED_CONFIGS = [(16, 8, False), (32, 4, False), (32, 8, False), (32, 16, False), (64, 8, False), (32, 4, True),
                 (32, 8, True), (64, 8, True), (128, 8, True)]
# (block_v, num_warps, stream, maxnreg, stages, programs per SM): the pipelined one-token step
# (pipelined_pool_kernel.py), programs per SM as their registers allow (offline sm_90 builds: BV 16 on one warp 159
# registers at 2 stages, 219 at 3; BV 32 on two warps 168 / 222; BV 64 on four warps 161)
PIPELINED_CONFIGS = [(16, 1, False, None, 2, 12), (16, 1, False, None, 3, 9), (32, 2, False, None, 2, 6),
                     (32, 2, False, None, 3, 4), (32, 1, False, None, 2, 8), (64, 4, False, None, 2, 3)]
# --quick: the one-tile kernel on 16- and 32-wide blocks (register caps lost or changed nothing: 192 and 168 in run
# aa, 224 in run cf), the pipelined step (the default at B = 1; its other configs lost everywhere in run cd) and
# the fused default
QUICK_POOL_CONFIGS = [(16, 1, False), (32, 1, False), (16, 1, False, None, 2, 12)]
QUICK_FUSED_CONFIGS = [(32, 4, False)]
# --focus: after the token vectors' loads moved ahead of the slot lookup (commit 224d1a1), the one-tile kernel's
# neighbours at B >= 64 (streaming hints, a register cap for a ninth program an SM) and the fused step's
FOCUS_POOL_CONFIGS = [(32, 1, False), (32, 1, True), (32, 1, False, 224), (32, 1, False, 200)]
FOCUS_FUSED_CONFIGS = [(32, 4, False), (32, 4, True), (32, 8, False), (64, 8, False), (16, 4, False)]


def config_name(kind: str, config) -> str:
    capped = f"_r{config[3]}" if len(config) > 3 and config[3] else ""
    pipelined = f"_pipelined_s{config[4]}_{config[5]}sm" if len(config) > 4 else ""
    return f"ours_{kind}_bv{config[0]}_w{config[1]}{'_stream' if config[2] else ''}{capped}{pipelined}"


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def bench(fn) -> float:
    """Median milliseconds of one call."""
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def ceilings() -> dict:
    x = torch.randn(2**28 // 2, device=DEVICE)  # 512 MiB fp32
    y = torch.empty_like(x)
    copy_ms = bench(lambda: y.copy_(x))
    copy_kernel = kernel_ms([lambda: torch.add(x, 0, out=y)])
    a, b = (torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    mm_ms = bench(lambda: a @ b)
    return {"copy_GBps": 2 * x.numel() * 4 / copy_ms / 1e6, "copy_kernel_GBps": 2 * x.numel() * 4 / copy_kernel / 1e6,
            "bf16_matmul_TFLOPs": 2 * 8192**3 / mm_ms / 1e9}


def load_fla():
    try:
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    except Exception as error:  # noqa: BLE001 - any import failure means no peer column
        print(f"fla is not importable ({type(error).__name__}: {error}); the peer column is skipped")
        return None
    return fused_recurrent_kda_fwd


SLOT_ORDERS = ("random", "sorted", "pool")


def set_slots(rounds: int, B: int, order: str) -> torch.Tensor:
    """[rounds, B] distinct slots of a pool of rounds * B: a random permutation ("random": rows in no relation to
    where their states lie, as after many requests came and went), the same random sets with each one's rows in
    ascending slot order ("sorted"), or in pool order ("pool": a fresh pool)."""
    if order == "pool":
        return torch.arange(rounds * B, device=DEVICE, dtype=torch.int32).view(rounds, B)
    slots = torch.randperm(rounds * B, device=DEVICE).to(torch.int32).view(rounds, B)
    return slots.sort(dim=1).values if order == "sorted" else slots


# input sets rotated at least: 1, as before run mc, where two sets alternating gave the same bimodal kernel times at
# B256 H96 as one set replayed back to back; graphs of 64 calls ended them (run mf, bench/common.replay_kernel_ms)
MIN_SETS = 1


def make_sets(B: int, H: int, slot_order: str = "random", min_sets: int = MIN_SETS) -> tuple[int, list[dict]]:
    """Enough independent input sets (distinct slots of one pool) to exceed L2 four times over, at least min_sets."""
    set_bytes = B * H * K * V * 4
    rounds = max(min_sets, min(128, math.ceil(4 * L2_BYTES / set_bytes)))
    perm = set_slots(rounds, B, slot_order).flatten()
    C = H * K
    sets = []
    for r in range(rounds):
        qkv = torch.randn(B, 1, 3, C, device=DEVICE, dtype=torch.bfloat16)
        z = torch.randn(B, 1, H, K, device=DEVICE, dtype=torch.bfloat16)
        beta_logits = torch.randn(B, 1, H, device=DEVICE, dtype=torch.bfloat16)
        sets.append(dict(qkv=qkv, z=z, beta_logits=beta_logits, slots=perm[r * B : (r + 1) * B].view(B, 1).clone(),
                         num_accepted=torch.ones(B, device=DEVICE, dtype=torch.int32)))
    return rounds, sets


def make_params(H: int, num_slots: int) -> dict:
    C = H * K
    return dict(
        conv_weight=(torch.randn(3, C, WIDTH, device=DEVICE) / WIDTH).to(torch.bfloat16),
        conv_state=torch.randn(num_slots, 3, WIDTH - 1, C, device=DEVICE, dtype=torch.bfloat16),
        A_log=torch.randn(H, device=DEVICE) * 0.5, dt_bias=torch.randn(C, device=DEVICE),
        state=torch.randn(num_slots, H, K, V, device=DEVICE) * 0.1,
    )


def unfused_inputs(s: dict, p: dict) -> dict:
    """The recurrence's inputs for one set (post-conv q, k, v in bf16, the gate, sigmoid(beta)) from the reference,
    computed on a copy of the conv windows."""
    from dayzero.plugins.short_conv.reference import short_conv_decode

    B, _, H, _ = s["z"].shape
    x = short_conv_decode(s["qkv"], p["conv_weight"], p["conv_state"].clone(), s["slots"], s["num_accepted"])
    q, k, v = (t.reshape(B, 1, H, K).contiguous() for t in x.unbind(2))
    g = R.kda_gate(s["z"], p["A_log"], p["dt_bias"]).contiguous()
    return dict(q=q, k=k, v=v, g=g, beta=torch.sigmoid(s["beta_logits"].float()).contiguous())


def pool_options(config) -> dict:
    """A POOL_CONFIGS tuple as the pool launcher's keyword arguments (a short tuple: no cap, the one-tile kernel)."""
    defaults = (None, 0, 12)
    maxnreg, stages, per_sm = (*config[3:], *defaults[len(config) - 3:])
    return dict(block_v=config[0], num_warps=config[1], stream=config[2], maxnreg=maxnreg, stages=stages,
                programs_per_sm=per_sm)


def run_pool(u: dict, s: dict, state: torch.Tensor, config=(32, 4, False)):
    return recurrent_kda_pool_launcher(u["q"], u["k"], u["v"], u["g"], u["beta"], state, s["slots"],
                                       s["num_accepted"], use_qk_l2norm_in_kernel=True, **pool_options(config))


def run_fused(s: dict, p: dict, state: torch.Tensor, conv_state: torch.Tensor, config=(32, 8, False)):
    return fused_kda_decode_launcher(s["qkv"], p["conv_weight"], conv_state, s["z"], p["A_log"], p["dt_bias"], None,
                                     s["beta_logits"], state, s["slots"], s["num_accepted"], block_v=config[0],
                                     num_warps=config[1], stream=config[2])


def run_fla(fla, u: dict, s: dict, p: dict, state: torch.Tensor, out: torch.Tensor, gate_in_kernel: bool):
    """fla's fused recurrent KDA in place on the pool (ssm_state_indices), optionally with its in-kernel gate."""
    if gate_in_kernel:
        g, beta, extra = s["z"], s["beta_logits"], dict(A_log=p["A_log"], dt_bias=p["dt_bias"],
                                                          use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    else:
        g, beta, extra = u["g"], u["beta"], {}
    return fla(u["q"], u["k"], u["v"], g, beta, initial_state=state, inplace_final_state=True,
               ssm_state_indices=s["slots"], use_qk_l2norm_in_kernel=True, out=out, **extra)[0]


def check(name: str, o: torch.Tensor, o_ref: torch.Tensor, state: torch.Tensor, state_ref: torch.Tensor,
          slots: torch.Tensor) -> dict:
    rows = slots.flatten().long()
    errors = {"out_rel_err": rel_err(o, o_ref), "state_rel_err": rel_err(state[rows], state_ref[rows])}
    # loose bounds that catch wrong kernels, not rounding (the exact errors go into the JSON)
    if errors["out_rel_err"] > 3e-2 or errors["state_rel_err"] > 1e-2:
        raise AssertionError(f"{name} does not match the reference: {errors}")
    return errors


def graph_ms(steps) -> float:
    """Milliseconds per step of a CUDA-graph replay of `steps` (callables, one per input set)."""
    return graph_replay_ms(steps, timer=bench)


def rotating(fns):
    calls = iter(range(10**12))
    return lambda: fns[next(calls) % len(fns)]()


def bench_case(B: int, H: int, fla, copy_GBps: float, mode: str = "all", slot_order: str = "random",
               copy_kernel_GBps: float = float("nan"), min_sets: int = MIN_SETS) -> dict:
    rounds, sets = make_sets(B, H, slot_order, min_sets)
    p = make_params(H, rounds * B)
    state_bytes = B * H * K * V * 4 * 2
    record = {"B": B, "H": H, "K": K, "V": V, "L": 1, "dtype": "bf16", "rotation_sets": rounds,
              "slot_order": slot_order, "state_bytes": state_bytes, "kernels": {}}
    unfused = [unfused_inputs(s, p) for s in sets]

    def add(name: str, ms: float, extra: dict | None = None):
        gbps = state_bytes / ms / 1e6
        record["kernels"][name] = {"ms": ms, "GBps": gbps, "frac_copy": gbps / copy_GBps, **(extra or {})}

    # a copy kernel moving the step's state bytes (half read, half written), timed the same way: what the GPU gives
    # a call of this size, start-up and tail included, where the 1 GiB copy is the asymptote
    same_size_copy_ms = kernel_ms(copy_calls(state_bytes)[:64]) if B >= 64 else float("nan")
    record["same_size_copy_kernel_ms"] = same_size_copy_ms

    def kernel_time(steps, extra: dict) -> None:
        # B >= 64: the kernels' own durations (no launch gap) against a copy kernel timed the same way
        if B >= 64:
            replays = replay_kernel_ms(steps[:64])
            extra["kernel_ms"] = replays[len(replays) // 2]
            extra["kernel_ms_min_max"] = [replays[0], replays[-1]]
            extra["kernel_frac_copy"] = state_bytes / extra["kernel_ms"] / 1e6 / copy_kernel_GBps
            extra["kernel_frac_same_size_copy"] = same_size_copy_ms / extra["kernel_ms"]

    def attempt(name: str, fn):
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - one failing kernel must not stop the run
            record["kernels"][name] = {"error": f"{type(error).__name__}: {error}"}
            traceback.print_exc()

    s0, u0 = sets[0], unfused[0]
    # timing mutates the pools: every check starts from these pristine copies
    state0, conv0 = p["state"].clone(), p["conv_state"].clone()
    conv_ref = conv0.clone()
    pool_after = state0.clone()
    o_pool_ref = R.recurrent_kda_pool(u0["q"], u0["k"], u0["v"], u0["g"], u0["beta"], pool_after, s0["slots"],
                                      s0["num_accepted"], use_qk_l2norm_in_kernel=True)
    fused_state_ref = state0.clone()
    o_fused_ref = R.fused_kda_decode_reference(s0["qkv"], p["conv_weight"], conv_ref, s0["z"], p["A_log"],
                                               p["dt_bias"], None, s0["beta_logits"], fused_state_ref, s0["slots"],
                                               s0["num_accepted"])

    def ours_pool(config):
        st = state0.clone()
        errors = check("recurrent_kda_pool", run_pool(u0, s0, st, config), o_pool_ref, st, pool_after, s0["slots"])
        ms = bench(rotating([lambda u=u, s=s: run_pool(u, s, p["state"], config) for u, s in zip(unfused, sets)]))
        extra = {**pool_options(config), **errors}
        kernel_time([lambda u=u, s=s: run_pool(u, s, p["state"], config) for u, s in zip(unfused, sets)], extra)
        if B == 1:
            extra["graph_ms"] = graph_ms([lambda u=u, s=s: run_pool(u, s, p["state"], config)
                                          for u, s in list(zip(unfused, sets))[:32]])
        add(config_name("pool", config), ms, extra)

    def ours_fused(config):
        st, cs = state0.clone(), conv0.clone()
        o = run_fused(s0, p, st, cs, config)
        errors = check("fused_kda_decode", o, o_fused_ref, st, fused_state_ref, s0["slots"])
        rows = s0["slots"].flatten().long()
        if not torch.equal(cs[rows], conv_ref[rows]):
            raise AssertionError("fused_kda_decode wrote different conv windows than the reference")
        ms = bench(rotating([lambda s=s: run_fused(s, p, p["state"], p["conv_state"], config) for s in sets]))
        extra = {"block_v": config[0], "num_warps": config[1], "stream": config[2], **errors}
        kernel_time([lambda s=s: run_fused(s, p, p["state"], p["conv_state"], config) for s in sets], extra)
        if B == 1:
            extra["graph_ms"] = graph_ms([lambda s=s: run_fused(s, p, p["state"], p["conv_state"], config)
                                          for s in sets[:32]])
        add(config_name("fused", config), ms, extra)

    def peer(gate_in_kernel: bool):
        outs = [torch.empty_like(u["v"]) for u in unfused]
        st = state0.clone()
        o = run_fla(fla, u0, s0, p, st, outs[0], gate_in_kernel)
        errors = check("fla", o, o_pool_ref, st, pool_after, s0["slots"])
        ms = bench(rotating([lambda u=u, s=s, o=o: run_fla(fla, u, s, p, p["state"], o, gate_in_kernel)
                             for u, s, o in zip(unfused, sets, outs)]))
        extra = dict(errors)
        kernel_time([lambda u=u, s=s, o=o: run_fla(fla, u, s, p, p["state"], o, gate_in_kernel)
                     for u, s, o in zip(unfused, sets, outs)], extra)
        if B == 1:
            extra["graph_ms"] = graph_ms([lambda u=u, s=s, o=o: run_fla(fla, u, s, p, p["state"], o, gate_in_kernel)
                                          for u, s, o in list(zip(unfused, sets, outs))[:32]])
        add("fla_gate_in_kernel" if gate_in_kernel else "fla", ms, extra)

    pool_configs, fused_configs = {"quick": (QUICK_POOL_CONFIGS, QUICK_FUSED_CONFIGS),
                                   "focus": (FOCUS_POOL_CONFIGS, FOCUS_FUSED_CONFIGS)}.get(mode, (POOL_CONFIGS,
                                                                                               FUSED_CONFIGS))
    for config in pool_configs:
        attempt(config_name("pool", config), lambda c=config: ours_pool(c))
    for config in fused_configs:
        attempt(config_name("fused", config), lambda c=config: ours_fused(c))
    if fla is not None:
        attempt("fla", lambda: peer(False))
        if mode == "all":
            attempt("fla_gate_in_kernel", lambda: peer(True))
    return record


def summary_rows(record: dict) -> list[list[str]]:
    kernels = record["kernels"]
    fla_ms = kernels.get("fla", {}).get("ms")
    fla_graph = kernels.get("fla", {}).get("graph_ms")
    rows = []
    for name, r in kernels.items():
        shape = f"B{record['B']} H{record['H']}"
        if "error" in r:
            rows.append([shape, name, "ERROR", r["error"][:60], "", "", "", "", ""])
            continue
        speedup = f"{fla_ms / r['ms']:.2f}x" if fla_ms else "-"
        graph = f"{r['graph_ms'] * 1e3:.1f}" if "graph_ms" in r else "-"
        graph_speedup = f"{fla_graph / r['graph_ms']:.2f}x" if fla_graph and "graph_ms" in r else "-"
        kernel = "-"
        if "kernel_ms" in r:
            low, high = (1e3 * t for t in r["kernel_ms_min_max"])
            kernel = (f"{r['kernel_ms'] * 1e3:.1f} [{low:.0f}-{high:.0f}] ({r['kernel_frac_copy']:.1%}; "
                      f"{r['kernel_frac_same_size_copy']:.1%})")
        rows.append([shape, name, f"{r['ms'] * 1e3:.1f}", f"{r['GBps']:.0f}", f"{r['frac_copy']:.0%}",
                     f"{fla_ms * 1e3:.1f}" if fla_ms else "-", speedup, f"{graph} ({graph_speedup})", kernel])
    return rows


def print_table(rows: list[list[str]]) -> None:
    header = ["shape", "kernel", "us", "GB/s", "of copy", "fla us", "speedup", "graph us (vs fla graph)",
              "kernel us median [min-max] (of copy kernel; of same-size copy kernel)"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="the default launch configs and fla only")
    parser.add_argument("--focus", action="store_true", help="B >= 64 only: FOCUS_*_CONFIGS and fla")
    parser.add_argument("--slot-order", choices=SLOT_ORDERS, default="random",
                        help="each set's slots: a random permutation of the pool, random sets with rows in ascending "
                             "slot order, or the pool in order")
    parser.add_argument("--cases", type=lambda text: [tuple(int(x) for x in c.split("x")) for c in text.split(",")],
                        default=None, help="only these BxH cases, e.g. 64x32,64x96")
    parser.add_argument("--min-sets", type=int, default=MIN_SETS,
                        help="input sets rotated at least (1: one set replayed back to back)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    started = time.time()
    with torch.inference_mode():
        ceiling = ceilings()
        fla = load_fla()
        records = []
        result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                  "ceilings": ceiling, "fla": fla is not None, "cases": records}
        mode = next((m for m in ("quick", "focus") if getattr(args, m)), "all")
        cases = args.cases or ([(b, h) for b, h in CASES if b >= 64] if args.focus else CASES)
        for B, H in cases:
            try:
                records.append(bench_case(B, H, fla, ceiling["copy_GBps"], mode, args.slot_order,
                                          ceiling["copy_kernel_GBps"], args.min_sets))
            except Exception as error:  # noqa: BLE001 - one failing case must not stop the run
                traceback.print_exc()
                records.append({"B": B, "H": H, "kernels": {"case": {"error": f"{type(error).__name__}: {error}"}}})
            torch.cuda.empty_cache()
            # after every case: a run cut short by its time slot keeps what it measured
            result["seconds"] = time.time() - started
            (args.out / "kda_decode.json").write_text(json.dumps(result, indent=2))
    print(f"\nceilings: copy {ceiling['copy_GBps']:.0f} GB/s (read+write), bf16 matmul "
          f"{ceiling['bf16_matmul_TFLOPs']:.0f} TFLOP/s; fla {'present' if fla else 'MISSING (no peer column)'}; "
          f"{result['seconds']:.0f} s")
    print_table([row for record in records for row in summary_rows(record)])


if __name__ == "__main__":
    main()
