"""The checkpoint through dayzero: the reference model's hidden states and logits of full sequences, an engine's
logits along a given continuation (prefill, then one decode step a token), and greedy generation through the
runtime."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from dayzero.check.forward import Forward, host
from dayzero.contract import PAGE, SLOT, StepEngine, allocate_flat_caches
from dayzero.export.options import ExportOptions
from dayzero.model import HybridModel, load
from dayzero.model.step import contiguous_meta
from dayzero.plugins.paged_cache import PAGE_SIZE
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams


def load_reference(checkpoint: Path, options: ExportOptions) -> HybridModel:
    return load(checkpoint, dtype=getattr(torch, options.dtype), device=options.device,
                keep_mxfp4=not options.dequantize_experts)


@torch.inference_mode()
def reference_forward(model: HybridModel, ids: list[int], options: ExportOptions) -> Forward:
    """One prefill of ids into fresh caches of the engine's formats, collecting each layer's output."""
    pages = math.ceil(len(ids) / PAGE_SIZE)
    caches = model.allocate_caches(pages, 1, options.cache_format)
    meta = contiguous_meta([0], [len(ids)], pages, device=model.device)
    states: list[torch.Tensor] = []
    hidden = model.model(torch.tensor(ids, device=model.device), meta, caches, decode=False, layer_states=states)
    # transformers reports the last layer after the final norm
    return Forward([host(s) for s in states[:-1]] + [host(hidden)], host(model.lm_head(hidden)))


@torch.inference_mode()
def engine_logits(engine: StepEngine, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    """Logits [len(continuation), vocab]: after the prompt (prefill), then after each continuation token but the
    last (one decode step each), whatever the engine would have chosen."""
    manifest = engine.manifest
    device, pages = manifest.device, math.ceil((len(prompt) + len(continuation)) / manifest.page_size)
    caches = allocate_flat_caches(manifest, pages, 1 + manifest.num_draft)
    meta = contiguous_meta([0], [len(prompt)], pages, device=device)
    rows = [engine.prefill(torch.tensor(prompt, device=device), meta, caches)[0]]
    for position, token in enumerate(continuation[:-1], start=len(prompt)):
        meta = contiguous_meta([position], [1], pages, decode=True, device=device)
        rows.append(engine.decode(torch.tensor([[token]], device=device), meta, caches)[0, 0])
    return host(torch.stack(rows))


def engine_greedy(engine: StepEngine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy tokens through the runtime, all prompts batched together, exactly max_tokens each (no end-of-sequence
    stop); the caches sized to what the prompts need, not to the device's memory."""
    manifest, batch = engine.manifest, len(prompts)
    # the dummy page, and one page of room a sequence
    pages = 1 + sum(1 + math.ceil((len(p) + max_tokens) / manifest.page_size) for p in prompts)
    slots = (batch + 1) * (1 + manifest.num_draft)
    budget = pages * manifest.unit_bytes(PAGE) + slots * manifest.unit_bytes(SLOT)
    runtime = LLMEngine(engine, RuntimeOptions(max_batch=batch, memory_bytes=budget))
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    seqs = [runtime.add_request(prompt, params) for prompt in prompts]
    while runtime.has_work:
        runtime.step()
    return [list(seq.output_ids) for seq in seqs]
