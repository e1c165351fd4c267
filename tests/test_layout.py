"""The layout's rules, checked on the source: no import cycles in gateway/ or backends/ (deferred imports
inside functions count too), backends/ never imports gateway/, every subpackage says what it holds, and the
tree is what ruff accepts."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "backends", "policies")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        if (ROOT / package).is_dir()
        for p in sorted((ROOT / package).rglob("*.py"))
    }


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its source (a package import means its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return components


def _is_package_init(name: str) -> bool:
    return (ROOT / name.replace(".", "/") / "__init__.py").exists()


def test_no_import_cycles():
    graph = _graph()
    # A package's __init__ re-exporting its own modules is not a cycle of meaning: drop edges from a
    # package to its own submodules when looking for cycles between modules.
    pruned = {
        name: {t for t in targets if not (_is_package_init(name) and t.startswith(name + "."))}
        for name, targets in graph.items()
    }
    assert _cycles(pruned) == []


def test_backends_never_import_gateway():
    offenders = {
        name: sorted(t for t in targets if t.split(".")[0] == "gateway")
        for name, targets in _graph().items()
        if name.split(".")[0] == "backends"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", sorted(p for p in _modules() if _is_package_init(p)))
def test_every_package_says_what_it_holds(package):
    init = ROOT / package.replace(".", "/") / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init} has no docstring"


def test_gateway_root_holds_only_entry_modules():
    root_modules = sorted(p.stem for p in (ROOT / "gateway").glob("*.py"))
    assert root_modules == ["__init__", "app", "cli", "errors", "ids", "types"]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_accepts_the_tree(command):
    """pyproject's [tool.ruff] is the code standard: lint-clean and formatted (`ruff format .` fixes the layout)."""
    ruff = [sys.executable, "-m", "ruff", *command]
    done = subprocess.run(ruff, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_bench_script_imports():
    """A bench script whose imports broke (a module moved, a function renamed) fails here, not at its next run."""
    scripts = sorted(path.stem for path in (ROOT / "bench").glob("*.py"))
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}"}
    done = subprocess.run(
        [sys.executable, "-c", code, *scripts], check=False, cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
