"""The pieces under the ONNX export: functional forms of the mutating plugin ops, the rewrite of
auto_functionalized nodes, and the ONNX Runtime bridge of one custom node."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxscript")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from dayzero.errors import DayzeroError  # noqa: E402
from dayzero.export.onnx_functional import functional_op, functionalize_plugin_ops  # noqa: E402
from dayzero.plugins.paged_cache import write_rows  # noqa: E402
from dayzero.plugins.registry import ONNX_DOMAIN  # noqa: E402

ROW = 8


def _rows(num_tokens: int):
    rows = torch.randn(num_tokens, ROW)
    slot_mapping = torch.tensor([5, -1, 130][:num_tokens])
    return rows, slot_mapping


def test_functional_write_rows_returns_the_updated_copy_and_leaves_the_input():
    cache = torch.randn(3, 64, ROW)
    rows, slot_mapping = _rows(3)
    before = cache.clone()
    (updated,) = functional_op(torch.ops.dayzero.write_rows.default)(cache, rows, slot_mapping)
    torch.testing.assert_close(cache, before, rtol=0, atol=0)
    write_rows(before, rows, slot_mapping)
    torch.testing.assert_close(updated, before, rtol=0, atol=0)


class _Write(torch.nn.Module):
    def __init__(self, view: bool):
        super().__init__()
        self.view = view

    def forward(self, cache, rows, slot_mapping):
        write_rows(cache[1:] if self.view else cache, rows, slot_mapping)
        return rows.sum()


def test_rewrite_leaves_no_auto_functionalized_node_and_one_functional_call():
    cache, (rows, slots) = torch.zeros(3, 64, ROW), _rows(2)
    program = functionalize_plugin_ops(torch.export.export(_Write(view=False), (cache, rows, slots)))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert not any("auto_functionalized" in t for t in targets)
    assert targets.count("dayzero_functional.write_rows.default") == 1


def test_rewrite_refuses_a_mutated_cache_view():
    cache, (rows, slots) = torch.zeros(3, 64, ROW), _rows(2)
    with pytest.raises(DayzeroError, match="whole step input"):
        functionalize_plugin_ops(torch.export.export(_Write(view=True), (cache, rows, slots)))


def _one_node_model(op_type: str):
    node = helper.make_node(op_type, ["cache", "rows", "slot_mapping"], ["cache_out"], domain=ONNX_DOMAIN)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("cache", TensorProto.FLOAT, [3, 64, ROW]),
        helper.make_tensor_value_info("rows", TensorProto.FLOAT, [3, ROW]),
        helper.make_tensor_value_info("slot_mapping", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("cache_out", TensorProto.FLOAT, [3, 64, ROW])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ONNX_DOMAIN, 1)])


def test_onnx_runtime_kernel_runs_the_reference(tmp_path):
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort

    path = tmp_path / "write_rows.onnx"
    onnx.save(_one_node_model("WriteRows"), path)
    cache = torch.randn(3, 64, ROW)
    rows, slot_mapping = _rows(3)
    (out,) = onnx_ort.session(path).run(None, {"cache": cache.numpy(), "rows": rows.numpy(),
                                               "slot_mapping": slot_mapping.numpy()})
    write_rows(cache, rows, slot_mapping)
    torch.testing.assert_close(torch.from_numpy(out), cache, rtol=0, atol=0)


_SESSION_OUTLIVES_REGISTRATIONS = """
import gc, sys
import numpy as np
import onnx
from onnx import TensorProto, helper
from tests.export.test_onnx_functional import _one_node_model
from dayzero.export import onnx_ort
from dayzero.plugins.registry import ONNX_DOMAIN

onnx.save(_one_node_model("WriteRows"), sys.argv[1])
session = onnx_ort.session(sys.argv[1])
feeds = {"cache": np.zeros((3, 64, 8), np.float32), "rows": np.ones((3, 8), np.float32),
         "slot_mapping": np.array([5, -1, 130])}
session.run(None, feeds)
types = {"cache": TensorProto.FLOAT, "rows": TensorProto.FLOAT, "slot_mapping": TensorProto.INT64,
         "cache_out": TensorProto.FLOAT}
for i in range(200):
    node = helper.make_node("WriteRows", ["cache", "rows", "slot_mapping"], ["cache_out"], domain=ONNX_DOMAIN,
                            **{f"unused{i}": i})
    onnx_ort._register_pyop(node, types)
(out,) = session.run(None, feeds)
del session
gc.collect()
print("ok", float(out.sum()))
"""


def test_a_session_outlives_later_pyop_registrations(tmp_path):
    # onnxruntime-extensions hands sessions pointers into a per-domain vector of PyOps: registering more PyOps in a
    # domain could move the ones a live session uses, and that session then crashed when destroyed (a segfault in
    # the garbage collector, tests later). In a subprocess, so that a regression fails this test, not the suite.
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("onnxruntime_extensions")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _SESSION_OUTLIVES_REGISTRATIONS, str(tmp_path / "w.onnx")],
                          capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # two rows of ones written (slot -1 skipped) into a zero cache
    assert done.stdout.split() == ["ok", "16.0"]


def test_onnx_runtime_names_a_custom_node_it_cannot_run(tmp_path):
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort

    with pytest.raises(DayzeroError, match="NoSuchOp"):
        onnx_ort.runnable_model(_one_node_model("NoSuchOp"))
