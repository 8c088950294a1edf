"""`dayzero check CKPT`: the checkpoint through transformers and through dayzero on the same token sequences,
compared layer by layer, then on logits and greedy generation.

The sequences are each prompt followed by transformers' greedy tokens (all but the last), so both sides see the
same tokens even where their choices would part. The phases (transformers, the engine, the reference model) run one
after another and free their model, so the device holds one model at a time."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import torch

from dayzero.check.dayzero_run import engine_greedy, engine_logits, load_reference, reference_forward
from dayzero.check.forward import Forward
from dayzero.check.options import CheckOptions
from dayzero.check.prompts import text_prompts, token_prompts
from dayzero.check.report import CheckReport, Comparison, Generation, rel_err, top1_agreement
from dayzero.check.tolerance import NOISE_MULTIPLE, allowed, needs_noise
from dayzero.check.transformers_run import TransformersModel, causal_lm_class, transformers_version
from dayzero.llm.loader import load_step_engine
from dayzero.model import ModelConfig


def run_check(checkpoint: Path, options: CheckOptions, echo: Callable[[str], None] = print) -> CheckReport:
    hf_class = causal_lm_class(checkpoint)
    cfg = ModelConfig.from_hf(checkpoint)
    prompts = (text_prompts(checkpoint, options.prompts, cfg.vocab_size) if options.prompts
               else token_prompts(cfg.vocab_size))
    echo(f"[transformers {hf_class}: {len(prompts)} prompts, {options.max_tokens} greedy tokens each]")
    continuations, expected, fp32 = _transformers_side(checkpoint, cfg, options, prompts)
    echo(f"[dayzero {options.engine.backend} engine and the runtime]")
    rows, generated = _engine_side(checkpoint, options, prompts, continuations)
    echo("[dayzero reference model]")
    got = _reference_side(checkpoint, options, [p + c[:-1] for p, c in zip(prompts, continuations)])
    comparisons = _compare(cfg, options, expected, fp32, got, rows, [len(p) for p in prompts])
    generations = tuple(Generation(len(p), e, g) for p, e, g in zip(prompts, continuations, generated))
    return CheckReport(_header(checkpoint, cfg, hf_class, options, prompts), comparisons, generations)


def _transformers_side(checkpoint: Path, cfg: ModelConfig, options: CheckOptions, prompts: list[list[int]]):
    """transformers' greedy tokens after each prompt, its forward passes over prompt + tokens in the dtype, and in
    fp32 where the tolerance needs its rounding noise (None elsewhere)."""
    device, dtype = options.engine.device, getattr(torch, options.engine.dtype)
    with TransformersModel(checkpoint, device, dtype, cfg.num_layers) as hf:
        continuations = [hf.greedy(p, options.max_tokens) for p in prompts]
        sequences = [p + c[:-1] for p, c in zip(prompts, continuations)]
        expected = [hf.forward(s) for s in sequences]
    if not needs_noise(dtype, options.tolerance):
        return continuations, expected, None
    with TransformersModel(checkpoint, device, torch.float32, cfg.num_layers) as hf:
        return continuations, expected, [hf.forward(s) for s in sequences]


def _engine_side(checkpoint: Path, options: CheckOptions, prompts: list[list[int]],
                 continuations: list[list[int]]) -> tuple[list[torch.Tensor], list[list[int]]]:
    """The engine's logits along transformers' tokens, and the runtime's own greedy tokens."""
    engine = load_step_engine(checkpoint, options.engine)
    try:
        rows = [engine_logits(engine, p, c) for p, c in zip(prompts, continuations)]
        return rows, engine_greedy(engine, prompts, options.max_tokens)
    finally:
        engine.close()
        _free(options.engine.device)


def _reference_side(checkpoint: Path, options: CheckOptions, sequences: list[list[int]]) -> list[Forward]:
    model = load_reference(checkpoint, options.engine)
    got = [reference_forward(model, s, options.engine) for s in sequences]
    del model
    _free(options.engine.device)
    return got


def _free(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _compare(cfg: ModelConfig, options: CheckOptions, expected: list[Forward], fp32: list[Forward] | None,
             got: list[Forward], rows: list[torch.Tensor], prompt_lens: list[int]) -> tuple[Comparison, ...]:
    dtype = getattr(torch, options.engine.dtype)

    def compare(name: str, pick: Callable[[Forward, int], torch.Tensor], mine: list[torch.Tensor],
                agree: bool = False) -> Comparison:
        theirs = torch.cat([pick(f, i) for i, f in enumerate(expected)])
        noise = None if fp32 is None else rel_err(theirs, torch.cat([pick(f, i) for i, f in enumerate(fp32)]))
        mine = torch.cat(mine)
        return Comparison(name, rel_err(mine, theirs), allowed(dtype, noise, options.tolerance), noise,
                          top1_agreement(mine, theirs) if agree else None)

    comparisons = []
    for layer in range(cfg.num_layers):
        name = f"layer {layer} ({cfg.layer_kinds[layer]}, {cfg.mlp_kinds[layer]})"
        name += " + norm" if layer == cfg.num_layers - 1 else ""
        comparisons.append(compare(name, lambda f, i, layer=layer: f.states[layer], [f.states[layer] for f in got]))
    comparisons.append(compare("logits, reference model", lambda f, i: f.logits, [f.logits for f in got], True))
    # the engine's rows are the logits from each prompt's last token on
    comparisons.append(compare(f"logits, {options.engine.backend} engine",
                               lambda f, i: f.logits[prompt_lens[i] - 1:], rows, True))
    return tuple(comparisons)


def _header(checkpoint: Path, cfg: ModelConfig, hf_class: str, options: CheckOptions,
            prompts: list[list[int]]) -> tuple[str, ...]:
    engine = options.engine
    if options.tolerance is not None:
        rule = f"{options.tolerance:.0e} relative (--tolerance)"
    elif engine.dtype == "float32":
        rule = f"{allowed(torch.float32, None, None):.0e} relative (float32)"
    else:
        floor = torch.finfo(getattr(torch, engine.dtype)).eps
        rule = (f"{NOISE_MULTIPLE:g} x transformers' own distance from its float32 run, at least {floor:.1e} "
                f"({engine.dtype})")
    lengths = ", ".join(str(len(p)) for p in prompts)
    count = f"{len(prompts)} prompt{'s' if len(prompts) > 1 else ''} ({lengths} tokens)"
    return (f"{checkpoint}: {cfg.model_type}, {cfg.num_layers} layers, vocab {cfg.vocab_size}",
            f"transformers {transformers_version()} {hf_class} vs dayzero's reference model and {engine.backend} "
            f"engine; {engine.device}, {engine.dtype}, kv cache {engine.kv_cache}, index cache {engine.index_cache}",
            f"{count}, each followed by transformers' greedy tokens; allowed: "
            f"{rule}")
