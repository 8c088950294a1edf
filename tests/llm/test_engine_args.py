"""vLLM's LLM keyword arguments map onto ExportOptions / RuntimeOptions one by one; the ones left out keep the
export= / runtime= options given, else dayzero's defaults; unknown and unimplemented ones are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.export.auto_options import checkpoint_dtype
from dayzero.export.options import ExportOptions
from dayzero.llm import engine_args
from dayzero.llm.engine_args import export_options, refuse_unsupported, runtime_options
from dayzero.runtime.llm_engine import RuntimeOptions


def write_config(folder, **fields):
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


@pytest.mark.parametrize(("argument", "value", "field", "expected"), [
    ("tensor_parallel_size", 2, "tp", 2),
    ("max_model_len", 1024, "max_len", 1024),
    ("max_num_seqs", 4, "max_batch", 4),
    ("device", "cuda:1", "device", "cuda:1"),
    ("kv_cache_dtype", "auto", "kv_cache", "bf16"),
    ("kv_cache_dtype", "fp8", "kv_cache", "fp8"),
    ("kv_cache_dtype", "fp8_e4m3", "kv_cache", "fp8"),
    ("dtype", "half", "dtype", "float16"),
    ("dtype", "float", "dtype", "float32"),
    ("dtype", "bfloat16", "dtype", "bfloat16"),
    ("dtype", torch.bfloat16, "dtype", "bfloat16"),
])
def test_export_arguments(tmp_path, argument, value, field, expected):
    options = export_options(tmp_path, None, {argument: value})
    assert getattr(options, field) == expected


@pytest.mark.parametrize(("argument", "value", "field", "expected"), [
    ("gpu_memory_utilization", 0.5, "gpu_memory_fraction", 0.5),
    ("enforce_eager", True, "cuda_graphs", False),
    ("enforce_eager", False, "cuda_graphs", True),
    ("enable_prefix_caching", True, "prefix_caching", True),
    ("max_num_batched_tokens", 512, "token_budget", 512),
    ("async_scheduling", False, "overlap", False),
])
def test_runtime_arguments(argument, value, field, expected):
    assert getattr(runtime_options(None, {argument: value}), field) == expected


def test_arguments_left_out_keep_the_options_given(tmp_path):
    export = ExportOptions(backend="onnx", dtype="float16", max_batch=3, device="cpu")
    assert export_options(tmp_path, export, {"dtype": None, "tensor_parallel_size": None}) == export
    runtime = RuntimeOptions(gpu_memory_fraction=0.3, cuda_graphs=False)
    assert runtime_options(runtime, {"enforce_eager": None}) == runtime
    # a given argument wins over the options it lands in
    assert export_options(tmp_path, export, {"max_num_seqs": 8}) == ExportOptions(
        backend="onnx", dtype="float16", max_batch=8, device="cpu")
    assert runtime_options(runtime, {"enable_prefix_caching": True}).gpu_memory_fraction == 0.3


def test_the_defaults_are_the_eager_engine_on_the_gpu_when_there_is_one(tmp_path, monkeypatch):
    write_config(tmp_path, torch_dtype="bfloat16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert export_options(tmp_path, None, {}) == ExportOptions(backend="eager", device="cuda", dtype="bfloat16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert export_options(tmp_path, None, {}).device == "cpu"
    assert runtime_options(None, {}) == RuntimeOptions()


@pytest.mark.parametrize(("config", "expected"), [
    ({"torch_dtype": "bfloat16"}, "bfloat16"),
    ({"dtype": "float16"}, "float16"),
    ({"text_config": {"torch_dtype": "bfloat16"}}, "bfloat16"),
    ({"torch_dtype": "float32", "text_config": {"torch_dtype": "bfloat16"}}, "float32"),
    ({}, "float32"),
])
def test_dtype_auto_is_the_checkpoint_dtype(tmp_path, config, expected):
    write_config(tmp_path, **config)
    assert checkpoint_dtype(tmp_path) == expected
    assert export_options(tmp_path, ExportOptions(dtype="float16"), {"dtype": "auto"}).dtype == expected


def test_a_checkpoint_without_a_config_is_left_to_the_export_to_report(tmp_path):
    assert checkpoint_dtype(tmp_path / "missing") == "float32"


@pytest.mark.parametrize(("config", "message"), [
    ({"torch_dtype": "float8"}, "torch_dtype is 'float8'"),
    (None, "not valid JSON"),
])
def test_a_config_dtype_dayzero_cannot_run_is_named(tmp_path, config, message):
    (tmp_path / "config.json").write_text("{broken" if config is None else json.dumps(config))
    with pytest.raises(DayzeroError, match=message):
        checkpoint_dtype(tmp_path)


@pytest.mark.parametrize(("args", "message"), [
    ({"dtype": "int8"}, "dtype is 'int8'"),
    ({"kv_cache_dtype": "fp8_e5m2"}, "kv_cache_dtype must be one of"),
    ({"tensor_parallel_size": 0}, "tp must be >= 1"),
])
def test_bad_values_are_refused(tmp_path, args, message):
    with pytest.raises(DayzeroError, match=message):
        export_options(tmp_path, None, args)


def test_bad_runtime_values_are_refused():
    with pytest.raises(DayzeroError, match="gpu-memory-fraction"):
        runtime_options(None, {"gpu_memory_utilization": 1.5})


@pytest.mark.parametrize("name", sorted(engine_args.REFUSED))
def test_unimplemented_vllm_arguments_are_refused_with_what_to_do(name):
    default, advice = engine_args.REFUSED[name]
    refuse_unsupported({name: default})
    asked = 2 if isinstance(default, int) and not isinstance(default, bool) else (True if default is False else "x")
    with pytest.raises(DayzeroError, match=f"LLM\\({name}=") as err:
        refuse_unsupported({name: asked})
    assert advice in str(err.value)


def test_unknown_arguments_are_named():
    with pytest.raises(DayzeroError, match="unknown keyword arguments: bogus, checkpoint"):
        refuse_unsupported({"checkpoint": "x", "bogus": 1})


def test_arguments_that_change_nothing_are_accepted():
    refuse_unsupported({"trust_remote_code": True, "disable_log_stats": True, "swap_space": 8})


def test_llm_refuses_before_loading_anything(tmp_path):
    from dayzero import LLM

    with pytest.raises(DayzeroError, match="pipeline_parallel_size=2"):
        LLM(model=str(tmp_path / "nowhere"), pipeline_parallel_size=2)
    with pytest.raises(DayzeroError, match="unknown keyword arguments: max_num_sequences"):
        LLM(model=str(tmp_path / "nowhere"), max_num_sequences=4)
