"""The package's layers, read from its source with ``ast``: core < train < experiments < app.

A module may import its own layer and the layers below it (``common`` is below them all;
the package's ``__init__`` / ``__main__`` sit on top), never one above, and no import cycle
exists. Imports inside functions count: they hide a dependency, they do not remove it.
"""
import ast
from pathlib import Path

import pytest

from ddtree_lab.common import ROOT

PACKAGE = ROOT / "ddtree_lab"
LAYERS = {"common": 0, "core": 1, "train": 2, "experiments": 3, "app": 4, "__init__": 5, "__main__": 5}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "tests" not in p.relative_to(PACKAGE).parts}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The ddtree_lab modules one ``from ... import ...`` statement loads."""
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return subs or [target]


def imports(module: str) -> set[str]:
    """Every ddtree_lab module ``module`` imports, at module level or inside functions."""
    path = MODULES[module]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.update(_resolve(module, path.name == "__init__.py", node))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in MODULES and m != module}


GRAPH = {m: imports(m) for m in MODULES}


def layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_the_graph_is_read():
    assert "ddtree_lab.core.verify" in GRAPH["ddtree_lab.core.decode"]
    assert "ddtree_lab.core.families.gdn.wy" in GRAPH["ddtree_lab.core.families.gdn.naive"]
    assert len(MODULES) > 30


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_import(module):
    up = sorted(m for m in GRAPH[module] if LAYERS[layer(m)] > LAYERS[layer(module)])
    assert not up, f"{module} ({layer(module)}) imports a higher layer: {up}"


def test_experiments_plumbing_imports_no_study():
    """experiments/ has two folders: plumbing (store, sweeps, summaries, spreads, costs,
    measurement) below studies (each one question of the lab)."""
    plumbing = [m for m in GRAPH if m.startswith("ddtree_lab.experiments.plumbing")]
    assert len(plumbing) >= 6
    bad = {m: sorted(i for i in GRAPH[m] if i.startswith("ddtree_lab.experiments.studies")) for m in plumbing}
    assert not {m: b for m, b in bad.items() if b}
    assert not [p for p in (PACKAGE / "experiments").glob("*.py") if p.name != "__init__.py"], \
        "every experiments module lives in plumbing/ or studies/"


def test_core_imports_only_core_and_common():
    bad = {m: sorted(i for i in GRAPH[m] if layer(i) not in ("core", "common"))
           for m in GRAPH if layer(m) == "core"}
    assert not {m: b for m, b in bad.items() if b}


def find_cycle(graph: dict) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search)."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_no_import_cycle():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _import_targets(module: str) -> list[tuple[str, str]]:
    """(module, name) of every ``from ... import name`` in ``module`` that reaches into ddtree_lab,
    at module level or inside functions."""
    path = MODULES[module]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if path.name == "__init__.py" else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("ddtree_lab"):
                out += [(target, a.name) for a in node.names]
    return out


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_import_inside_the_package_resolves(module):
    """Imports inside functions run late (a CLI command, a notebook step): each one must name a
    module or an attribute that exists, so a moved module cannot leave one behind."""
    import importlib
    missing = []
    for target, name in _import_targets(module):
        mod = importlib.import_module(target)
        if not hasattr(mod, name) and f"{target}.{name}" not in MODULES:
            missing.append(f"from {target} import {name}")
    assert not missing, f"{module}: {missing}"
