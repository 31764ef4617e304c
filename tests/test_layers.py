"""The package's layers import one way and no module imports itself back through others.

Imports made when a module loads count (not those inside functions, which the CLI uses to load Spark
only for its Spark commands, nor those under ``if TYPE_CHECKING:``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gate", "spark_readers")

# layer -> the layers it may import (itself included)
ALLOWED = {
    "gate.common": {"gate.common"},
    "gate.capture": {"gate.common", "gate.capture"},
    "gate.admin": {"gate.common", "gate.capture", "gate.admin"},
    "gate.consume": {"gate.common", "gate.consume"},
    "gate.devtools": {"gate.common", "gate.devtools"},
    "gate.cli": {"gate.common", "gate.capture", "gate.admin", "gate.consume", "gate.devtools", "gate.cli"},
    "spark_readers": {"gate.common", "gate.consume", "spark_readers"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_time_imports(path: Path) -> set[str]:
    """Modules of this project imported at module level."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return {name for name in found if name.split(".")[0] in PACKAGES}


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
GRAPH = {name: {i for i in load_time_imports(path) if i in MODULES and i != name} for name, path in MODULES.items()}


def layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gate" else parts[0]


def test_every_module_belongs_to_a_layer() -> None:
    """gate's modules live in its layer packages; only gate/__init__.py sits at the top."""
    strays = sorted(m for m in MODULES if layer(m) not in ALLOWED and m != "gate")
    assert strays == []


def test_layers_import_only_the_layers_below_them() -> None:
    wrong = sorted(f"{m} imports {i}" for m, imports in GRAPH.items() for i in imports
                   if layer(m) in ALLOWED and layer(i) not in ALLOWED[layer(m)] and i != "gate")
    assert wrong == []


def test_no_import_cycle() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            walk(module)
    assert cycles == []
