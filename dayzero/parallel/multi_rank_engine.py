"""A multi-rank engine (tensor or context parallel): rank 0's engine in this process and one worker process per
other rank, stepped in lockstep.

The runtime sees one StepEngine. Each step, rank 0 broadcasts the step's inputs (and what its pool did to state
slots since the last step: zeroed, copied) to the workers as two int64 tensors (step_message.py), then every rank
runs its own engine over its own caches; the engines' collectives meet inside the step. Rank 0's logits are the
step's result (tensor-parallel ranks all compute them; of context-parallel ranks, rank 0 runs every sequence's last
chunk, and it decodes alone).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from dayzero.cache import Entry
from dayzero.contract import PAGE, SLOT, SlotOp, StepEngine, StepMeta
from dayzero.errors import DayzeroError
from dayzero.parallel.step_message import StepCommand, pack
from dayzero.parallel.worker import LoadEngine, error_file, ready_file
from dayzero.parallel.world import join_world, leave_world

WORKER_START_TIMEOUT_S = 600


class MultiRankEngine(StepEngine):
    def __init__(self, entry: Entry, ranks: int, devices: list[str], load: LoadEngine, worker_module: str):
        """load: an entry's engine of one rank; worker_module: run with `python -m` for every other rank, it loads
        its engine with the same `load` and serves it (worker.py's `serve_rank`)."""
        self._folder = tempfile.TemporaryDirectory(prefix="dayzero-world-")
        folder = Path(self._folder.name)
        # separate processes rather than multiprocessing: a worker must not re-import the caller's main module
        self.workers = [subprocess.Popen([sys.executable, "-m", worker_module, "--entry", str(entry.path),
                                          "--key", entry.key, "--folder", str(folder), "--device", devices[rank],
                                          "--rank", str(rank), "--world", str(ranks)]) for rank in range(1, ranks)]
        try:
            self.local = load(entry, 0)
            self.manifest = self.local.manifest
            self._wait_ready(folder)
        except BaseException:
            # ranks that did load would wait in the rendezvous until its timeout
            self._kill_workers()
            self._folder.cleanup()
            raise
        tp, cp = self.manifest.extra.get("tp", 1), self.manifest.extra.get("cp", 1)
        self._commands = join_world(0, ranks, str(folder / "store"), devices[0], tp, cp)
        self._slot_ops: list[SlotOp] = []
        # After a context-parallel prefill every rank holds the sequence's caches, and only a later prefill reads
        # them there (a preempted sequence is prefilled again from scratch): the first TP group (rank 0 alone
        # without TP) decodes.
        self.decodes_alone = cp > 1 and tp == 1
        # tensor-parallel ranks all compute every token's hidden state and hold the whole LM head: rank 0
        # scores the prompt alone (context-parallel ranks each hold only their chunks' states)
        self.scores_prompts = cp == 1 and self.local.scores_prompts

    @property
    def graph_capturable(self) -> bool:
        """Rank 0's decode alone is GPU work; tensor-parallel ranks decode together, and the per-step broadcast of
        inputs is host work that a CUDA graph cannot replay."""
        return self.decodes_alone

    def _wait_ready(self, folder: Path) -> None:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        for rank, process in enumerate(self.workers, start=1):
            while not ready_file(folder, rank).exists():
                failure = self._startup_failure(folder, rank, process, deadline)
                if failure:
                    raise DayzeroError(f"rank {rank} could not load its engine: {failure}")
                time.sleep(0.05)

    @staticmethod
    def _startup_failure(folder: Path, rank: int, process: subprocess.Popen, deadline: float) -> str | None:
        if error_file(folder, rank).exists():
            return error_file(folder, rank).read_text()
        if process.poll() is not None:
            return f"its process exited with status {process.returncode}"
        if time.monotonic() > deadline:
            return f"not loaded after {WORKER_START_TIMEOUT_S} s"
        return None

    def on_slot_op(self, op: SlotOp) -> None:
        """The runtime zeroed or copied state slots of rank 0's caches: the workers do the same to theirs, in order,
        before the next step."""
        self._slot_ops.append(op)

    def _broadcast(self, command: StepCommand) -> None:
        header, payload = pack(command)
        dist.broadcast(header, src=0, group=self._commands)
        if payload.numel():
            dist.broadcast(payload, src=0, group=self._commands)

    def _send_step(self, kind: str, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> None:
        for rank, process in enumerate(self.workers, start=1):
            if process.poll() is not None:
                raise DayzeroError(f"rank {rank} exited (status {process.returncode}); its caches are "
                                   "gone, so this engine cannot step again: restart it")
        counts = {spec.unit: tensor.shape[0] for tensor, spec in zip(caches, self.manifest.cache_tensors)}
        self._broadcast(StepCommand(kind, input_ids, meta, self._slot_ops, counts.get(PAGE, 0), counts.get(SLOT, 0)))
        self._slot_ops = []

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        self._send_step("prefill", input_ids, meta, caches)
        return self.local.prefill(input_ids, meta, caches)

    def prefill_scored(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor],
                        targets: torch.Tensor, num_top: int):
        """prefill, and rank 0's log-probabilities of the prompt's own next tokens (EagerEngine.prefill_scored)."""
        self._send_step("prefill", input_ids, meta, caches)
        return self.local.prefill_scored(input_ids, meta, caches, targets, num_top)

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        if not self.decodes_alone:
            self._send_step("decode", input_ids, meta, caches)
        return self.local.decode(input_ids, meta, caches)

    def _stop_workers(self) -> None:
        for process in self.workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    def close(self) -> None:
        """Stop the workers (a dead one: kill the rest) and leave the world; a second call does nothing."""
        if not self.workers:
            return
        if all(process.poll() is None for process in self.workers):
            self._broadcast(StepCommand("stop"))
            self._stop_workers()
        self._kill_workers()
        leave_world()
        self._folder.cleanup()

    def _kill_workers(self) -> None:
        for process in self.workers:
            process.kill()
            process.wait()
        self.workers = []

    def __del__(self):
        # a caller that never closed: the workers must not outlive it
        for process in getattr(self, "workers", []):
            process.kill()
