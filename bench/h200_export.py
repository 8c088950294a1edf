"""Export benchmark on the H200: the h200-slice config through `dayzero export` (AOTInductor, CUDA), then the loaded
engine against the eager reference.

    . bench/h200.sh && python bench/h200_export.py --out DIR [--layers 4 --experts 16 --vocab 32768 | --full]

Steps (each timed, each failure recorded and the rest still run where they can):
1. a random bf16 checkpoint of the config (reused when /tmp already holds one of the same config): the full slice
   is 22 B params (45 GB), too slow to write, compile and load in one 400 s call, so by default the layer count,
   routed experts and vocabulary are cut (full width otherwise: 7168 hidden, 96 KDA/MLA heads, DSA indexer 32x128,
   top-2048, latent MoE); the config used is printed and stored;
2. cold export (load + lay out, trace, AOTInductor compile of prefill and decode, cache store), then a second
   identical export, which must be a cache hit;
3. engine load (both packages, `run_single_threaded=True`);
4. varlen prefill + decode steps through the loaded engine and through the eager reference model (the checkpoint
   loaded without pre-layout), logits compared by relative error (norm) per step;
5. one decode step timed (CUDA events, median) for the engine and the eager model, then the engine's decode captured
   in a CUDA graph, replayed, checked against a direct call from the same cache state and timed.
JSON to DIR/h200_export.json; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path

import torch

from bench.common import median_ms, rel_err, table, write_results
from dayzero.export.preload import reexec_with_libstdcxx

ROOT = Path(__file__).resolve().parent.parent
SLICE = ROOT / "configs" / "h200-slice" / "config.json"
PROMPT_LENS = (300, 129, 64, 517)
DECODE_STEPS = 4
# the device the engine runs on (a module constant so that the CPU steps can be smoke-tested off the GPU)
DEVICE = "cuda"


def _config(args) -> dict:
    data = json.loads(SLICE.read_text())
    if args.full:
        return data
    text = data["text_config"]
    attn = text["linear_attn_config"]
    layers = args.layers
    mla = [i for i in attn["full_attn_layers"] if i <= layers] or [layers]
    attn["full_attn_layers"] = mla
    attn["kda_layers"] = [i for i in range(1, layers + 1) if i not in mla]
    text["num_hidden_layers"] = layers
    text["num_experts"] = args.experts
    text["vocab_size"] = args.vocab
    data["_comment"] = f"h200-slice cut to {layers} layers, {args.experts} experts, vocab {args.vocab} (bench)"
    return data


def _checkpoint(config: dict, work: Path) -> tuple[Path, float]:
    from dayzero.model.checkpoint_writer import write_random_checkpoint

    ckpt = work / "ckpt"
    text = json.dumps(config, indent=2, sort_keys=True)
    if (ckpt / "config.json").exists() and (ckpt / "config.json").read_text() == text:
        return ckpt, 0.0
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(text)
    start = time.perf_counter()
    write_random_checkpoint(work / "config.json", ckpt, torch.bfloat16, overwrite=True)
    return ckpt, time.perf_counter() - start


def _metas(lengths, pages: int, device):
    from dayzero.model.step import contiguous_meta

    prefill = contiguous_meta([0] * len(lengths), list(lengths), pages, device=device)
    decodes = [contiguous_meta([n + s for n in lengths], [1] * len(lengths), pages, decode=True, device=device)
               for s in range(DECODE_STEPS)]
    return prefill, decodes


def _run(engine, caches, prompt_ids, step_ids, prefill_meta, decode_metas) -> list[torch.Tensor]:
    out = [engine.prefill(prompt_ids, prefill_meta, caches)]
    for ids, meta in zip(step_ids, decode_metas):
        out.append(engine.decode(ids, meta, caches))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


class Bench:
    def __init__(self, args):
        self.args = args
        self.result: dict = {"errors": {}}
        self.start = time.perf_counter()

    def stage(self, name: str, fn):
        """Run fn(), record its seconds (or its error); -> its value or None."""
        if time.perf_counter() - self.start > self.args.budget:
            self.result["errors"][name] = "skipped: time budget spent"
            return None
        start = time.perf_counter()
        try:
            value = fn()
        except Exception as err:  # noqa: BLE001 - a bench records every failure and goes on
            self.result["errors"][name] = f"{type(err).__name__}: {err}"[:2000]
            traceback.print_exc()
            return None
        self.result[f"{name}_s"] = round(time.perf_counter() - start, 3)
        print(f"[bench] {name}: {self.result[f'{name}_s']:.1f} s", flush=True)
        return value


def _inputs(manifest, device):
    gen = torch.Generator().manual_seed(0)
    vocab = manifest.vocab_size
    prompt = torch.randint(0, vocab, (sum(PROMPT_LENS),), generator=gen).to(device)
    steps = [torch.randint(0, vocab, (len(PROMPT_LENS), 1), generator=gen).to(device) for _ in range(DECODE_STEPS)]
    pages = math.ceil((max(PROMPT_LENS) + DECODE_STEPS) / manifest.page_size)
    return prompt, steps, pages


def _compare(bench: Bench, engine, reference):
    from dayzero.export.engine import allocate_flat_caches

    prompt, steps, pages = _inputs(engine.manifest, DEVICE)
    prefill_meta, decode_metas = _metas(PROMPT_LENS, pages, DEVICE)
    num_pages, num_slots = len(PROMPT_LENS) * pages, len(PROMPT_LENS)
    got_caches = allocate_flat_caches(engine.manifest, num_pages, num_slots, DEVICE)
    ref_caches = allocate_flat_caches(engine.manifest, num_pages, num_slots, DEVICE)
    pointers = [c.data_ptr() for c in got_caches]
    got = _run(engine, got_caches, prompt, steps, prefill_meta, decode_metas)
    ref = _run(reference, ref_caches, prompt, steps, prefill_meta, decode_metas)
    errors = [rel_err(g.float(), r.float()) for g, r in zip(got, ref)]
    bench.result["logits_rel_err_per_step"] = errors
    bench.result["logits_max_rel_err"] = max(errors)
    bench.result["caches_in_place"] = [c.data_ptr() for c in got_caches] == pointers
    bench.result["cache_max_rel_err"] = max(rel_err(g.float(), r.float()) for g, r in zip(got_caches, ref_caches))
    return got_caches, ref_caches, steps[-1], decode_metas[-1]


def _time_decode(bench: Bench, engine, reference, state) -> None:
    got_caches, ref_caches, ids, meta = state
    bench.result["decode_step_ms_engine"] = median_ms(lambda: engine.decode(ids, meta, got_caches), iters=10)
    bench.result["decode_step_ms_eager"] = median_ms(lambda: reference.decode(ids, meta, ref_caches), iters=10)


def _cuda_graph(bench: Bench, engine, state) -> None:
    caches, _, ids, meta = state
    saved = [c.clone() for c in caches]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        engine.decode(ids, meta, caches)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = engine.decode(ids, meta, caches)
    for c, s in zip(caches, saved):
        c.copy_(s)
    graph.replay()
    torch.cuda.synchronize()
    replayed = static_out.clone()
    for c, s in zip(caches, saved):
        c.copy_(s)
    direct = engine.decode(ids, meta, caches)
    bench.result["graph_vs_direct_rel_err"] = rel_err(replayed.float(), direct.float())
    bench.result["decode_step_ms_graph_replay"] = median_ms(graph.replay, iters=20)


def _summary(result: dict) -> str:
    keys = ["checkpoint_s", "export_cold_s", "export_warm_s", "load_s", "logits_max_rel_err", "caches_in_place",
            "decode_step_ms_engine", "decode_step_ms_eager", "decode_step_ms_graph_replay", "graph_vs_direct_rel_err"]
    rows = [{"what": k, "value": (f"{result[k]:.4g}" if isinstance(result[k], float) else result[k])}
            for k in keys if k in result]
    rows += [{"what": f"error in {k}", "value": v.splitlines()[0][:100]} for k, v in result["errors"].items()]
    return table(rows, ["what", "value"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dayzero_h200_export"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--full", action="store_true", help="the h200-slice config as is (45 GB of weights)")
    parser.add_argument("--backend", default="aoti", help="aoti (the point of this bench) or eager")
    parser.add_argument("--budget", type=float, default=380.0, help="seconds after which remaining steps are skipped")
    args = parser.parse_args()
    reexec_with_libstdcxx()
    run(args)


def run(args) -> None:
    from dayzero.cache import CompilationCache
    from dayzero.export.build import Progress, export_engine, load_engine
    from dayzero.export.engine import EagerEngine
    from dayzero.export.options import ExportOptions
    from dayzero.model import load

    bench = Bench(args)
    config = _config(args)
    bench.result["config"] = config
    text = config["text_config"]
    print(f"[bench] config: {text['num_hidden_layers']} layers (KDA {text['linear_attn_config']['kda_layers']}, "
          f"MLA {text['linear_attn_config']['full_attn_layers']}), {text['num_experts']} experts, vocab "
          f"{text['vocab_size']}, hidden {text['hidden_size']}", flush=True)
    made = bench.stage("checkpoint", lambda: _checkpoint(config, args.work))
    ckpt = made[0] if made else None
    bench.result["checkpoint_write_s"] = made[1] if made else None
    options = ExportOptions(backend=args.backend, max_batch=8, max_len=4096, device=DEVICE, dtype="bfloat16")
    cache = CompilationCache(args.work / "engines")
    progress = Progress()
    exported = bench.stage("export_cold", lambda: export_engine(ckpt, options, cache, progress)) if ckpt else None
    if exported:
        bench.result["export_cold_hit"] = exported[1]
        bench.result["export_stage_s"] = exported[0].meta.get("stage_seconds")
        bench.result["plugin_ops"] = exported[0].meta.get("plugin_ops")
        again = bench.stage("export_warm", lambda: export_engine(ckpt, options, cache, progress))
        bench.result["export_warm_hit"] = again[1] if again else None
    engine = bench.stage("load", lambda: load_engine(exported[0])) if exported else None
    reference = bench.stage("eager_load", lambda: EagerEngine(load(ckpt, torch.bfloat16, DEVICE), engine.manifest)) \
        if engine else None
    state = bench.stage("compare", lambda: _compare(bench, engine, reference)) if reference else None
    if state:
        bench.stage("time_decode", lambda: _time_decode(bench, engine, reference, state))
        bench.stage("cuda_graph", lambda: _cuda_graph(bench, engine, state))
    bench.result["total_s"] = round(time.perf_counter() - bench.start, 1)
    path = write_results(args.out, "h200_export", bench.result)
    print(_summary(bench.result))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
