"""The package's floors point one way (docs/architecture.md, "Floors"): every import of a dayzero module, at the top
of a file or inside a function, goes to a package its own package may see, and no two files import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dayzero"
BASE = {"errors", "paths", "tokenizer", "cache", "version", "logs"}
# each part of the package and the parts it may import (besides itself and BASE), lowest floor first
MAY_IMPORT = {
    "errors": set(),
    "version": set(),
    "paths": set(),
    "tokenizer": set(),
    "cache": set(),
    "logs": set(),
    "plugins": set(),
    "contract": {"plugins"},
    "model": {"plugins", "contract"},
    "structured": {"contract"},
    "runtime": {"contract", "structured"},
    "parallel": {"plugins", "contract", "model", "structured", "runtime"},
    "export": {"plugins", "contract", "model", "structured", "runtime", "parallel"},
    "llm": {"plugins", "contract", "model", "structured", "runtime", "parallel", "export"},
    "server": {"plugins", "contract", "model", "structured", "runtime", "parallel", "export", "llm"},
    "perf": {"plugins", "contract", "model", "structured", "runtime", "parallel", "export", "llm"},
    "check": {"plugins", "contract", "model", "structured", "runtime", "parallel", "export", "llm"},
    "cli": {"plugins", "contract", "model", "structured", "runtime", "parallel", "export", "llm", "server", "perf",
            "check"},
    # the package's face: `dayzero.LLM` and `dayzero.SamplingParams`, loaded on first use
    "__init__": {"llm", "runtime"},
    # `python -m dayzero`
    "__main__": {"cli"},
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """dayzero.runtime.scheduler -> runtime; dayzero.cli -> cli; dayzero -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The dayzero modules a file imports (`from package import submodule` names the submodule)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
    return {name for name in found if name in modules}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = {module_name(path, root): path for path in root.rglob("*.py")}
    modules = set(files)
    return {name: imported_modules(path, root, modules) - {name} for name, path in files.items()}


def upward_imports(graph: dict[str, set[str]], may_import: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        part = part_of(module)
        allowed = may_import[part] | BASE | {part}
        wrong += [f"{module} -> {target}" for target in sorted(targets) if part_of(target) not in allowed]
    return wrong


def mutual_imports(graph: dict[str, set[str]]) -> list[str]:
    """Pairs of files that import each other; a package's __init__ re-exporting its own files does not count."""
    pairs = []
    for module, targets in graph.items():
        for target in targets:
            packages = module.startswith(target + ".") or target.startswith(module + ".")
            if module < target and module in graph.get(target, ()) and not packages:
                pairs.append(f"{module} <-> {target}")
    return sorted(pairs)


def test_every_part_of_the_package_has_a_floor():
    parts = {part_of(module) for module in import_graph()}
    assert parts <= set(MAY_IMPORT), f"parts without a floor in MAY_IMPORT: {sorted(parts - set(MAY_IMPORT))}"


def test_no_import_points_up():
    assert upward_imports(import_graph(), MAY_IMPORT) == []


def test_no_two_files_import_each_other():
    assert mutual_imports(import_graph()) == []


@pytest.mark.parametrize(("source", "line"), [
    ("dayzero/runtime/scheduler.py", "from dayzero.export.build import load_engine"),
    ("dayzero/runtime/scheduler.py", "    from dayzero.model.hybrid import HybridModel"),
    ("dayzero/model/hybrid.py", "from dayzero.runtime import sampling"),
    ("dayzero/plugins/kda/reference.py", "import dayzero.contract"),
    ("dayzero/contract/engine.py", "from ..runtime.sequence import Sequence"),
])
def test_an_upward_import_fails_the_check(tmp_path, source, line):
    """The check itself: one added import that points up is found, whether at the top, in a function or relative."""
    copy = tmp_path / "dayzero"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    edited = tmp_path / source
    body = "def added():\n" + line + "\n" if line.startswith(" ") else line + "\n"
    edited.write_text(edited.read_text() + "\n" + body)
    assert upward_imports(import_graph(copy), MAY_IMPORT) != []


def test_a_mutual_import_fails_the_check():
    graph = {"dayzero.cache.gc": {"dayzero.cache.store"}, "dayzero.cache.store": {"dayzero.cache.gc"}}
    assert mutual_imports(graph) == ["dayzero.cache.gc <-> dayzero.cache.store"]
