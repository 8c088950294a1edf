"""The Python API: `dayzero.LLM(checkpoint).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dayzero.contract import StepEngine
from dayzero.export.options import ExportOptions
from dayzero.llm.loader import load_step_engine
from dayzero.runtime.llm_engine import LLMEngine, RuntimeOptions
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence


@dataclass
class RequestOutput:
    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    time_to_first_token_s: float | None
    logprobs: list | None = None  # SamplingParams.logprobs: one TokenLogprob an output token
    prompt_logprobs: list | None = None  # SamplingParams.prompt_logprobs: one a prompt token, the first None


def _default_checkpoint() -> Path:
    from dayzero.model.checkpoint_writer import write_random_checkpoint
    from dayzero.paths import EMBEDDED_MODEL, bundled_config, embedded_checkpoint

    path = embedded_checkpoint()
    if not (path / "config.json").exists():
        print(f"creating the embedded {EMBEDDED_MODEL} checkpoint at {path}", file=sys.stderr, flush=True)
        write_random_checkpoint(bundled_config(EMBEDDED_MODEL), path, overwrite=True)
    return path


class LLM:
    def __init__(self, checkpoint: str | Path | None = None, export: ExportOptions | None = None,
                 runtime: RuntimeOptions | None = None, engine: StepEngine | None = None, tokenizer=None):
        """engine / tokenizer: ones built already (tests, benchmarks) instead of the checkpoint's."""
        from dayzero.tokenizer import end_of_sequence_ids, load_tokenizer

        self.checkpoint = Path(checkpoint) if checkpoint is not None else _default_checkpoint()
        self.export_options = export or ExportOptions(backend="eager")
        started = time.perf_counter()
        self.step_engine = engine or load_step_engine(self.checkpoint, self.export_options)
        self.load_seconds = time.perf_counter() - started
        self.tokenizer = tokenizer or load_tokenizer(self.checkpoint, self.step_engine.manifest.vocab_size)
        self.engine = LLMEngine(self.step_engine, runtime or RuntimeOptions(), self.tokenizer.decode,
                                end_of_sequence_ids(self.checkpoint, self.tokenizer),
                                getattr(self.tokenizer, "token_bytes", None))

    def generate(self, prompts: list[str] | str, params: SamplingParams | None = None) -> list[RequestOutput]:
        """Generate for every prompt (batched continuously); outputs in prompt order."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = params or SamplingParams()
        start = time.perf_counter()
        seqs = [self.engine.add_request(self.tokenizer.encode(p), params) for p in prompts]
        while self.engine.has_work:
            self.engine.step()
        return [self._output(seq, prompt, start) for seq, prompt in zip(seqs, prompts)]

    def close(self) -> None:
        """Stop the engine's worker processes (a tensor-parallel engine's; nothing to do for one rank)."""
        self.step_engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _output(self, seq: Sequence, prompt: str, start: float) -> RequestOutput:
        first = self.engine.stats.first_token_at.get(seq.request_id)
        return RequestOutput(seq.request_id, prompt, seq.prompt_ids, list(seq.output_ids),
                             self.tokenizer.decode(seq.output_ids), seq.finish_reason,
                             None if first is None else first - start, seq.logprobs, seq.prompt_logprobs)
