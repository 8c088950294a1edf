"""The Python API, in vLLM's shape: `dayzero.LLM(model=PATH, ...).generate(prompts, SamplingParams(...))` and
`LLM.chat(messages)`, returning vLLM-shaped RequestOutputs (outputs.py).

LLM takes vLLM's keyword arguments (engine_args.py maps them onto dayzero's ExportOptions and RuntimeOptions and
refuses, by name, those it does not implement) as well as dayzero's own `export=` / `runtime=` / `engine=`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from functools import cached_property
from pathlib import Path

from dayzero.contract import StepEngine
from dayzero.errors import DayzeroError
from dayzero.export.options import ExportOptions
from dayzero.llm.chat_template import ChatTemplate, load_chat_template
from dayzero.llm.engine_args import export_options, refuse_unsupported, runtime_options
from dayzero.llm.generation_config import sampling_defaults
from dayzero.llm.loader import load_step_engine
from dayzero.llm.outputs import RequestOutput, request_output
from dayzero.llm.prompts import Prompt, conversations, parse_prompts
from dayzero.llm.sampling_params import SamplingParams
from dayzero.runtime import sampling
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sequence import Sequence

log = logging.getLogger(__name__)
# a seed drawn for a request without one, when LLM(seed=...) is set: below 2**62, so seed + choice stays in range
SEED_RANGE = 1 << 62


def _default_checkpoint() -> Path:
    from dayzero.model.checkpoint_writer import write_random_checkpoint
    from dayzero.paths import EMBEDDED_MODEL, bundled_config, embedded_checkpoint

    path = embedded_checkpoint()
    if not (path / "config.json").exists():
        log.info("creating the embedded %s checkpoint at %s", EMBEDDED_MODEL, path)
        write_random_checkpoint(bundled_config(EMBEDDED_MODEL), path, overwrite=True)
    return path


def _generation_defaults(checkpoint: Path, generation_config: str | Path) -> dict:
    """vLLM's generation_config: "auto" (the checkpoint's generation_config.json), "vllm" (none: SamplingParams'
    own defaults) or a folder holding a generation_config.json."""
    if generation_config == "vllm":
        return {}
    return sampling_defaults(checkpoint if generation_config == "auto" else Path(generation_config))


def _tokenizer_files(tokenizer, checkpoint: Path) -> Path:
    """The folder of the tokenizer files: LLM(tokenizer=FOLDER)'s, else the checkpoint's."""
    if not isinstance(tokenizer, (str, Path)):
        return checkpoint
    if not Path(tokenizer).is_dir():
        raise DayzeroError(f"tokenizer={str(tokenizer)!r} is not a folder; give the local folder of the tokenizer "
                           "files (tokenizer.json or tiktoken.model, tokenizer_config.json)")
    return Path(tokenizer)


class LLM:
    def __init__(self, model: str | Path | None = None, export: ExportOptions | None = None,
                 runtime: RuntimeOptions | None = None, *, engine: StepEngine | None = None, tokenizer=None,
                 dtype: str | None = None, tensor_parallel_size: int | None = None, max_model_len: int | None = None,
                 gpu_memory_utilization: float | None = None, enforce_eager: bool | None = None,
                 enable_prefix_caching: bool | None = None, max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, kv_cache_dtype: str | None = None,
                 async_scheduling: bool | None = None, seed: int | None = None, device: str | None = None,
                 generation_config: str | Path = "auto", skip_tokenizer_init: bool = False, **vllm_kwargs):
        """model: the checkpoint folder (default: the embedded tiny model). tokenizer: a folder holding the
        tokenizer files (default: the checkpoint's), or a tokenizer object. engine: a loaded engine (tests,
        benchmarks) instead of the checkpoint's. The vLLM arguments left out keep export= / runtime='s values, else
        dayzero's defaults (engine_args.py). seed: the source of the seeds of requests that set none.
        skip_tokenizer_init: no tokenizer (prompts are token ids, answers carry no text)."""
        from dayzero.tokenizer import NoTokenizer, end_of_sequence_ids, load_tokenizer

        refuse_unsupported(vllm_kwargs)
        self.checkpoint = Path(model) if model is not None else _default_checkpoint()
        args = {"dtype": dtype, "tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len,
                "max_num_seqs": max_num_seqs, "kv_cache_dtype": kv_cache_dtype, "device": device,
                "gpu_memory_utilization": gpu_memory_utilization, "enforce_eager": enforce_eager,
                "enable_prefix_caching": enable_prefix_caching, "max_num_batched_tokens": max_num_batched_tokens,
                "async_scheduling": async_scheduling}
        self.export_options = export_options(self.checkpoint, export, args)
        runtime = runtime_options(runtime, args)
        self.default_sampling = _generation_defaults(self.checkpoint, generation_config)
        self._seeds = None if seed is None else random.Random(seed)
        self._tokenizer_files = _tokenizer_files(tokenizer, self.checkpoint)
        started = time.perf_counter()
        self.step_engine = engine or load_step_engine(self.checkpoint, self.export_options)
        self.load_seconds = time.perf_counter() - started
        try:
            loaded = tokenizer is not None and not isinstance(tokenizer, (str, Path))
            if skip_tokenizer_init:
                self.tokenizer = NoTokenizer()
            else:
                self.tokenizer = tokenizer if loaded else load_tokenizer(self._tokenizer_files,
                                                                         self.step_engine.manifest.vocab_size)
            self.engine = LLMEngine(self.step_engine, runtime, self.tokenizer.decode,
                                    end_of_sequence_ids(self.checkpoint, self.tokenizer),
                                    getattr(self.tokenizer, "token_bytes", None))
        except BaseException:
            # the rank processes of an engine loaded here end with it
            if engine is None:
                self.step_engine.close()
            raise

    def get_tokenizer(self):
        return self.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """The SamplingParams of a call that passes none: the checkpoint's generation_config.json defaults over vLLM's
        (temperature 1, 16 tokens)."""
        return SamplingParams(**self.default_sampling)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = True, lora_request=None) -> list[RequestOutput]:
        """Generate for every prompt (batched continuously): a string, {"prompt": str}, {"prompt_token_ids":
        [...]}, or a list of them; one RequestOutput a prompt, in prompt order, each with SamplingParams.n answers.
        sampling_params: one for all prompts or one a prompt. use_tqdm: accepted for vLLM's code; no bar is drawn."""
        _refuse_lora(lora_request)
        parsed = parse_prompts(prompts, self.step_engine.manifest.vocab_size)
        encoded = [p if p.token_ids is not None else Prompt(p.text, self.tokenizer.encode(p.text)) for p in parsed]
        return self._run(encoded, self._params_per_prompt(sampling_params, len(encoded)))

    def chat(self, messages, sampling_params: SamplingParams | list[SamplingParams] | None = None,
             use_tqdm: bool = True, lora_request=None, chat_template: str | None = None,
             chat_template_kwargs: dict | None = None, add_generation_prompt: bool = True,
             tools: list[dict] | None = None) -> list[RequestOutput]:
        """Answer one conversation ([{"role", "content"}, ...]) or a list of them: each rendered with the
        checkpoint's chat template (or `chat_template`, Jinja text), as the server renders a chat request."""
        _refuse_lora(lora_request)
        template = self.chat_template if chat_template is None else dataclasses.replace(self.chat_template,
                                                                                         source=chat_template)
        # a checkpoint's template writes the BOS and turn markers itself; the plain transcript has none
        add_special_tokens = template.source is None
        prompts = []
        for conversation in conversations(messages):
            text = template.render(conversation, tools, add_generation_prompt, chat_template_kwargs)
            prompts.append(Prompt(text, self.tokenizer.encode(text, add_special_tokens=add_special_tokens)))
        return self._run(prompts, self._params_per_prompt(sampling_params, len(prompts)))

    @cached_property
    def chat_template(self) -> ChatTemplate:
        """The tokenizer's chat template (the checkpoint's, unless LLM(tokenizer=FOLDER) named another folder)."""
        return load_chat_template(self._tokenizer_files)

    def close(self) -> None:
        """Stop the engine's worker processes (a tensor-parallel engine's; nothing to do for one rank)."""
        self.step_engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _params_per_prompt(self, params, num_prompts: int) -> list[SamplingParams]:
        if params is None:
            return [self.get_default_sampling_params()] * num_prompts
        if isinstance(params, sampling.SamplingParams):
            return [params] * num_prompts
        params = list(params)
        if len(params) != num_prompts:
            raise DayzeroError(f"{len(params)} SamplingParams for {num_prompts} prompts; give one, or one a prompt")
        return params

    def _seeded(self, params: SamplingParams) -> SamplingParams:
        """LLM(seed=...) seeds the sampling requests that set no seed of their own."""
        if params.seed is not None or self._seeds is None or params.method == "greedy":
            return params
        return dataclasses.replace(params, seed=self._seeds.randrange(SEED_RANGE))

    def _run(self, prompts: list[Prompt], params: list[SamplingParams]) -> list[RequestOutput]:
        arrival = time.perf_counter()
        seqs = self._submit(prompts, params)
        while self.engine.has_work:
            self.engine.step()
        outputs, start = [], 0
        for prompt, p in zip(prompts, params):
            answers, start = seqs[start:start + p.n], start + p.n
            first = [self.engine.stats.first_token_at.pop(seq.request_id, None) for seq in answers]
            outputs.append(request_output(prompt.text, answers, self.tokenizer.decode, arrival, first))
        return outputs

    def _submit(self, prompts: list[Prompt], params: list[SamplingParams]) -> list[Sequence]:
        """Every prompt's n requests, or none: one the engine refuses cancels those already added."""
        seqs = []
        try:
            for prompt, p in zip(prompts, params):
                p = self._seeded(p)
                for choice in range(p.n):
                    seqs.append(self.engine.add_request(prompt.token_ids, _choice_params(p, choice)))
        except BaseException:
            for seq in seqs:
                self.engine.cancel(seq.request_id)
            raise
        return seqs


def _choice_params(params: SamplingParams, choice: int) -> SamplingParams:
    """Answer `choice` of a seeded request samples with seed + choice, so n answers differ but replay (as the
    server's do)."""
    return params if params.seed is None or choice == 0 else dataclasses.replace(params, seed=params.seed + choice)


def _refuse_lora(lora_request) -> None:
    if lora_request is not None:
        raise DayzeroError("dayzero serves no LoRA adapters; merge the adapter into the checkpoint")
