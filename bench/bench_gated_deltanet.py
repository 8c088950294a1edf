"""Gated DeltaNet (Qwen3-Next's linear attention) on the KDA kernels against fla 0.6.0's gated delta rule.

    python -m bench.bench_gated_deltanet [--out DIR] [--no-reference-check]

Qwen3-Next-80B's shapes: 16 key heads, 32 value heads, K = V = 128, one log-space decay a value head, bf16 q/k/v/beta,
fp32 gate and state, L2 norm of q and k in the kernel. Prefill: 8192 tokens as 1 and as 8 sequences (varlen), zero
initial state, final states returned; dayzero's `chunk_kda` launcher against fla's `chunk_gated_delta_rule`, eager
(do_bench) and in CUDA-graph replay. Decode: one token a row at B 1 / 16 / 64 over an fp32 state pool; dayzero's
`recurrent_kda_pool` and the whole step (`fused_gdn_decode`, three launches: it also runs the short conv, SiLU, gate
and sigmoid(b) that fla receives precomputed) against fla's fused recurrent gated delta rule, in place on the pool
where fla takes state indices, else from and to a gathered state batch (`fla_in_place`); graph replay per call and
kernel time in 64-call graphs, each over input sets that outgrow the L2. fla gets q and k on the key heads where it
computes grouped value heads right, else (`fla_qk_repeated`) q and k repeated to the value heads outside the timed
call. Every kernel is checked first: dayzero against the fp32 reference and against fla. ratio = fla time / dayzero
time (> 1: dayzero faster). The `intra tiles` table times the per-head intra-chunk kernel (gdn_intra_kernel.py) alone
at 1 x 8192 tokens for other (K step, warps) choices than the module's, to keep its choice.
"""

from __future__ import annotations

import inspect
import math

import torch

from bench.bench_kda_prefill import stage_times
from bench.common import (
    L2_BYTES,
    attempt,
    bench_ms,
    graph_replay_ms,
    kernel_ms,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.kda import gdn_intra_kernel as intra
from dayzero.plugins.kda import reference as R
from dayzero.plugins.kda.chunk_common import CHUNK, chunk_tables
from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher
from dayzero.plugins.kda.gdn_decode_kernel import fused_gdn_decode_launcher
from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

HK, HV, K, V = 16, 32, 128, 128
WIDTH = 4
PREFILL = [(1, 8192), (8, 1024)]  # (sequences, tokens each)
DECODE_BATCHES = [1, 16, 64]
# loose bounds that catch wrong kernels, not rounding (bf16 inputs)
MAX_ERR = 3e-2
# dayzero's per-head-gate stages: the profiler's kernel names that hold each
STAGES = {"tables_ms": "_chunk_tables", "intra_ms": "gdn_intra", "wy_ms": "gdn_wy", "state_ms": "_state_kernel"}
# (K columns a step, warps) of gdn_intra_kernel, the module's choice first
INTRA_TILES = [(intra.INTRA_BLOCK_K, intra.INTRA_WARPS), (32, 4), (64, 8), (32, 8), (64, 2), (32, 2)]


def gate_params(gen):
    return torch.randn(HV, device="cuda", generator=gen) * 0.5, torch.randn(HV, device="cuda", generator=gen)


def prefill_inputs(num_seqs: int, length: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    T = num_seqs * length
    q, k = (torch.randn(T, HK, K, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(T, HV, V, device="cuda", generator=gen, dtype=torch.bfloat16)
    g = R.gdn_gate(torch.randn(T, HV, device="cuda", generator=gen), *gate_params(gen))
    beta = torch.rand(T, HV, device="cuda", generator=gen).to(torch.bfloat16)
    cu = torch.arange(0, T + 1, length, device="cuda", dtype=torch.int32)
    return q, k, v, g, beta, cu


def ours_prefill(q, k, v, g, beta, cu, initial_state=None):
    return chunk_kda_launcher(q, k, v, g, beta, K ** -0.5, initial_state, cu, True, True)


def fla_prefill_fn(fla_chunk, q, k, v, g, beta, cu, repeat: bool):
    """fla's chunk call on these inputs (q, k repeated to the value heads first when `repeat`)."""
    if repeat:
        q, k = (x.repeat_interleave(HV // HK, dim=1) for x in (q, k))
    cu_long = cu.long()
    return lambda: fla_chunk(q[None], k[None], v[None], g[None], beta[None], scale=K ** -0.5, output_final_state=True,
                             use_qk_l2norm_in_kernel=True, cu_seqlens=cu_long)


def reference_check() -> dict:
    """dayzero's prefill and decode against the fp32 reference on small inputs with initial states."""
    lengths = [300, 77, 1]
    q, k, v, g, beta, _ = prefill_inputs(1, sum(lengths))
    cu = torch.tensor([0, *lengths], device="cuda").cumsum(0).int()
    S0 = torch.randn(len(lengths), HV, K, V, device="cuda")
    ro, rs = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=S0, output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o, s = ours_prefill(q, k, v, g, beta, cu, S0)
    check = {"prefill_err_o": rel_err(o.float(), ro[0]), "prefill_err_state": rel_err(s, rs)}
    sets = decode_sets(4, 2)
    params = decode_params(len(sets) * 4)
    s0, u0 = sets[0], unfused(sets[0], params)
    pool_ref, fused_ref, conv_ref = params["state"].clone(), params["state"].clone(), params["conv_state"].clone()
    o_pool = R.recurrent_kda_pool(*(u0[n] for n in ("q", "k", "v", "g", "beta")), pool_ref, s0["slots"],
                                  s0["num_accepted"], use_qk_l2norm_in_kernel=True)
    o_fused = R.fused_gdn_decode_reference(s0["qkv"], params["conv_weight"], conv_ref, s0["a"], params["A_log"],
                                           params["dt_bias"], s0["b"], fused_ref, s0["slots"], s0["num_accepted"])
    state = params["state"].clone()
    check["pool_err_o"] = rel_err(pool(u0, s0, state), o_pool)
    check["pool_err_state"] = rel_err(state, pool_ref)
    state, conv = params["state"].clone(), params["conv_state"].clone()
    check["fused_err_o"] = rel_err(fused(s0, params, state, conv), o_fused)
    check["fused_err_state"] = rel_err(state, fused_ref)
    bad = {name: err for name, err in check.items() if not err < MAX_ERR}
    if bad:
        raise AssertionError(f"dayzero does not match the reference: {bad}")
    return check


def prefill_row(num_seqs: int, length: int, fla_chunk) -> dict:
    q, k, v, g, beta, cu = prefill_inputs(num_seqs, length)
    row = {"case": f"{num_seqs}x{length}", "sequences": num_seqs, "tokens": num_seqs * length}
    run = lambda: ours_prefill(q, k, v, g, beta, cu)  # noqa: E731
    o, s = run()
    row["dayzero_ms"] = bench_ms(run)
    row["dayzero_graph_ms"] = graph_replay_ms([run])
    row.update(stage_times(run, STAGES))
    if fla_chunk is None:
        return row
    for repeat in (False, True):
        try:
            peer = fla_prefill_fn(fla_chunk, q, k, v, g, beta, cu, repeat)
            fo, fs = peer()
            errors = rel_err(o.float(), fo[0].float()), rel_err(s, fs.float())
        except Exception as error:  # noqa: BLE001 - fla may reject grouped heads: then repeat them
            row["fla_error"] = f"{type(error).__name__}: {error}"[:200]
            continue
        if max(errors) < MAX_ERR:
            row.pop("fla_error", None)
            break
        row["fla_error"] = f"fla differs: o / state errors {errors}"
    else:
        return row
    row["fla_qk_repeated"] = repeat
    row["err_o_vs_fla"], row["err_state_vs_fla"] = errors
    row["fla_ms"] = bench_ms(peer)
    row["fla_graph_ms"] = graph_replay_ms([peer])
    row["ratio"] = row["fla_ms"] / row["dayzero_ms"]
    row["ratio_graph"] = row["fla_graph_ms"] / row["dayzero_graph_ms"]
    return row


def intra_tile_rows() -> list[dict]:
    """gdn_intra_kernel alone (both programs of every chunk and head) at each INTRA_TILES choice, 1 x 8192 tokens;
    its outputs checked against the module's choice."""
    q, k, _, g, beta, cu = prefill_inputs(1, 8192)
    T = q.shape[0]
    chunks = T // CHUNK + 1
    _, bounds = chunk_tables(cu, chunks)

    def outputs():
        return ([torch.empty(T, HV, CHUNK, device=q.device, dtype=torch.bfloat16) for _ in range(2)]
                + [torch.empty(T, HV, device=q.device) for _ in range(3)] + [torch.empty(chunks, HV, device=q.device)])

    def call(out, block_k, warps):
        return lambda: intra.gdn_intra_kernel[(2, chunks, HV)](
            q, k, g, beta, bounds, *out, K ** -0.5, H=HV, HK=HK, K=K, BK=block_k, USE_L2NORM=True, num_warps=warps,
            num_stages=1)

    expected = outputs()
    call(expected, *INTRA_TILES[0])()
    # X and Aqk hold their blocks on and below the diagonal only: compare the lower triangles (one sequence)
    lower = torch.ones(CHUNK, CHUNK, device=q.device).tril().bool()[torch.arange(T, device=q.device) % CHUNK][:, None]
    masked = lambda out: [torch.where(lower, x.float(), 0.0) for x in out[:2]] + out[2:]  # noqa: E731
    rows = []
    for block_k, warps in INTRA_TILES:
        def row(block_k=block_k, warps=warps) -> dict:
            out = outputs()
            fn = call(out, block_k, warps)
            fn()
            err = max(rel_err(a, b) for a, b in zip(masked(out), masked(expected)))
            return {"case": f"BK {block_k}, {warps} warps", "kernel_us": kernel_ms([fn]) * 1e3, "err": err}

        attempt(rows, f"BK {block_k} w{warps}", row)
    return rows


def decode_sets(batch: int, rounds: int | None = None) -> list[dict]:
    """Input sets over distinct slots of one pool, enough to exceed the L2 four times a cycle."""
    if rounds is None:
        rounds = max(1, min(128, math.ceil(4 * L2_BYTES / (batch * HV * K * V * 4))))
    slots = torch.randperm(rounds * batch, device="cuda").to(torch.int32).view(rounds, batch).sort(dim=1).values
    channels = 2 * HK * K + HV * V
    return [dict(qkv=torch.randn(batch, 1, channels, device="cuda", dtype=torch.bfloat16),
                 a=torch.randn(batch, 1, HV, device="cuda", dtype=torch.bfloat16),
                 b=torch.randn(batch, 1, HV, device="cuda", dtype=torch.bfloat16),
                 slots=slots[r].view(batch, 1).contiguous(),
                 num_accepted=torch.ones(batch, device="cuda", dtype=torch.int32)) for r in range(rounds)]


def decode_params(num_slots: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(1)
    channels = 2 * HK * K + HV * V
    A_log, dt_bias = gate_params(gen)
    return dict(conv_weight=(torch.randn(1, channels, WIDTH, device="cuda", generator=gen) / WIDTH).bfloat16(),
                conv_state=torch.randn(num_slots, 1, WIDTH - 1, channels, device="cuda", generator=gen).bfloat16(),
                A_log=A_log, dt_bias=dt_bias,
                state=torch.randn(num_slots, HV, K, V, device="cuda", generator=gen) * 0.1)


def unfused(s: dict, p: dict) -> dict:
    """The recurrence's inputs (post-conv q, k, v, the gate, sigmoid(b)) from the reference, on a copy of the conv
    windows: what fla and the pool kernel receive."""
    from dayzero.plugins.short_conv.reference import short_conv_decode

    batch = s["qkv"].shape[0]
    x = short_conv_decode(s["qkv"][:, :, None], p["conv_weight"], p["conv_state"].clone(), s["slots"],
                          s["num_accepted"])[:, :, 0]
    q, k, v = x.split([HK * K, HK * K, HV * V], dim=-1)
    return dict(q=q.reshape(batch, 1, HK, K).contiguous(), k=k.reshape(batch, 1, HK, K).contiguous(),
                v=v.reshape(batch, 1, HV, V).contiguous(), g=R.gdn_gate(s["a"], p["A_log"], p["dt_bias"]).contiguous(),
                beta=torch.sigmoid(s["b"].float()).to(torch.bfloat16).contiguous())


def pool(u: dict, s: dict, state: torch.Tensor):
    return recurrent_kda_pool_launcher(u["q"], u["k"], u["v"], u["g"], u["beta"], state, s["slots"],
                                       s["num_accepted"], use_qk_l2norm_in_kernel=True)


def fused(s: dict, p: dict, state: torch.Tensor, conv_state: torch.Tensor):
    return fused_gdn_decode_launcher(s["qkv"], p["conv_weight"], conv_state, s["a"], p["A_log"], p["dt_bias"], s["b"],
                                     state, s["slots"], s["num_accepted"])


def fla_decode_call(fla_recurrent, u: dict, s: dict, state: torch.Tensor, repeat: bool, in_place: bool):
    """fla's fused recurrent call: in place on the pool through state indices, or from a gathered batch of states to
    a new final-state batch (the same bytes)."""
    q, k = u["q"], u["k"]
    if repeat:
        q, k = (x.repeat_interleave(HV // HK, dim=2) for x in (q, k))
    common = dict(g=u["g"], beta=u["beta"], scale=K ** -0.5, use_qk_l2norm_in_kernel=True)
    if in_place:
        kwargs = dict(initial_state=state, inplace_final_state=True, ssm_state_indices=s["slots"])
        return lambda: fla_recurrent(q, k, u["v"], **common, **kwargs)
    batch_states = state[s["slots"][:, 0].long()]
    return lambda: fla_recurrent(q, k, u["v"], **common, initial_state=batch_states, output_final_state=True)


def fla_decode_calls(fla_recurrent, unfused_sets, sets, params, expected_o, expected_state):
    """fla's calls over the input sets in the first form that matches the reference: in place on the pool before a
    gathered batch, q and k on the key heads before repeated. Returns (form, calls)."""
    rows = sets[0]["slots"][:, 0].long()
    places = (True, False) if takes_state_indices(fla_recurrent) else (False,)
    for in_place, repeat in ((p, r) for p in places for r in (False, True)):
        state = params["state"].clone()
        try:
            o, final = fla_decode_call(fla_recurrent, unfused_sets[0], sets[0], state, repeat, in_place)()
            final = state[rows] if in_place else final
            errors = rel_err(o, expected_o), rel_err(final, expected_state[rows])
        except Exception:  # noqa: BLE001 - a form fla does not take: try the next
            continue
        if max(errors) < MAX_ERR:
            form = {"fla_qk_repeated": repeat, "fla_in_place": in_place}
            return form, [fla_decode_call(fla_recurrent, u, s, params["state"], repeat, in_place)
                          for u, s in zip(unfused_sets, sets)]
    raise AssertionError("fla's fused recurrent gated delta rule matches the reference in no form")


def decode_row(batch: int, fla_recurrent) -> dict:
    sets = decode_sets(batch)
    params = decode_params(len(sets) * batch)
    unfused_sets = [unfused(s, params) for s in sets]
    row = {"case": f"B{batch}", "B": batch}
    calls = {"pool": [lambda u=u, s=s: pool(u, s, params["state"]) for u, s in zip(unfused_sets, sets)],
             "fused": [lambda s=s: fused(s, params, params["state"], params["conv_state"]) for s in sets]}
    if fla_recurrent is not None:
        expected_state = params["state"].clone()
        u0, s0 = unfused_sets[0], sets[0]
        expected_o = R.recurrent_kda_pool(*(u0[n] for n in ("q", "k", "v", "g", "beta")), expected_state, s0["slots"],
                                          s0["num_accepted"], use_qk_l2norm_in_kernel=True)
        try:
            form, calls["fla"] = fla_decode_calls(fla_recurrent, unfused_sets, sets, params, expected_o,
                                                  expected_state)
            row.update(form)
        except AssertionError as error:
            row["fla_error"] = str(error)
    for name, fns in calls.items():
        row[f"{name}_graph_us"] = graph_replay_ms(fns[:32]) * 1e3
        row[f"{name}_kernel_us"] = kernel_ms(fns[:64]) * 1e3
    if "fla" in calls:
        row["ratio_graph"] = row["fla_graph_us"] / row["pool_graph_us"]
        row["ratio_kernel"] = row["fla_kernel_us"] / row["pool_kernel_us"]
    return row


def load_fla():
    """fla's chunk function and its fused recurrent forward (the one that takes state indices where fla has them)."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.gated_delta_rule import fused_recurrent as recurrent
    except Exception as error:  # noqa: BLE001 - any import failure means no peer column
        print(f"fla is not importable ({type(error).__name__}: {error}): no peer column")
        return None, None
    forward = getattr(recurrent, "fused_recurrent_gated_delta_rule_fwd", recurrent.fused_recurrent_gated_delta_rule)
    return chunk_gated_delta_rule, forward


def takes_state_indices(fla_recurrent) -> bool:
    return {"ssm_state_indices", "inplace_final_state"} <= set(inspect.signature(fla_recurrent).parameters)


PREFILL_COLUMNS = {"case": "sequences x tokens", "dayzero_ms": "dayzero eager ms", "fla_ms": "fla eager ms",
                   "ratio": "fla / dayzero (eager)", "dayzero_graph_ms": "dayzero graph ms",
                   "fla_graph_ms": "fla graph ms", "ratio_graph": "fla / dayzero (graph)", "tables_ms": "chunk tables",
                   "intra_ms": "intra (G, Aqk, solve)", "wy_ms": "WY", "state_ms": "state"}
DECODE_COLUMNS = {"case": "batch", "pool_graph_us": "pool graph us", "fused_graph_us": "fused step graph us",
                  "fla_graph_us": "fla graph us", "ratio_graph": "fla / pool (graph)",
                  "pool_kernel_us": "pool kernel us", "fused_kernel_us": "fused step kernel us",
                  "fla_kernel_us": "fla kernel us", "ratio_kernel": "fla / pool (kernel)"}


def tables(prefill: list, intra_tiles: list, decode: list) -> dict:
    return {
        "prefill": {"title": "Gated DeltaNet chunked prefill, 8192 tokens, Hk 16, Hv 32, K = V = 128", "rows": prefill,
                    "columns": PREFILL_COLUMNS,
                    "plot": {"x": "case", "y": ["dayzero_graph_ms", "fla_graph_ms"], "ylabel": "ms (graph replay)"}},
        "intra_tiles": {"title": "gdn_intra_kernel tiles, 1 x 8192 tokens, kernel time in graphs", "rows": intra_tiles,
                        "columns": {"case": "K step, warps", "kernel_us": "kernel us",
                                    "err": "outputs vs the module's choice"}},
        "decode": {"title": "Gated DeltaNet decode, one token a row, Hk 16, Hv 32, K = V = 128", "rows": decode,
                   "columns": DECODE_COLUMNS,
                   "plot": {"x": "case", "y": ["pool_kernel_us", "fused_kernel_us", "fla_kernel_us"],
                            "ylabel": "us per call (kernel time)"}},
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--no-reference-check", action="store_true", help="skip the fp32 reference checks")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    fla_chunk, fla_recurrent = load_fla()
    check = {} if args.no_reference_check else reference_check()
    prefill, decode = [], []
    with torch.inference_mode():
        for num_seqs, length in PREFILL:
            attempt(prefill, f"{num_seqs}x{length}", lambda n=num_seqs, t=length: prefill_row(n, t, fla_chunk))
        intra_tiles = intra_tile_rows()
        for batch in DECODE_BATCHES:
            attempt(decode, f"B{batch}", lambda b=batch: decode_row(b, fla_recurrent))
    path = write_result(args.out, "gated_deltanet", tables(prefill, intra_tiles, decode), reference_check=check,
                        peer="fla 0.6.0 chunk_gated_delta_rule / fused_recurrent_gated_delta_rule")
    print_tables(path)


if __name__ == "__main__":
    main()
