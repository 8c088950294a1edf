"""Triton kernels compiled for a GPU may read only constexpr globals (a plain int global fails to compile there),
while the CPU interpreter reads any: checked on the source of every kernel and jit helper of the plugins."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

import triton
from triton.runtime.interpreter import InterpretedFunction

import dayzero.plugins

# under TRITON_INTERPRET (the CPU tests) triton.jit makes InterpretedFunctions
KERNEL_TYPES = (triton.runtime.jit.JITFunction, InterpretedFunction)


def plain_globals_read(function) -> set[str]:
    """Names a jit function reads from its module that are plain Python numbers or strings."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function.fn)))
    arguments = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return {name for name in names - arguments
            if isinstance(function.fn.__globals__.get(name), (bool, int, float, str))}


def plugin_jit_functions():
    for info in pkgutil.walk_packages(dayzero.plugins.__path__, "dayzero.plugins."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, KERNEL_TYPES) and value.fn.__module__ == module.__name__:
                yield f"{module.__name__}.{name}", value


def test_kernels_read_only_constexpr_globals():
    functions = dict(plugin_jit_functions())
    assert len(functions) > 50
    offenders = {name: sorted(plain_globals_read(f)) for name, f in functions.items() if plain_globals_read(f)}
    assert not offenders, f"wrap these globals in tl.constexpr(...): {offenders}"
