"""dayzero against transformers + fla on the same checkpoint, in one run; then the h200-slice through `dayzero bench`.

    python -m bench.bench_vs_transformers [--out DIR] [--checkpoint DIR] [--layers 8] [--budget-s 300] [--smoke]
        [--parts write,dayzero,reference_fp32,transformers,h200_slice]

The checkpoint: Kimi-Linear-48B-A3B's config cut to its first --layers layers (8: 6 KDA + 2 MLA, 13.85 B parameters)
at full width, initialized and saved in bf16 by transformers itself (its init, norms moved off 1); kept at --checkpoint
(default: in the temporary folder) and reused while its config matches. Each part runs in a process of its own, so
that one model at a time holds the GPU and a crash or a timeout costs that part only (its error, and what it measured
before, go into the JSON), all within --budget-s seconds; a run of some --parts adds to the results of an earlier run
of the same setup in --out:
* dayzero: the `dayzero bench` path (eager engine, CUDA-graph decode; an 8192-token prefill budget): decode tokens/s
  and step time at batch 1 / 16 / 64 after 512-token prompts against the decode floor (`dayzero.perf.decode_traffic`
  at the measured copy rate) and `dayzero bench --profile`'s split of a step by op kind, time to first token of 512 /
  2048 / 8192-token prompts, the logits of a fixed prompt;
* reference_fp32: transformers in float32 with TF32 off, the whole slice alone on the GPU (4 bytes a parameter: 55 GB
  at 8 layers), the logits both bf16 runs are held against: random weights at full width are chaotic, so dayzero's
  error reads against transformers' own bf16 error;
* transformers: AutoModelForCausalLM.from_pretrained(dtype=bfloat16, device_map="cuda"), fla's kernels where
  installed, as its users run it; greedy `generate` with a static cache where the model takes one (compile off: the
  time budget), else its default cache: decode tokens/s at batch 1 / 16 (N + 1 new tokens' time minus 1's), the same
  times to first token and logits;
* h200_slice: `dayzero bench dayzero/configs/h200-slice --random-weights --profile` (K3.1 layers, which transformers
  does not implement) with FP8 latent and MXFP8 index caches, batch 1 / 16 / 64, 512-token prompts.
--smoke runs it all on the CPU with a tiny config (transformers' PyTorch path); results beside its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bench.common import RESULTS, parser, print_tables, rel_err, write_result

ROOT = Path(__file__).resolve().parent.parent
TOKEN_BUDGET = 8192
PROFILE_STEPS = 16  # decode steps of dayzero's untimed run under torch.profiler (`dayzero bench --profile`)
# part -> the most seconds it may take of the budget
PART_SECONDS = {"write": 120, "dayzero": 150, "reference_fp32": 180, "transformers": 170, "h200_slice": 150}
SMOKE_CONFIG = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None,
                    qk_rope_head_dim=16, v_head_dim=16, qk_nope_head_dim=16, num_experts=8, num_experts_per_token=2,
                    num_shared_experts=1, first_k_dense_replace=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                    linear_attn_config={"head_dim": 16, "num_heads": 4, "short_conv_kernel_size": 4,
                                        "kda_layers": [1, 2, 3], "full_attn_layers": [4]})


@dataclass(frozen=True)
class Setup:
    """What every part measures (the parent's arguments, passed to each part's process)."""

    checkpoint: str
    work: str
    device: str
    layers: int
    dayzero_batches: tuple[int, ...] = (1, 16, 64)
    transformers_batches: tuple[int, ...] = (1, 16)
    prompt: int = 512
    ttft_prompts: tuple[int, ...] = (512, 2048, 8192)
    output_tokens: int = 32
    logits_tokens: int = 64
    smoke: bool = False

    @classmethod
    def of(cls, args) -> Setup:
        """The work folder (part logs, logits; the smoke's results) lies beside the checkpoint."""
        name = "dayzero-kimi-linear-smoke" if args.smoke else f"dayzero-kimi-linear-{args.layers}l"
        checkpoint = args.checkpoint or Path(tempfile.gettempdir()) / name
        work = Path(f"{checkpoint}.work")
        work.mkdir(parents=True, exist_ok=True)
        if args.smoke:
            return cls(str(checkpoint), str(work), "cpu", 4, (1, 2), (1, 2), 16, (16, 32), 3, 8, True)
        return cls(str(checkpoint), str(work), "cuda" if torch.cuda.is_available() else "cpu", args.layers)

    def logits_file(self, part: str) -> Path:
        return Path(self.work) / f"logits_{part}.pt"


class Record(dict):
    """A part's result, rewritten to its file on every change: a part cut short keeps what it measured."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def put(self, key: str, value) -> None:
        self[key] = value
        self.path.write_text(json.dumps(self))

    def append(self, key: str, row: dict) -> None:
        self.put(key, [*self.get(key, []), row])


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _prompt_ids(s: Setup, batch: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, min(vocab, 256), (batch, length), generator=gen)


def _slice_config(s: Setup):
    import transformers

    if s.smoke:
        return transformers.KimiLinearConfig.from_dict(SMOKE_CONFIG)
    from dayzero.paths import bundled_config

    data = json.loads(bundled_config("kimi-linear-48b-a3b").read_text())
    attn = data["linear_attn_config"]
    attn["kda_layers"] = [i for i in attn["kda_layers"] if i <= s.layers]
    attn["full_attn_layers"] = [i for i in attn["full_attn_layers"] if i <= s.layers]
    data["num_hidden_layers"] = s.layers
    return transformers.KimiLinearConfig.from_dict(data)


def _written(path: Path, config) -> bool:
    """A complete checkpoint of `config` is at path (transformers writes the index or the single file last)."""
    if not (path / "config.json").exists():
        return False
    found = json.loads((path / "config.json").read_text())
    weights = (path / "model.safetensors.index.json").exists() or (path / "model.safetensors").exists()
    return weights and all(found.get(k) == getattr(config, k) for k in ("num_hidden_layers", "hidden_size",
                                                                        "vocab_size", "moe_intermediate_size"))


def write_part(s: Setup, record: Record) -> None:
    import transformers

    path, config = Path(s.checkpoint), _slice_config(s)
    record.put("path", str(path))
    if _written(path, config):
        record.put("reused", True)
        return
    start = time.perf_counter()
    with torch.device(s.device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("e_score_correction_bias"):
                param.add_(0.1 * torch.randn_like(param))
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.05 * torch.randn_like(buffer))
    # written aside, then renamed: a write cut short leaves no checkpoint that looks whole
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    record.put("parameters", sum(p.numel() for p in model.parameters()))
    record.put("seconds", time.perf_counter() - start)
    record.put("reused", False)


def dayzero_part(s: Setup, record: Record) -> None:
    from dayzero.export.options import ExportOptions
    from dayzero.llm.api import LLM
    from dayzero.model.config import ModelConfig
    from dayzero.perf.decode_profile import decode_profile
    from dayzero.perf.decode_traffic import decode_traffic
    from dayzero.perf.engine_bench import copy_bandwidth, run_engine
    from dayzero.runtime.llm_engine import RuntimeOptions

    export = ExportOptions(backend="eager", device=s.device, dtype="bfloat16", max_batch=max(s.dayzero_batches))
    with LLM(s.checkpoint, export, RuntimeOptions(token_budget=TOKEN_BUDGET), skip_tokenizer_init=True) as llm:
        record.put("load_s", llm.load_seconds)
        cfg, engine = ModelConfig.from_hf(s.checkpoint), llm.engine
        ids = _prompt_ids(s, 1, s.logits_tokens, cfg.vocab_size).to(s.device)
        torch.save(llm.step_engine.model.logits(ids)[0].float().cpu(), s.logits_file("dayzero"))
        record.put("copy_bytes_per_s", copy_bandwidth(s.device))
        for batch in s.dayzero_batches:
            run = run_engine(engine, batch, s.prompt, s.output_tokens, profile_steps=PROFILE_STEPS)
            floor = decode_traffic(cfg, engine.manifest, batch, s.prompt + s.output_tokens // 2)
            record.append("decode", {"batch": batch, "tokens_per_s": run.decode_tokens_per_s, "step_ms": run.step_ms,
                                     "floor_ms": 1e3 * floor.seconds(record["copy_bytes_per_s"]),
                                     "prefill_ms": 1e3 * run.prefill_s})
            profile = decode_profile(cfg, engine.manifest, batch, s.prompt, run.profile, record["copy_bytes_per_s"])
            print(profile.table(), flush=True)
            record.append("profiles", profile.to_json())
        for length in s.ttft_prompts:
            record.append("ttft", {"prompt": length, "ms": 1e3 * run_engine(engine, 1, length, 2).ttft_p50_s})


def _load_transformers(s: Setup, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    if s.device == "cpu":
        model = AutoModelForCausalLM.from_pretrained(s.checkpoint, dtype=dtype)
        return model.eval(), time.perf_counter() - start
    try:
        model = AutoModelForCausalLM.from_pretrained(s.checkpoint, dtype=dtype, device_map=s.device)
    except (ImportError, ValueError) as error:
        # device_map asks for accelerate where transformers still needs it: the model is moved after loading instead
        if "accelerate" not in str(error):
            raise
        model = AutoModelForCausalLM.from_pretrained(s.checkpoint, dtype=dtype).to(s.device)
    return model.eval(), time.perf_counter() - start


def _generate_s(model, ids: torch.Tensor, new_tokens: int, cache: str | None) -> float:
    options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    if cache is not None:
        options.update(cache_implementation=cache, disable_compile=True)
    _sync(str(ids.device))
    start = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), **options)
    _sync(str(ids.device))
    return time.perf_counter() - start


def _cache(model, s: Setup) -> tuple[str | None, str]:
    """A static cache where generate takes one, else the model's default (None); and what was used, said so."""
    try:
        _generate_s(model, _prompt_ids(s, 1, 8, model.config.vocab_size).to(s.device), 2, "static")
        return "static", "static"
    except Exception as error:  # noqa: BLE001 - any refusal means the default cache
        return None, f"default (static refused: {type(error).__name__}: {str(error)[:160]})"


def _decode_rate(model, s: Setup, batch: int, cache: str | None) -> dict:
    ids = _prompt_ids(s, batch, s.prompt, model.config.vocab_size).to(s.device)
    _generate_s(model, ids, 2, cache)
    first = _generate_s(model, ids, 1, cache)
    whole = _generate_s(model, ids, s.output_tokens + 1, cache)
    return {"batch": batch, "tokens_per_s": batch * s.output_tokens / (whole - first), "prefill_ms": 1e3 * first}


def _ttft_ms(model, s: Setup, length: int, cache: str | None) -> dict:
    ids = _prompt_ids(s, 1, length, model.config.vocab_size).to(s.device)
    _generate_s(model, ids, 1, cache)
    return {"prompt": length, "ms": 1e3 * _generate_s(model, ids, 1, cache)}


def _logits(model, s: Setup, name: str) -> None:
    ids = _prompt_ids(s, 1, s.logits_tokens, model.config.vocab_size).to(s.device)
    with torch.inference_mode():
        torch.save(model(input_ids=ids).logits[0].float().cpu(), s.logits_file(name))


def transformers_part(s: Setup, record: Record) -> None:
    model, load_s = _load_transformers(s, torch.bfloat16)
    record.put("load_s", load_s)
    record.put("kernels", _kernels())
    _logits(model, s, "transformers")
    cache, cache_note = _cache(model, s)
    record.put("cache", cache_note)
    for batch in s.transformers_batches:
        record.append("decode", _decode_rate(model, s, batch, cache))
    for length in s.ttft_prompts:
        record.append("ttft", _ttft_ms(model, s, length, cache))


def _kernels() -> dict:
    """Which of fla's / causal-conv1d's kernels transformers' Kimi-Linear module holds (None: its PyTorch path)."""
    from transformers.models.kimi_linear import modeling_kimi_linear as module

    names = ("chunk_kda", "fused_recurrent_kda", "fused_kda_gate", "causal_conv1d_fn", "causal_conv1d_update")
    return {name: getattr(getattr(module, name, None), "__module__", None) for name in names}


def reference_part(s: Setup, record: Record) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, load_s = _load_transformers(s, torch.float32)
    record.put("load_s", load_s)
    _logits(model, s, "reference")
    record.put("tf32", False)


def h200_part(s: Setup, record: Record) -> None:
    from dayzero.cli import cli

    out = Path(s.work) / "h200_slice_bench.json"
    config = "tiny-hybrid" if s.smoke else "h200-slice"
    caches = [] if s.smoke else ["--kv-cache", "fp8", "--index-cache", "mxfp8"]
    batches = [arg for b in ((1,) if s.smoke else (1, 16, 64)) for arg in ("--batch", str(b))]
    args = ["bench", str(ROOT / "dayzero" / "configs" / config), "--random-weights", "--device", s.device, "--dtype",
            "bfloat16", *caches, *batches, "--prompt-tokens", str(s.prompt), "--output-tokens", str(s.output_tokens),
            "--profile", "--profile-steps", "2" if s.smoke else "8", "--json", str(out)]
    cli.main(args, standalone_mode=False)
    for key, value in json.loads(out.read_text()).items():
        record.put(key, value)


PARTS = {"write": write_part, "dayzero": dayzero_part, "reference_fp32": reference_part,
         "transformers": transformers_part, "h200_slice": h200_part}


def run_parts(names: list[str], s: Setup, budget_s: float) -> dict[str, dict]:
    """Each part in a process of its own, within the budget; a part's result, or {"error": ...}."""
    deadline, results = time.monotonic() + budget_s, {}
    for name in names:
        left = deadline - time.monotonic()
        if left < 15:
            results[name] = {"error": f"skipped: the {budget_s:.0f} s budget was spent"}
            continue
        results[name] = _run_part(name, s, min(left, PART_SECONDS[name]))
        print(f"== {name}: {'error: ' + results[name]['error'] if 'error' in results[name] else 'done'}", flush=True)
    return results


def _run_part(name: str, s: Setup, timeout_s: float) -> dict:
    """The part's result; with "error" where it failed or ran out of time (and what it measured before)."""
    result, log = Path(s.work) / f"{name}.json", Path(s.work) / f"{name}.log"
    result.unlink(missing_ok=True)
    command = [sys.executable, "-m", "bench.bench_vs_transformers", "--part", name, "--setup", json.dumps(asdict(s))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        with open(log, "w") as stderr:
            status = subprocess.run(command, cwd=ROOT, env=env, stderr=stderr, timeout=timeout_s).returncode
        error = None if status == 0 else f"exit status {status}: {_tail(log)}"
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout_s:.0f} s; {_tail(log)}"
    measured = json.loads(result.read_text()) if result.exists() else {}
    return {**measured, "part_s": time.perf_counter() - start, "log_notes": _notes(log),
            **({"error": error} if error else {})}


def _notes(log: Path) -> list[str]:
    """The log's lines saying a faster path was not taken (transformers without fla's kernels, ...)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return sorted({line.strip()[:200] for line in lines if "not installed" in line or "slower" in line})[:4]


def _tail(log: Path, chars: int = 600) -> str:
    text = log.read_text(errors="replace").strip() if log.exists() else ""
    print(text[-4000:], file=sys.stderr)
    return text[-chars:]


def numerics(s: Setup) -> list[dict]:
    """Each bf16 run's logits against transformers' float32 ones (the same fixed prompt, every position)."""
    files = {name: s.logits_file(name) for name in ("dayzero", "transformers", "reference")}
    if not files["reference"].exists():
        return []
    reference = torch.load(files["reference"])
    rows = []
    for name, label in (("dayzero", "dayzero bf16"), ("transformers", "transformers bf16")):
        if files[name].exists():
            logits = torch.load(files[name])
            rows.append({"case": label, "rel_err": rel_err(logits, reference),
                         "top1": (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()})
    return rows


def _ratio(a, b):
    return a / b if a and b else None


def _decode_row(dz: dict, tf: dict) -> dict:
    return {"batch": dz["batch"], "dayzero": dz["tokens_per_s"], "transformers": tf.get("tokens_per_s"),
            "speedup": _ratio(dz["tokens_per_s"], tf.get("tokens_per_s")), "step_ms": dz["step_ms"],
            "floor_ms": dz["floor_ms"], "floor_per_step": dz["floor_ms"] / dz["step_ms"],
            "dayzero_prefill_ms": dz["prefill_ms"], "transformers_prefill_ms": tf.get("prefill_ms")}


def tables(results: dict, s: Setup) -> dict:
    dz, tf = results.get("dayzero", {}), results.get("transformers", {})
    tf_decode = {row["batch"]: row for row in tf.get("decode", [])}
    decode = [_decode_row(row, tf_decode.get(row["batch"], {})) for row in dz.get("decode", [])]
    tf_ttft = {row["prompt"]: row["ms"] for row in tf.get("ttft", [])}
    ttft = [{"prompt": row["prompt"], "dayzero": row["ms"], "transformers": tf_ttft.get(row["prompt"]),
             "speedup": _ratio(tf_ttft.get(row["prompt"]), row["ms"])} for row in dz.get("ttft", [])]
    width = "tiny config, CPU smoke" if s.smoke else "full width"
    title = f"Kimi-Linear slice ({s.layers} layers, {width}, bf16), {s.prompt}-token prompts"
    found = {
        "decode": {"title": f"{title}: decode", "rows": decode,
                   "columns": {"batch": "batch", "dayzero": "dayzero tokens/s", "transformers": "transformers tokens/s",
                               "speedup": "dayzero / transformers", "step_ms": "step ms", "floor_ms": "floor ms",
                               "floor_per_step": "floor / step", "dayzero_prefill_ms": "prefill ms dayzero",
                               "transformers_prefill_ms": "prefill ms transformers"},
                   "plot": {"x": "batch", "y": ["dayzero", "transformers"], "ylabel": "decode tokens/s", "log": True}},
        "floor": {"title": "dayzero decode step against its memory floor", "rows": decode,
                  "columns": {"batch": "batch", "floor_per_step": "floor / step"},
                  "plot": {"x": "batch", "y": ["floor_per_step"], "ylabel": "floor / step",
                           "hlines": [[0.7, "goal at batch 1"], [0.85, "goal at batch 16, 64"]]}},
        "ttft": {"title": "time to first token, batch 1", "rows": ttft,
                 "columns": {"prompt": "prompt tokens", "dayzero": "dayzero ms", "transformers": "transformers ms",
                             "speedup": "transformers / dayzero"},
                 "plot": {"x": "prompt", "y": ["dayzero", "transformers"], "ylabel": "ms", "log": True}},
        "numerics": {"title": f"logits of a {s.logits_tokens}-token prompt against transformers float32",
                     "rows": numerics(s), "columns": {"case": "run", "rel_err": "relative error",
                                                      "top1": "top-1 agreement"}},
        "h200_slice": {"title": "tiny-hybrid, bf16 caches, `dayzero bench` (CPU smoke)" if s.smoke else
                       "h200-slice (K3.1 layers), FP8 latent + MXFP8 index caches, `dayzero bench`",
                       "rows": results.get("h200_slice", {}).get("rows", []),
                       "columns": {"batch": "batch", "prompt": "prompt", "TTFT p50 ms": "TTFT p50 ms",
                                   "decode tok/s": "decode tok/s", "step ms": "step ms", "floor ms": "floor ms",
                                   "floor / step": "floor / step"}},
    }
    found["profile"] = _profile_table(dz.get("profiles", []))
    return {name: table for name, table in found.items() if table["rows"]}


def _profile_table(profiles: list[dict]) -> dict:
    """dayzero's decode step by op kind (`dayzero bench --profile`), ms a step and the kind's floor share, by batch."""
    from dayzero.perf.op_kinds import KINDS, label

    columns, rows = {"kind": "op kind"}, {kind: {"kind": label(kind)} for kind in KINDS}
    for p in profiles:
        b = p["batch"]
        columns.update({f"ms_{b}": f"ms, batch {b}", f"floor_{b}": f"floor ms, batch {b}"})
        for kind, row in p["kinds"].items():
            rows[kind].update({f"ms_{b}": row["ms"], f"floor_{b}": row["floor ms"]})
    shown = max((p["batch"] for p in profiles), default=None)
    return {"title": f"dayzero decode step by op kind ({PROFILE_STEPS} profiled steps)", "columns": columns,
            "rows": [row for row in rows.values() if len(row) > 1],
            "plot": {"x": "kind", "y": [f"ms_{shown}", f"floor_{shown}"], "ylabel": f"ms a step, batch {shown}"}}


def _software() -> dict:
    found = {}
    for name in ("transformers", "fla"):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            found[name] = None
    return found


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--checkpoint", type=Path, default=None, help="where the slice is written (and reused)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--budget-s", type=float, default=300, help="seconds for all the parts together")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of " + ", ".join(PARTS))
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU; results beside its checkpoint")
    p.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)
    p.add_argument("--setup", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        s = Setup(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(args.setup).items()})
        PARTS[args.part](s, Record(Path(s.work) / f"{args.part}.json"))
        return
    s = Setup.of(args)
    out = Path(s.work) / "results" if args.smoke and args.out == RESULTS else args.out
    fresh = run_parts(args.parts.split(","), s, args.budget_s)
    # a checkpoint written now makes earlier results another model's
    rewritten = fresh.get("write", {}).get("reused") is False
    results = {**({} if rewritten else _earlier_parts(out, s)), **fresh}
    errors = {name: r["error"] for name, r in results.items() if "error" in r}
    path = write_result(out, "vs_transformers", tables(results, s), software=_software(), setup=asdict(s),
                        errors=errors, parts=results)
    print_tables(path)
    print(f"{path}; errors: {errors or 'none'}")


def _earlier_parts(out: Path, s: Setup) -> dict:
    """The part results of an earlier run of the same setup in out/ (a run of some --parts adds to them)."""
    path = out / "vs_transformers.json"
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text())
    same = earlier.get("setup") == json.loads(json.dumps(asdict(s)))
    return earlier.get("parts", {}) if same else {}


if __name__ == "__main__":
    main()
