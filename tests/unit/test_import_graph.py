"""No import cycle between grpo's packages and top-level modules.

Every import counts, wherever it sits in a file: a lazy import inside a function, or one under
TYPE_CHECKING, still ties the two packages together. Nodes are grpo's direct children (`grpo.rollout`,
`grpo.train.loop`, ...); an import inside one package is no edge.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grpo

SRC = Path(next(iter(grpo.__path__))).resolve()


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}  # `from grpo import loop`
    return found


def package_graph(package: str = "grpo") -> dict[str, set[str]]:
    """Edges between `package`'s direct children (its subpackages and modules), from every import in them."""
    folder = SRC.parent.joinpath(*package.split("."))
    prefix = package.split(".")

    def child(module: str) -> str | None:
        parts = module.split(".")
        if parts[: len(prefix)] != prefix or len(parts) == len(prefix):
            return None
        name = parts[len(prefix)]
        return name if (folder / name).is_dir() or (folder / f"{name}.py").is_file() else None

    graph: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        here = child(module_name(path))
        if here is None:  # the package's own __init__.py
            continue
        for target in imported_modules(path):
            there = child(target)
            if there and there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_graph_is_read_from_every_import():
    graph = package_graph()
    assert "train" in graph and "policy" in graph["train"]
    assert "entry" in graph.get("api", set())  # a lazy import inside a function counts


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_no_package_level_import_cycle():
    assert find_cycle(package_graph()) is None, " -> ".join(find_cycle(package_graph()) or [])


PACKAGES = sorted(".".join(path.parent.relative_to(SRC.parent).parts) for path in SRC.rglob("__init__.py"))




def test_no_import_cycle_inside_a_package():
    """Below the top level too: grpo.rollout's engines drive its servers, which know no engine."""
    assert "grpo.rollout" in PACKAGES and "grpo.tools.plan" in PACKAGES
    cycles = {package: find_cycle(package_graph(package)) for package in PACKAGES}
    assert {package: cycle for package, cycle in cycles.items() if cycle} == {}


def test_the_engines_import_the_servers_and_not_the_other_way():
    graph = package_graph("grpo.rollout")
    assert "server" in graph["engines"] and "types" in graph["server"]
    assert "engines" not in graph.get("server", set())


ENTRY_POINTS = {"cli", "entry", "api"}


def test_only_entry_points_import_the_training_package():
    importers = sorted(node for node, targets in package_graph().items() if "train" in targets)
    assert set(importers) <= ENTRY_POINTS, importers


def test_no_production_module_imports_the_faults_package():
    """Fault injection is installed at the seams (grpo.hooks) by grpo.entry; nothing else reaches it."""
    importers = sorted(node for node, targets in package_graph().items() if "faults" in targets)
    assert importers == ["entry"], importers


def test_the_tools_that_read_a_run_import_no_torch():
    """grpo doctor, watch and health read files: without torch they answer at once (torch alone takes
    seconds to import), and `grpo watch --pid` has the trainer's pid checked before a short run ends."""
    code = ("import sys, grpo.cli, grpo.tools.doctor, grpo.tools.watch, grpo.tools.health; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'safetensors')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_imports_are_sorted():
    """Imports in isort's order (pyproject.toml's [tool.ruff.lint.isort]); `ruff check --select I --fix .` sorts them."""
    repo = Path(__file__).resolve().parents[2]
    checked = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--no-cache", "--quiet", "."],
                             cwd=repo, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-1000:]
