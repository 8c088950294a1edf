"""The packed step command survives the round trip exactly (shapes, dtypes, values, slot operations, counts)."""

from __future__ import annotations

import torch

from dayzero.contract import COPY, ZERO
from dayzero.model.step import contiguous_meta
from dayzero.parallel.step_message import HEADER_SIZE, StepCommand, pack, payload_size, unpack


def test_a_decode_command_round_trips():
    meta = contiguous_meta([5, 70], [3, 3], 2, slots_per_seq=3, decode=True)
    meta.slot_mapping[1] = -1  # padded rows skip
    ids = torch.tensor([[7, 8, 9], [250, 1, 0]])
    ops = [(ZERO, 3, 3), (COPY, 30, 3), (ZERO, 9, 3)]
    header, payload = pack(StepCommand("decode", ids, meta, ops, num_pages=11, num_slots=12))
    assert header.shape == (HEADER_SIZE,) and payload.numel() == payload_size(header)
    got = unpack(header, payload, "cpu")
    assert (got.kind, got.slot_ops, got.num_pages, got.num_slots) == ("decode", ops, 11, 12)
    assert torch.equal(got.input_ids, ids) and got.input_ids.dtype == ids.dtype
    for name in ("positions", "cu_seqlens", "block_table", "slot_mapping", "state_slots", "num_accepted"):
        sent, received = getattr(meta, name), getattr(got.meta, name)
        assert received.dtype == sent.dtype and torch.equal(received, sent), name


def test_prefill_without_slot_ops_and_stop():
    meta = contiguous_meta([0], [17], 1)
    got = unpack(*pack(StepCommand("prefill", torch.arange(17), meta)), "cpu")
    assert got.kind == "prefill" and got.slot_ops == [] and torch.equal(got.input_ids, torch.arange(17))
    header, payload = pack(StepCommand("stop"))
    assert payload_size(header) == 0 and unpack(header, payload, "cpu").kind == "stop"
