"""torch.export of the two step functions over explicit, flat inputs (docs/architecture.md, "The engine contract").

The exported programs take plain tensors only, in this order:

    prefill(input_ids[T], positions[T], cu_seqlens[N+1], block_table[N, max_pages], slot_mapping[T],
            state_slots[N, 1], num_accepted[N], caches...) -> logits[N, vocab]
    decode (input_ids[B, L], positions[B*L], cu_seqlens[B+1], block_table[B, max_pages], slot_mapping[B*L],
            state_slots[B, L], num_accepted[B], caches...) -> logits[B, L, vocab]        (L = 1 + num_draft)

with dynamic tokens / sequences / batch / pages / slots / max_pages, and `caches` the manifest's flat list, which
the plugin ops mutate in place.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.export import Dim, ExportedProgram

from dayzero.contract import PAGE, EngineManifest, StepMeta, allocate_flat_caches
from dayzero.model.eager_engine import layer_caches
from dayzero.model.hybrid import HybridModel
from dayzero.model.step import contiguous_meta

META_FIELDS = ("positions", "cu_seqlens", "block_table", "slot_mapping", "state_slots", "num_accepted")
# example sizes: distinct and > 1, so that export does not specialize a dim on its example value
EXAMPLE_SEQS, EXAMPLE_TOKENS, EXAMPLE_CONTEXT = 3, 5, 70


def flat_inputs(input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> tuple:
    return (input_ids, *(getattr(meta, f) for f in META_FIELDS), *caches)


class _Step(nn.Module):
    def __init__(self, model: HybridModel):
        super().__init__()
        self.model = model

    def _unpack(self, meta_and_caches) -> tuple[StepMeta, list]:
        meta = StepMeta(*meta_and_caches[: len(META_FIELDS)])
        return meta, layer_caches(self.model, list(meta_and_caches[len(META_FIELDS):]))


class PrefillStep(_Step):
    def forward(self, input_ids: torch.Tensor, *meta_and_caches: torch.Tensor) -> torch.Tensor:
        meta, caches = self._unpack(meta_and_caches)
        return self.model.prefill(input_ids, meta, caches)


class DecodeStep(_Step):
    def forward(self, input_ids: torch.Tensor, *meta_and_caches: torch.Tensor) -> torch.Tensor:
        meta, caches = self._unpack(meta_and_caches)
        return self.model.decode(input_ids, meta, caches)


def _example(manifest: EngineManifest, decode: bool, device) -> tuple:
    width = 1 + manifest.num_draft
    new = width if decode else EXAMPLE_TOKENS
    pages = math.ceil((EXAMPLE_CONTEXT + new) / manifest.page_size)
    meta = contiguous_meta([EXAMPLE_CONTEXT] * EXAMPLE_SEQS, [new] * EXAMPLE_SEQS, pages, slots_per_seq=width,
                           decode=decode, device=device)
    caches = allocate_flat_caches(manifest, EXAMPLE_SEQS * pages + 1, EXAMPLE_SEQS * width + 2, device)
    ids = torch.randint(0, manifest.vocab_size, (EXAMPLE_SEQS, width) if decode else (EXAMPLE_SEQS * new,),
                        device=device)
    return flat_inputs(ids, meta, caches)


def _dynamic_shapes(manifest: EngineManifest, decode: bool) -> tuple:
    seqs, max_pages = Dim("seqs", min=1, max=manifest.max_batch), Dim("max_pages", min=1)
    pages, slots = Dim("pages", min=2), Dim("slots", min=2)
    width = 1 + manifest.num_draft
    tokens = seqs * width if decode else Dim("tokens", min=1, max=manifest.max_len * manifest.max_batch)
    ids = {0: seqs} if decode else {0: tokens}
    meta = ({0: tokens}, {0: seqs + 1}, {0: seqs, 1: max_pages}, {0: tokens}, {0: seqs}, {0: seqs})
    caches = tuple({0: pages if t.unit == PAGE else slots} for t in manifest.cache_tensors)
    # the second entry covers forward(*meta_and_caches)
    return (ids, (*meta, *caches))


def trace_step(model: HybridModel, manifest: EngineManifest, decode: bool) -> ExportedProgram:
    """The exported prefill or decode program of `model` (its caches and options described by `manifest`)."""
    step = (DecodeStep if decode else PrefillStep)(model.eval())
    example = _example(manifest, decode, model.device)
    with torch.no_grad():
        return torch.export.export(step, example, dynamic_shapes=_dynamic_shapes(manifest, decode), strict=False)
