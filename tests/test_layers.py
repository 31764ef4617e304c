"""The package's layers import one way and no module imports itself back through others.

The layers: imports made when a module loads count (not those inside functions, which the CLI uses to
load Spark only for its Spark commands, nor those under ``if TYPE_CHECKING:``). The cycles: every import
counts, inside functions too (a deferred import hides a cycle, it does not remove it), except those under
``if TYPE_CHECKING:``, which never run.
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


def imports(source: str, in_functions: bool) -> set[str]:
    """Modules of this project the module ``source`` imports at module level, and with ``in_functions``
    inside functions too."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                visit(node.orelse)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if in_functions:
                    visit(node.body)
            else:  # if, try, with, for, while, class and match bodies run with the module
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child])
                    elif isinstance(child, (ast.excepthandler, ast.match_case)):
                        visit(child.body)

    visit(ast.parse(source).body)
    return {name for name in found if name.split(".")[0] in PACKAGES}


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def graph(in_functions: bool) -> dict[str, set[str]]:
    return {name: {i for i in imports(path.read_text(), in_functions) if i in MODULES and i != name}
            for name, path in MODULES.items()}


GRAPH = graph(in_functions=False)
EVERY_IMPORT = graph(in_functions=True)


def layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gate" else parts[0]


def test_every_module_belongs_to_a_layer() -> None:
    """gate's modules live in its layer packages; only gate/__init__.py sits at the top."""
    strays = sorted(m for m in MODULES if layer(m) not in ALLOWED and m != "gate")
    assert strays == []


def test_layers_import_only_the_layers_below_them() -> None:
    wrong = sorted(f"{m} imports {i}" for m, imported in GRAPH.items() for i in imported
                   if layer(m) in ALLOWED and layer(i) not in ALLOWED[layer(m)] and i != "gate")
    assert wrong == []


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules, the first repeated at the end) for every edge back to the current path."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            walk(module)
    return cycles


def test_import_cycles_are_found() -> None:
    """A cycle closed inside a function, and one at module level, are each seen."""
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    source = """
import gate.common.retry
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from gate.common.process import Worker
try:
    from gate.common.errors import GateError
except ImportError:
    import gate.common.tls
class Rules:
    import gate.common.columns
    def rule(self) -> None:
        from gate.common.dc import CHANNEL_PRIVILEGES
def fix() -> None:
    if True:
        import gate.common.config
"""
    assert imports(source, in_functions=False) == {"gate.common.retry", "gate.common.errors", "gate.common.errors.GateError",
                                                   "gate.common.tls", "gate.common.columns"}
    assert imports(source, in_functions=True) == {"gate.common.retry", "gate.common.errors", "gate.common.errors.GateError",
                                                  "gate.common.tls", "gate.common.columns", "gate.common.dc",
                                                  "gate.common.dc.CHANNEL_PRIVILEGES", "gate.common.config"}


def test_no_import_cycle() -> None:
    """Not at module level, nor through an import inside a function."""
    assert import_cycles(EVERY_IMPORT) == []
