"""A worker process of a multi-rank engine (started by MultiRankEngine through a module that calls `serve_rank`
with its way of loading engines): loads its rank's engine, says so in the rendezvous folder, joins the world and
runs every step rank 0 broadcasts over caches of its own, until rank 0 sends the stop command."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from dayzero.cache.entry import Entry, load_entry
from dayzero.contract import StepEngine, allocate_flat_caches, apply_slot_op, slot_tensors
from dayzero.parallel.mesh import MeshRank
from dayzero.parallel.step_message import HEADER_SIZE, StepCommand, payload_size, unpack
from dayzero.parallel.world import join_world, leave_world

# an entry's engine of one rank
LoadEngine = Callable[[Entry, int], StepEngine]


def ready_file(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.ready"


def error_file(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.error"


def _say(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _load(load: LoadEngine, entry_path: Path, key: str, rank: int, device: str, folder: Path) -> StepEngine | None:
    try:
        entry = load_entry(entry_path, key, deep=False)
        if isinstance(entry, str):
            raise RuntimeError(entry)
        engine = load(entry, rank)
        torch.empty(0, device=device)  # a device this rank cannot use fails here, not inside the first collective
    except Exception as err:  # noqa: BLE001 (rank 0 reports it)
        _say(error_file(folder, rank), f"{type(err).__name__}: {err}")
        return None
    _say(ready_file(folder, rank), "")
    return engine


def _receive(commands: dist.ProcessGroup, device: str) -> StepCommand:
    header = torch.empty(HEADER_SIZE, dtype=torch.int64)
    dist.broadcast(header, src=0, group=commands)
    payload = torch.empty(payload_size(header), dtype=torch.int64)
    if payload.numel():
        dist.broadcast(payload, src=0, group=commands)
    return unpack(header, payload, device)


@torch.inference_mode()
def _run(engine: StepEngine, device: str, commands: dist.ProcessGroup, decodes: bool) -> None:
    caches = slots = None
    while (command := _receive(commands, device)).kind != "stop":
        if caches is None:
            caches = allocate_flat_caches(engine.manifest, command.num_pages, command.num_slots, device)
            slots = slot_tensors(engine.manifest, caches)
        for op in command.slot_ops:
            apply_slot_op(slots, op)
        if command.kind == "prefill":
            engine.prefill(command.input_ids, command.meta, caches)
        elif decodes:
            engine.decode(command.input_ids, command.meta, caches)


def serve_rank(load: LoadEngine) -> None:
    # A Ctrl-C reaches the terminal's whole process group: rank 0 handles it (draining, then the stop command, which
    # ends this loop); here it would only end the loop mid-step with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("entry", "key", "folder", "device"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    args = parser.parse_args()
    folder = Path(args.folder)
    engine = _load(load, Path(args.entry), args.key, args.rank, args.device, folder)
    if engine is None:
        raise SystemExit(1)
    extra = engine.manifest.extra
    mesh = MeshRank(extra.get("tp", 1), extra.get("cp", 1), args.rank)
    commands = join_world(args.rank, args.world, str(folder / "store"), args.device, mesh.tp, mesh.cp)
    try:
        # the first context-parallel rank's TP group decodes (engine.py)
        _run(engine, args.device, commands, decodes=mesh.cp_rank == 0)
    finally:
        leave_world()

