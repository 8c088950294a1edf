"""KDA state-pool decode: dayzero's `recurrent_kda_pool` and fused decode step against fla 0.6.0's fused recurrent
KDA and the copy ceiling.

    python -m bench.bench_kda_decode [--out DIR]

One token a row, K = V = 128, bf16 activations, fp32 state pool, H in {32, 96}. At B in {64, 256}: kernel time in
graphs of 64 calls (the profiler's), state bytes read + written (B*H*K*V*4*2) against a 1 GiB copy kernel timed the
same way, with each batch's slots a random permutation of the pool ("random") or random slots in ascending order
("slot order": how the runtime's scheduler hands a decode step its rows). At B = 1: CUDA-graph replay per call
(latency-bound). Every kernel is checked against the reference on the bench inputs first. The fused step also runs
the short conv, SiLU, L2 norms, gate and sigmoid(beta) that fla receives precomputed. Target: >= 85% of copy at
B >= 64 with rows in slot order.
"""

from __future__ import annotations

import math
import traceback

import torch

from bench.common import (
    L2_BYTES,
    copy_kernel_gbs,
    graph_replay_ms,
    kernel_ms,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.kda import reference as R
from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher, recurrent_kda_pool_launcher
from dayzero.plugins.short_conv.reference import short_conv_decode

K = V = 128
WIDTH = 4
LARGE = [(64, 32), (64, 96), (256, 32), (256, 96)]
SINGLE = [(1, 32), (1, 96)]
ORDERS = {"random": False, "slot order": True}


def load_fla():
    try:
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    except Exception as error:  # noqa: BLE001 - any import failure means no peer column
        print(f"fla is not importable ({type(error).__name__}: {error}): no peer column")
        return None
    return fused_recurrent_kda_fwd


def make_sets(B: int, H: int, sorted_rows: bool) -> list[dict]:
    """Input sets over distinct slots of one pool, enough to exceed the L2 four times a cycle."""
    rounds = max(1, min(128, math.ceil(4 * L2_BYTES / (B * H * K * V * 4))))
    slots = torch.randperm(rounds * B, device="cuda").to(torch.int32).view(rounds, B)
    if sorted_rows:
        slots = slots.sort(dim=1).values
    C = H * K
    return [dict(qkv=torch.randn(B, 1, 3, C, device="cuda", dtype=torch.bfloat16),
                 z=torch.randn(B, 1, H, K, device="cuda", dtype=torch.bfloat16),
                 beta_logits=torch.randn(B, 1, H, device="cuda", dtype=torch.bfloat16),
                 slots=slots[r].view(B, 1).contiguous(), num_accepted=torch.ones(B, device="cuda", dtype=torch.int32))
            for r in range(rounds)]


def make_params(H: int, num_slots: int) -> dict:
    C = H * K
    return dict(conv_weight=(torch.randn(3, C, WIDTH, device="cuda") / WIDTH).to(torch.bfloat16),
                conv_state=torch.randn(num_slots, 3, WIDTH - 1, C, device="cuda", dtype=torch.bfloat16),
                A_log=torch.randn(H, device="cuda") * 0.5, dt_bias=torch.randn(C, device="cuda"),
                state=torch.randn(num_slots, H, K, V, device="cuda") * 0.1)


def unfused_inputs(s: dict, p: dict) -> dict:
    """The recurrence's inputs (post-conv q, k, v, the gate, sigmoid(beta)) from the reference, on a copy of the conv
    windows: what fla and the pool kernel receive."""
    B, _, H, _ = s["z"].shape
    x = short_conv_decode(s["qkv"], p["conv_weight"], p["conv_state"].clone(), s["slots"], s["num_accepted"])
    q, k, v = (t.reshape(B, 1, H, K).contiguous() for t in x.unbind(2))
    g = R.kda_gate(s["z"], p["A_log"], p["dt_bias"]).contiguous()
    return dict(q=q, k=k, v=v, g=g, beta=torch.sigmoid(s["beta_logits"].float()).contiguous())


def pool(u: dict, s: dict, state: torch.Tensor):
    return recurrent_kda_pool_launcher(u["q"], u["k"], u["v"], u["g"], u["beta"], state, s["slots"],
                                       s["num_accepted"], use_qk_l2norm_in_kernel=True)


def fused(s: dict, p: dict, state: torch.Tensor, conv_state: torch.Tensor):
    return fused_kda_decode_launcher(s["qkv"], p["conv_weight"], conv_state, s["z"], p["A_log"], p["dt_bias"], None,
                                     s["beta_logits"], state, s["slots"], s["num_accepted"])


def peer(fla, u: dict, s: dict, state: torch.Tensor, out: torch.Tensor):
    """fla's fused recurrent KDA in place on the pool (ssm_state_indices)."""
    return fla(u["q"], u["k"], u["v"], u["g"], u["beta"], initial_state=state, inplace_final_state=True,
               ssm_state_indices=s["slots"], use_qk_l2norm_in_kernel=True, out=out)[0]


def check(name: str, o, o_ref, state, state_ref, slots) -> None:
    rows = slots.flatten().long()
    errors = rel_err(o, o_ref), rel_err(state[rows], state_ref[rows])
    # loose bounds that catch wrong kernels, not rounding
    if errors[0] > 3e-2 or errors[1] > 1e-2:
        raise AssertionError(f"{name} does not match the reference: out / state errors {errors}")


def calls(B: int, H: int, sorted_rows: bool, fla) -> dict:
    """Each implementation's calls over the input sets, after checking its first call against the reference."""
    sets = make_sets(B, H, sorted_rows)
    p = make_params(H, len(sets) * B)
    unfused = [unfused_inputs(s, p) for s in sets]
    s0, u0 = sets[0], unfused[0]
    pool_ref, fused_ref = p["state"].clone(), p["state"].clone()
    o_pool = R.recurrent_kda_pool(u0["q"], u0["k"], u0["v"], u0["g"], u0["beta"], pool_ref, s0["slots"],
                                  s0["num_accepted"], use_qk_l2norm_in_kernel=True)
    o_fused = R.fused_kda_decode_reference(s0["qkv"], p["conv_weight"], p["conv_state"].clone(), s0["z"], p["A_log"],
                                           p["dt_bias"], None, s0["beta_logits"], fused_ref, s0["slots"],
                                           s0["num_accepted"])
    state = p["state"].clone()
    check("recurrent_kda_pool", pool(u0, s0, state), o_pool, state, pool_ref, s0["slots"])
    state = p["state"].clone()
    check("fused decode step", fused(s0, p, state, p["conv_state"].clone()), o_fused, state, fused_ref, s0["slots"])
    out = {"pool": [lambda u=u, s=s: pool(u, s, p["state"]) for u, s in zip(unfused, sets)],
           "fused": [lambda s=s: fused(s, p, p["state"], p["conv_state"]) for s in sets]}
    if fla is not None:
        outs = [torch.empty_like(u["v"]) for u in unfused]
        state = p["state"].clone()
        check("fla", peer(fla, u0, s0, state, outs[0]), o_pool, state, pool_ref, s0["slots"])
        out["fla"] = [lambda u=u, s=s, o=o: peer(fla, u, s, p["state"], o) for u, s, o in zip(unfused, sets, outs)]
    return out


def large_row(B: int, H: int, order: str, fla, kernel_gbs: float) -> dict:
    row = {"case": f"B{B} H{H} {order}", "B": B, "H": H, "slot_order": order}
    state_bytes = B * H * K * V * 4 * 2
    for name, fns in calls(B, H, ORDERS[order], fla).items():
        row[f"{name}_kernel_us"] = kernel_ms(fns[:64]) * 1e3
        row[f"{name}_copy_pct"] = 100 * state_bytes / row[f"{name}_kernel_us"] / 1e3 / kernel_gbs
    return row


def single_row(B: int, H: int, fla) -> dict:
    row = {"case": f"B{B} H{H}", "B": B, "H": H}
    for name, fns in calls(B, H, False, fla).items():
        row[f"{name}_graph_us"] = graph_replay_ms(fns[:32]) * 1e3
    return row


def tables(large: list, single: list) -> dict:
    pct = {f"{name}_copy_pct": f"{label} % of copy" for name, label in
           (("pool", "pool kernel"), ("fused", "fused step"), ("fla", "fla"))}
    return {
        "batch": {"title": "KDA decode at B >= 64, kernel time in 64-call graphs", "rows": large,
                  "columns": {"case": "case", "pool_kernel_us": "pool kernel us", "pool_copy_pct": pct["pool_copy_pct"],
                              "fused_kernel_us": "fused step us", "fused_copy_pct": pct["fused_copy_pct"],
                              "fla_kernel_us": "fla us", "fla_copy_pct": pct["fla_copy_pct"]},
                  "plot": {"x": "case", "y": list(pct), "ylabel": "% of the copy kernel's GB/s",
                           "hlines": [[85, "85% target"], [100, "copy"]]}},
        "single": {"title": "KDA decode at B = 1, graph replay per call", "rows": single,
                   "columns": {"case": "case", "pool_graph_us": "pool kernel us", "fused_graph_us": "fused step us",
                               "fla_graph_us": "fla us"},
                   "plot": {"x": "case", "y": ["pool_graph_us", "fused_graph_us", "fla_graph_us"],
                            "ylabel": "us per call"}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    fla = load_fla()
    kernel_gbs = copy_kernel_gbs()
    large, single = [], []
    with torch.inference_mode():
        for (B, H), order in [(case, order) for case in LARGE for order in ORDERS]:
            try:
                large.append(large_row(B, H, order, fla, kernel_gbs))
            except Exception as error:  # noqa: BLE001 - one failing case must not stop the run
                traceback.print_exc()
                large.append({"case": f"B{B} H{H} {order}", "error": repr(error)[:300]})
            torch.cuda.empty_cache()
        single = [single_row(B, H, fla) for B, H in SINGLE]
    path = write_result(args.out, "kda_decode", tables(large, single), ceilings={"copy_kernel_gbs": kernel_gbs},
                        peer="fla 0.6.0 fused_recurrent_kda_fwd" if fla else None)
    print_tables(path)


if __name__ == "__main__":
    main()
