"""The process group every rank joins (gloo on CPUs, NCCL for GPU tensors) and the one-rank group AOTInductor
needs while it compiles a step that calls collectives."""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
from collections.abc import Iterator

import torch
import torch.distributed as dist

from dayzero.parallel.mesh import create_mesh_groups

# a rank that waits longer than this on a collective (a peer died) fails instead of hanging the server
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("DAYZERO_COLLECTIVE_TIMEOUT_S", 300)))


def join_world(rank: int, world_size: int, store_file: str, device: str, tp: int = 1,
               cp: int = 1) -> dist.ProcessGroup:
    """Join the default group (the step's all-reduces: NCCL on GPUs, gloo on CPUs) -> the host group that carries
    step commands. With both tp and cp > 1, also the mesh's TP and CP subgroups (mesh.py).

    The commands need a gloo group of their own: gloo's worker thread frees each broadcast's Python-owned buffers,
    which takes the GIL, while a compiled step holds the GIL and waits for its all-reduce on that same thread —
    on one shared group the two deadlock."""
    if torch.device(device).type == "cuda":
        torch.cuda.set_device(torch.device(device))
    else:
        # ranks on one host's CPUs share its cores; oversubscribed, their spinning threads stall each collective
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank, world_size=world_size,
                            timeout=COLLECTIVE_TIMEOUT)
    commands = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
    create_mesh_groups(tp, cp, COLLECTIVE_TIMEOUT)
    return commands


def leave_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def compile_group() -> Iterator[None]:
    """A one-rank default group while a rank's step is compiled: Inductor resolves the group its collectives name
    (the group's size does not shape the code); the real world is formed when the engines load."""
    if dist.is_initialized():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="dayzero-compile-") as directory:
        dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()
