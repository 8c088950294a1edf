"""What an architecture adapter is: one HF `model_type` mapped onto dayzero's layer description (from its
config.json fields) and onto dayzero's parameters (from its tensor names).

dayzero's parameter names are the Kimi checkpoints' names (`model.layers.{i}.self_attn.q_proj.weight`, routed
experts stacked per layer as `block_sparse_moe.experts.w1 [E, I, D]`); an adapter says, for each parameter, which
stored tensors hold it: renamed, one per expert, or a slice of a fused tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from dayzero.model.fields import ConfigFields

EXPERT_PARAM = re.compile(r"^(?P<base>.*\.experts)\.(?P<w>w[123])(?P<mxfp4>_packed|_scale)?$")
# (dayzero prefix, stored prefix): bare names, K3's `language_model.` and the multimodal `model.language_model.`
TEXT_LAYOUTS = (("", ""), ("", "language_model."), ("model.", "model.language_model."))


@dataclass(frozen=True)
class Stored:
    """A stored tensor (name without the checkpoint's text prefix), or the part `index` of one (a fused tensor, whose
    own shape must then be `whole`)."""

    name: str
    index: tuple[int | slice, ...] = ()
    whole: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorPart:
    """One piece of a parameter (a whole parameter, or one expert of a stacked bank): where it may be stored (the
    first candidate present wins) and its shape."""

    sources: tuple[Stored, ...]
    shape: tuple[int, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(source.name for source in self.sources)


class Adapter:
    """The default adapter: config fields are the adapter's to read (`describe`); every parameter is stored under
    its own name and routed experts one tensor per expert (`experts.{e}.w1.weight`)."""

    model_type: ClassVar[str]
    layouts: ClassVar[tuple[tuple[str, str], ...]] = TEXT_LAYOUTS

    def text_fields(self, top: ConfigFields) -> ConfigFields:
        """The object holding the language model's fields (a multimodal config nests them)."""
        return top

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        """ModelConfig's fields (all but model_type and ignored_parts) from the language model's config fields."""
        raise NotImplementedError

    def ignored_parts(self, top: ConfigFields) -> tuple[str, ...]:
        """What of the checkpoint dayzero does not run (a vision tower, ...), a line each."""
        return ()

    def tensor_parts(self, name: str, shape: tuple[int, ...]) -> list[TensorPart]:
        """The stored tensors of parameter `name` of shape `shape`, in stacking order."""
        expert = EXPERT_PARAM.match(name)
        if expert is None:
            return [TensorPart(tuple(Stored(n) for n in self.stored_names(name)), shape)]
        base, w, suffix = expert["base"], expert["w"], expert["mxfp4"] or ""
        return [TensorPart(self.expert_sources(base, w, suffix, e, shape), shape[1:]) for e in range(shape[0])]

    def stored_names(self, name: str) -> tuple[str, ...]:
        """Candidate stored names of a parameter that is not a routed expert bank."""
        return (name,)

    def expert_sources(self, base: str, w: str, suffix: str, expert: int, shape: tuple[int, ...]) -> tuple[Stored, ...]:
        """Where expert `expert` of bank `{base}.{w}{suffix}` (shape [E, ...]) is stored."""
        return (Stored(f"{base}.{expert}.{w}.weight{suffix}"),)
