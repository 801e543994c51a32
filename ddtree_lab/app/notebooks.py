"""Run the lab's notebooks headless, top to bottom (the README's main job and the tests).

Each notebook has a cell tagged ``parameters``; a cell that sets the overrides (``SMOKE``
and friends) is injected right after it, papermill-style, and the executed copy is written
under ``data/results/executed/`` so the committed notebooks stay stripped.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import nbformat

from ..common import RESULTS_DIR, ROOT

NOTEBOOK_DIR = ROOT / "notebooks"
EXECUTED_DIR = RESULTS_DIR / "executed"
SMOKE_FIGURES_DIR = RESULTS_DIR / "smoke" / "figures"


@contextlib.contextmanager
def _environ(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def notebook_paths(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """notebooks/NN_name.ipynb in order."""
    return sorted(Path(directory).glob("[0-9][0-9]_*.ipynb"))


def parameterize(nb, **params):
    """Insert a cell assigning ``params`` right after the cell tagged ``parameters``."""
    idx = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if idx is None:
        raise ValueError("notebook has no cell tagged 'parameters'")
    src = "# injected parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(idx + 1, cell)
    return nb


def run_notebook(path: Path, timeout: int = 3600, **params):
    """Execute one notebook (with injected params) in its own folder; returns the executed nb."""
    from nbclient import NotebookClient
    path = Path(path)
    nb = parameterize(nbformat.read(path, as_version=4), **params)
    smoke_figures = {"DDTREE_LAB_FIGURES": str(SMOKE_FIGURES_DIR)} if params.get("SMOKE") else {}
    with _environ(**smoke_figures):  # the kernel inherits it: SMOKE figures never replace real ones
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, EXECUTED_DIR / path.name)
    return nb


def run_all(smoke: bool = False, directory: Path = NOTEBOOK_DIR) -> dict[str, float]:
    """Execute every notebook; returns {name: seconds}. Stops at the first failing one."""
    paths = notebook_paths(directory)
    if not paths:
        print(f"no notebooks yet in {directory}: nothing to run")
        return {}
    times = {}
    for p in paths:
        t0 = time.monotonic()
        print(f"running {p.name} (SMOKE={smoke}) ...", flush=True)
        run_notebook(p, SMOKE=smoke)
        times[p.name] = time.monotonic() - t0
        print(f"  done in {times[p.name]:.0f} s", flush=True)
    print(f"all {len(paths)} notebooks ran in {sum(times.values()):.0f} s; figures in {ROOT / 'figures'}")
    return times
