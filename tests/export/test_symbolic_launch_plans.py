"""Every plugin op's GPU launch plan holds for every size the exported engine accepts.

AOTInductor compiles the Triton bodies of the plugin ops on the traced, symbolic sizes. A Python comparison on a
size inside a body (a `min`, a `max`, an `if`) becomes a guard that AOTInductor cannot check per call: it narrows
the input's range to the example's side of the comparison, or silently assumes it. (On the H200 the decode engine
accepted batches of 2-3 only, from `min(experts, rows)` in the grouped GEMM grid, and a batch of 8 read out of
bounds.) Here the decode and prefill programs are traced on CPU, and each plugin op's GPU body runs on meta
tensors of the traced symbolic shapes, with the device questions answered as on an H200 and the kernel launches
recorded instead of run. It must leave every declared range as it was and add only guards that the ranges prove,
search no lookup table that is a view at an offset (torch 2.11's Inductor loses that offset), and hand no kernel a
slice of a scratch tensor the body allocated (Inductor 2.11 miscompiles the kernel's writes into it).
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._python_dispatch import TorchDispatchMode

from dayzero.export.layout import lay_out
from dayzero.export.trace import trace_step
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import eager_manifest
from dayzero.plugins import device as device_info
from dayzero.plugins import registry
from tests.helpers import glm5_config_dict, random_model, tiny_config_dict
from tests.plugins.triton_env import needs_triton

pytestmark = [needs_triton, pytest.mark.slow]
H200_SMS = 132
H200_SHARED_MEMORY = 232448  # bytes a program may opt in to


class _RecordedLaunch:
    """Stands in for wrap_triton(kernel): `kernel[grid](*args)` records the kernel's name, grid and arguments."""

    def __init__(self, kernel, launches: list):
        kernel = getattr(kernel, "fn", kernel)  # an autotuner's function
        self.name, self.launches = kernel.__name__, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((self.name, grid(kwargs) if callable(grid) else grid, args))

        return launch


class _OffsetLookupTables(TorchDispatchMode):
    """Records searchsorted / bucketize calls whose sorted table is a view at a storage offset: torch 2.11's Inductor
    drops that offset when it lowers them (the H200 engine searched cu_seqlens[:-1] for cu_seqlens[1:])."""

    def __init__(self):
        super().__init__()
        self.offset_tables = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in (torch.ops.aten.searchsorted, torch.ops.aten.bucketize):
            table = args[0] if func.overloadpacket == torch.ops.aten.searchsorted else args[1]
            if isinstance(table, torch.Tensor) and table.storage_offset() != 0:
                self.offset_tables.append(str(func))
        return func(*args, **kwargs)


def _on_meta(value):
    if isinstance(value, torch.fx.Node):
        value = value.meta["val"]
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_on_meta(item) for item in value)
    return value


def _root(tensor: torch.Tensor) -> torch.Tensor:
    while tensor._base is not None:
        tensor = tensor._base
    return tensor


def _partial_views_of_scratch(inputs, launches) -> list[str]:
    """Kernel arguments that are part of a tensor the op body allocated itself (a slice, a row): Inductor 2.11
    functionalizes a kernel's writes into such views wrongly (the H200 decode engine's MoE permutation copied 64
    elements into a buffer of 64 * (blocks + 1) and read its expert totals from the uninitialized rest)."""
    given = {id(_root(t)) for t in inputs if isinstance(t, torch.Tensor)}
    found = []
    for name, _, args in launches:
        for position, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor) or id(_root(arg)) in given:
                continue
            base = _root(arg)
            if arg.storage_offset() != 0 or not statically_known_true(arg.numel() == base.numel()):
                found.append(f"{name} argument {position}: {tuple(arg.shape)} of {tuple(base.shape)}")
    return found


def _flat_tensors(values) -> list:
    flat = []
    for value in values:
        flat.extend(_flat_tensors(value) if isinstance(value, (list, tuple)) else [value])
    return flat


def _fake_mode(program):
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and getattr(value, "fake_mode", None) is not None:
            return value.fake_mode
    raise AssertionError("no fake tensor in the traced program")


def _plan_every_plugin_call(program) -> tuple[dict, list, list, list, list]:
    """Run each plugin op's GPU body on the program's symbolic shapes: (new guards by op, ranges changed, launches,
    lookups in offset tables, kernel arguments that are partial views of the op's own scratch tensors)."""
    fake_mode = _fake_mode(program)
    shape_env = fake_mode.shape_env
    ranges_before = dict(shape_env.var_to_range)
    guards_by_op, launches, scratch_views = {}, [], []
    patches = [
        mock.patch("torch.library.wrap_triton", lambda kernel: _RecordedLaunch(kernel, launches)),
        mock.patch.object(device_info, "on_gpu", lambda device: True),
        mock.patch.object(device_info, "gpu_capability", lambda device: (9, 0)),
        mock.patch.object(device_info, "num_sms", lambda device, cpu_default: H200_SMS),
        mock.patch.object(device_info, "shared_memory_per_program", lambda device: H200_SHARED_MEMORY),
    ]
    for patch in patches:
        patch.start()
    lookups = _OffsetLookupTables()
    try:
        with fake_mode, lookups:
            for node in program.graph.nodes:
                if node.op != "call_function" or not str(node.target).startswith("dayzero."):
                    continue
                name = str(node.target).split(".")[1]
                first, first_launch = len(shape_env.guards), len(launches)
                args, kwargs = _on_meta(node.args), {key: _on_meta(v) for key, v in node.kwargs.items()}
                registry.PLUGIN_OPS[name].dayzero_impls["cuda"](*args, **kwargs)
                scratch_views += _partial_views_of_scratch(_flat_tensors([args, list(kwargs.values())]),
                                                           launches[first_launch:])
                unproven = [g.expr for g in shape_env.guards[first:]
                            if shape_env._maybe_evaluate_static(g.expr) != True]  # noqa: E712 (sympy true)
                if unproven:
                    guards_by_op.setdefault(name, []).extend(unproven)
    finally:
        for patch in patches:
            patch.stop()
    narrowed = [(symbol, ranges_before[symbol], now) for symbol, now in shape_env.var_to_range.items()
                if symbol in ranges_before and ranges_before[symbol] != now]
    return guards_by_op, narrowed, launches, lookups.offset_tables, scratch_views


@pytest.fixture(scope="module")
def laid_out_model():
    model = random_model(tiny_config_dict(kv_lora_rank=128), dtype=torch.bfloat16)
    lay_out(model)
    return model


def _kernels_of_plans_that_keep_the_ranges(model, decode: bool, num_draft: int) -> set[str]:
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=64, max_len=4096,
                              num_draft=num_draft)
    program = trace_step(model, manifest, decode=decode)
    guards_by_op, narrowed, launches, offset_tables, scratch_views = _plan_every_plugin_call(program)
    assert narrowed == []
    assert guards_by_op == {}
    assert offset_tables == []
    assert scratch_views == []
    return {name for name, _, _ in launches}


@pytest.mark.parametrize("decode, num_draft", [(True, 0), (True, 2), (False, 0)], ids=["decode", "verify", "prefill"])
def test_gpu_launch_plans_keep_the_traced_ranges(laid_out_model, decode, num_draft):
    kernels = _kernels_of_plans_that_keep_the_ranges(laid_out_model, decode, num_draft)
    # at most 64 rows (decode) one AttnRes program per token; above, persistent programs (the mix with its norm)
    attnres = "_attnres_mix_kernel" if decode and num_draft == 0 else "attnres_mix_persistent_kernel"
    assert {"_mla_attention_kernel", attnres, "_rms_norm_kernel"} <= kernels, kernels
    # decode rows are few for any batch in range: the Triton grouped GEMM; verify and prefill may be many
    assert ("_grouped_gemm_kernel" in kernels) == (decode and num_draft == 0), kernels
    # decode and verify batches (up to 64 x 3 tokens of top-2) permute in one launch; prefill by block counts
    assert ("_permute_batch_kernel" in kernels) == decode and ("_block_counts_kernel" in kernels) != decode, kernels


@pytest.mark.parametrize("decode, num_draft", [(True, 0), (True, 2), (False, 0)], ids=["decode", "verify", "prefill"])
def test_glm5_next_launch_plans_keep_the_traced_ranges(decode, num_draft):
    """Hyper-connections and pooled index keys (pools of 4: the Top-K kernels' case)."""
    model = random_model(glm5_config_dict(kv_lora_rank=128, index_head_dim=32, index_kpool=4), dtype=torch.bfloat16)
    lay_out(model)
    kernels = _kernels_of_plans_that_keep_the_ranges(model, decode, num_draft)
    pools = "_pool_decode_kernel" if decode else "_pool_prefill_kernel"
    assert {pools, "_mla_attention_kernel"} <= kernels, kernels


@pytest.mark.parametrize("decode", [True, False], ids=["decode", "prefill"])
def test_mxfp4_experts_launch_plans_keep_the_traced_ranges(decode):
    model = random_model(tiny_config_dict(kv_lora_rank=128), dtype=torch.bfloat16, mxfp4_experts=True)
    lay_out(model)
    # MXFP4 experts take the Triton grouped GEMM at every row count
    assert "_grouped_gemm_kernel" in _kernels_of_plans_that_keep_the_ranges(model, decode, 0)


def test_decode_indexer_merge_launches_every_tree_level_for_a_traced_batch():
    """Top-2048 (four sets a merge step): a traced batch launches the levels at strides 1, 4 and 16 that up to
    MAX_SPLITS splits could need, the later two with grids that are zero where no row needs them."""
    model = random_model(tiny_config_dict(kv_lora_rank=128, index_topk=2048), dtype=torch.bfloat16)
    lay_out(model)
    manifest = eager_manifest(model, CacheFormat(kv_fp8=True, index_mxfp8=True), max_batch=64, max_len=8192,
                              num_draft=0)
    guards_by_op, narrowed, launches, _, _ = _plan_every_plugin_call(trace_step(model, manifest, decode=True))
    assert guards_by_op == {} and narrowed == []
    merges = [args for name, _, args in launches if name == "_merge_select_kernel"]
    layers = len([name for name, _, _ in launches if name == "_decode_select_kernel"])
    assert layers > 0 and len(merges) == 3 * layers
    assert [args[10] for args in merges[:3]] == [1, 4, 16]


@pytest.mark.parametrize("decode, num_draft", [(True, 0), (True, 2), (False, 0)], ids=["decode", "verify", "prefill"])
def test_gqa_launch_plans_keep_the_traced_ranges(decode, num_draft):
    """Gated GQA layers: a traced decode batch takes the fixed split count (and the combine), prefill one split."""
    from dayzero.model.hybrid import HybridModel
    from dayzero.model.random_init import init_random_
    from tests.model.test_gated_attention import gqa_model_config

    model = HybridModel(gqa_model_config()).to(torch.bfloat16)
    init_random_(model, 0)
    kernels = _kernels_of_plans_that_keep_the_ranges(model, decode, num_draft)
    assert {"_write_kv_kernel", "_gqa_attention_kernel", "_rms_norm_kernel"} <= kernels
    assert ("_combine_splits_kernel" in kernels) == decode
