"""Every plugin Triton kernel's source and the constants it reads survive what AOTInductor does with them: it pastes
a kernel's source, the jit functions it calls and their globals (`NAME = repr(value)`) into a string literal of its
generated code, where any backslash escape is interpreted. A newline escape in an inline-PTX constant broke the
compiled engine of every model with an FP8-capable sparse MLA kernel."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

triton = pytest.importorskip("triton")

import dayzero.plugins  # noqa: E402


def plugin_kernels():
    """(id, python function) of every jit function of the plugins (JITFunction, or its interpreter stand-in)."""
    for info in pkgutil.walk_packages(dayzero.plugins.__path__, "dayzero.plugins."):
        for name, value in vars(importlib.import_module(info.name)).items():
            fn = getattr(value, "fn", None)
            if type(value).__module__.startswith("triton") and inspect.isfunction(fn) and fn.__module__ == info.name:
                yield pytest.param(fn, id=f"{info.name.removeprefix('dayzero.plugins.')}.{name}")


@pytest.mark.parametrize("fn", list(plugin_kernels()))
def test_kernel_source_and_constants_have_no_escapes(fn):
    assert "\\" not in inspect.getsource(fn)
    for name in fn.__code__.co_names:
        value = fn.__globals__.get(name)
        value = getattr(value, "value", value)  # tl.constexpr(...)
        if isinstance(value, str):
            assert "\\" not in repr(value), f"{name}: write it on one line, without escapes"
