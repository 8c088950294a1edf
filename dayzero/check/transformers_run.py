"""The checkpoint through transformers' own implementation of its model_type (never its remote code): hidden states
and logits of full sequences, and greedy `generate`. transformers is imported here only, when a check runs."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import torch

from dayzero.check.forward import Forward, host
from dayzero.errors import DayzeroError


def _transformers():
    try:
        import transformers
    except ImportError as err:
        raise DayzeroError("dayzero check compares against transformers, which is not installed: "
                           "pip install 'transformers>=5.17'") from err
    # its progress bars and notes on slower fallback paths would bury the report
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def transformers_version() -> str:
    return _transformers().__version__


def model_type(checkpoint: Path) -> str:
    path = checkpoint / "config.json"
    if not path.is_file():
        raise DayzeroError(f"{checkpoint} has no config.json; give a Hugging Face checkpoint folder")
    data = json.loads(path.read_text())
    if "model_type" not in data:
        raise DayzeroError(f"{path} has no model_type")
    return data["model_type"]


def causal_lm_class(checkpoint: Path) -> str:
    """The transformers class that implements the checkpoint's model_type, or a DayzeroError saying there is none."""
    return _auto_classes(checkpoint)[1]


def _auto_classes(checkpoint: Path) -> tuple[str, str]:
    """(transformers auto class, implementing class) of the checkpoint's model_type: a causal LM, or a multimodal
    model that generates text (GLM-5.3-Flash, whose language model dayzero serves)."""
    transformers = _transformers()
    from transformers.models.auto import modeling_auto

    name = model_type(checkpoint)
    for auto, mapping in (("AutoModelForCausalLM", modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
                          ("AutoModelForImageTextToText", modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)):
        if name in mapping:
            return auto, mapping[name]
    raise DayzeroError(f"transformers {transformers.__version__} has no causal-LM implementation of model_type "
                       f"{name!r}, so there is nothing to check against (a newer transformers may have it)")


class TransformersModel:
    """The checkpoint loaded by transformers' AutoModelForCausalLM (or, for a multimodal model that generates text,
    AutoModelForImageTextToText) on one device and dtype; a context manager that frees it on exit, so that the next
    model of the check finds the device memory."""

    def __init__(self, checkpoint: Path, device: str, dtype: torch.dtype, num_layers: int):
        transformers = _transformers()
        self.model = getattr(transformers, _auto_classes(checkpoint)[0]).from_pretrained(
            checkpoint, trust_remote_code=False, dtype=dtype).to(device).eval()
        self.device, self.num_layers = device, num_layers

    def __enter__(self) -> TransformersModel:
        return self

    def __exit__(self, *exc) -> None:
        del self.model
        gc.collect()
        if torch.device(self.device).type == "cuda":
            torch.cuda.empty_cache()

    @torch.inference_mode()
    def forward(self, ids: list[int]) -> Forward:
        out = self.model(torch.tensor([ids], device=self.device), output_hidden_states=True, use_cache=False)
        # the first is the embeddings (the first layer's input)
        states = out.hidden_states[1:]
        if len(states) != self.num_layers:
            raise DayzeroError(f"transformers' {type(self.model).__name__} reports {len(states)} layer outputs, "
                               f"the checkpoint's config.json {self.num_layers} layers")
        return Forward([host(s[0]) for s in states], host(out.logits[0]))

    @torch.inference_mode()
    def greedy(self, ids: list[int], max_tokens: int) -> list[int]:
        """`generate` without sampling, for exactly max_tokens tokens (no end-of-sequence stop)."""
        from transformers import GenerationConfig

        # an empty eos list, not None: generate fills None from the checkpoint's generation_config.json
        config = GenerationConfig(do_sample=False, max_new_tokens=max_tokens, eos_token_id=[],
                                  pad_token_id=getattr(self.model.config, "pad_token_id", None) or 0)
        tokens = torch.tensor([ids], device=self.device)
        # an explicit mask: without one, generate masks every prompt token equal to the pad id
        out = self.model.generate(tokens, attention_mask=torch.ones_like(tokens), generation_config=config)
        return out[0, len(ids):].tolist()
