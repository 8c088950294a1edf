"""No package exports a name that one of its own modules also has: the first import of that module (a lazy import
inside a function, say) rebinds the package's attribute to the module, and `package.name(...)` then fails."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dayzero"


def shadowed_names(init: Path, root: Path = PACKAGE) -> set[str]:
    """Names the package's __init__ binds to something other than its own submodule of that name."""
    submodules = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir() if p.is_dir()}
    package = ".".join(init.parent.relative_to(root.parent).parts)
    bound = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            bound |= {alias.asname or alias.name for alias in node.names
                      if f"{node.module}.{alias.name}" != f"{package}.{alias.asname or alias.name}"}
        elif isinstance(node, ast.Assign | ast.FunctionDef | ast.ClassDef):
            targets = node.targets if isinstance(node, ast.Assign) else [node]
            bound |= {getattr(t, "id", getattr(t, "name", "")) for t in targets}
    return bound & (submodules - {"__init__"})


def test_no_package_exports_a_name_of_its_own_modules():
    clashes = {str(init.relative_to(PACKAGE.parent)): sorted(shadowed_names(init))
               for init in PACKAGE.rglob("__init__.py") if shadowed_names(init)}
    assert clashes == {}


def test_the_check_finds_a_clash(tmp_path):
    (tmp_path / "dayzero" / "ops").mkdir(parents=True)
    (tmp_path / "dayzero" / "ops" / "mlp.py").write_text("")
    init = tmp_path / "dayzero" / "ops" / "__init__.py"
    init.write_text("from dayzero.ops.op import mlp\n")
    assert shadowed_names(init, tmp_path / "dayzero") == {"mlp"}
