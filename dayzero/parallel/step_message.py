"""The step command rank 0 sends its workers, as two int64 tensors (a fixed-size header, then the payload) instead
of a pickled object: one host copy of the step's inputs and two small broadcasts per step.

Header: kind, number of slot operations, page and slot counts of the caches, then per tensor (input_ids and the
StepMeta fields in order) its dtype code and shape (up to two dims). Payload: the tensors flattened, then the slot
operations (state_pool.SlotOp: zero or copy) as triples, in the order rank 0 did them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from dayzero.contract import StepMeta

KINDS = ("stop", "prefill", "decode")
DTYPES = (torch.int32, torch.int64)
META_FIELDS = tuple(f.name for f in dataclasses.fields(StepMeta))
HEADER_SIZE = 4 + 4 * (1 + len(META_FIELDS))
OP_SIZE = 3  # a slot operation: kind, then two slot numbers


@dataclass
class StepCommand:
    kind: str
    input_ids: torch.Tensor | None = None
    meta: StepMeta | None = None
    slot_ops: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)
    num_pages: int = 0
    num_slots: int = 0


def _tensors(command: StepCommand) -> list[torch.Tensor]:
    return [command.input_ids, *(getattr(command.meta, name) for name in META_FIELDS)]


def _describe(tensor: torch.Tensor) -> list[int]:
    if tensor.dim() > 2 or tensor.dtype not in DTYPES:
        raise ValueError(f"a step tensor must be 1-2 dims of int32/int64, got {tensor.dtype} {list(tensor.shape)}")
    shape = list(tensor.shape) + [1] * (2 - tensor.dim())
    return [DTYPES.index(tensor.dtype), tensor.dim(), *shape]


def pack(command: StepCommand) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (header [HEADER_SIZE], payload) int64 on the host."""
    head = [KINDS.index(command.kind), len(command.slot_ops), command.num_pages, command.num_slots]
    if command.kind == "stop":
        return torch.tensor(head + [0] * (HEADER_SIZE - len(head))), torch.empty(0, dtype=torch.int64)
    tensors = _tensors(command)
    for tensor in tensors:
        head += _describe(tensor)
    flat = [t.reshape(-1).to(torch.int64) for t in tensors]
    ops = torch.tensor(command.slot_ops, dtype=torch.int64).reshape(-1).to(flat[0].device)
    return torch.tensor(head), torch.cat([*flat, ops]).cpu()


def payload_size(header: torch.Tensor) -> int:
    head = header.tolist()
    if KINDS[head[0]] == "stop":
        return 0
    sizes = [head[i + 2] * head[i + 3] for i in range(4, HEADER_SIZE, 4)]
    return sum(sizes) + OP_SIZE * head[1]


def unpack(header: torch.Tensor, payload: torch.Tensor, device: torch.device | str) -> StepCommand:
    head = header.tolist()
    kind, num_ops, num_pages, num_slots = KINDS[head[0]], head[1], head[2], head[3]
    if kind == "stop":
        return StepCommand(kind)
    payload = payload.to(device)
    tensors, offset = [], 0
    for i in range(4, HEADER_SIZE, 4):
        dtype, ndim, rows, cols = head[i : i + 4]
        shape = (rows, cols)[:ndim]
        tensors.append(payload[offset : offset + rows * cols].view(shape).to(DTYPES[dtype]))
        offset += rows * cols
    ops = payload[offset:].view(-1, OP_SIZE).tolist() if num_ops else []
    meta = StepMeta(**dict(zip(META_FIELDS, tensors[1:])))
    return StepCommand(kind, tensors[0], meta, [tuple(op) for op in ops], num_pages, num_slots)
