"""Run the lab's notebooks headless, top to bottom (the README's main job and the tests).

Each notebook has a cell tagged ``parameters``; a cell that sets the overrides (``SMOKE``
and friends) is injected right after it, papermill-style, and the executed copy is written
under ``data/results/executed/`` so the committed notebooks stay stripped. ``output_problems``
says what a researcher would see wrong in an executed notebook: a figure-making cell with no
image, an object repr or a progress bar as output, an error.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

from ..common import MAIN_JOB_ENV, RESULTS_DIR, ROOT

NOTEBOOK_DIR = ROOT / "notebooks"
EXECUTED_DIR = RESULTS_DIR / "executed"
OBJECT_REPRS = ("<Figure size", "PosixPath(", "<matplotlib", "Loading weights")  # clutter, never a result


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


def run_notebook(path: Path, timeout: int = 3600, executed_dir: Path | None = None, main_job: bool = False,
                 **params):
    """Execute one notebook (with injected params) in its own folder; returns the executed nb,
    written to ``executed_dir`` (default ``EXECUTED_DIR``). Figures: SMOKE to the smoke folder
    (the notebooks pass SMOKE to ``show_figure``); ``figures/`` only when ``main_job`` (the
    kernel then carries ``common.MAIN_JOB_ENV``), else the git-ignored ``figures/local/``."""
    path = Path(path)
    nb = parameterize(nbformat.read(path, as_version=4), **params)
    env = {k: v for k, v in os.environ.items() if k != MAIN_JOB_ENV} | ({MAIN_JOB_ENV: "1"} if main_job else {})
    with tempfile.TemporaryDirectory(prefix="ddtree-kernel-") as sockets:  # IPC: no TCP transport warning
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
        NotebookClient(nb, timeout=timeout, kernel_name="python3", config=ipc,
                       resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    executed_dir = Path(executed_dir or EXECUTED_DIR)
    executed_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed_dir / path.name)
    return nb


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return output.get("data", {}).get("text/plain", "")


def _widget_images(nb) -> int:
    """PNG outputs held by Output widgets in the stored widget state (the explorer's figure)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return sum("image/png" in o.get("data", {}) for m in state.values() if m.get("model_name") == "OutputModel"
               for o in m.get("state", {}).get("outputs", []))


def figures_shown(nb) -> int:
    """Images an executed notebook shows: cell outputs plus the explorer's (widget state)."""
    cells = [c for c in nb.cells if c.cell_type == "code"]
    return sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs) + _widget_images(nb)


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"   # its text/plain is a repr no reader sees
RAW_REPRS = (re.compile(r"\b[A-Z]\w*\(\w+="),      # a dataclass repr: ConcurrencyGrid(archs=...
             re.compile(r"\{'[^']*': "),           # a dict repr: {'gdn': 1.69, ...}
             re.compile(r"\[\('|\(np\.float\d*\("))  # a list of tuples / numpy scalar reprs: (np.float64(0.5), ...
MAX_TABLE_ROWS, MAX_TABLE_WIDTH = 15, 120      # rows of numbers; wider wraps in a notebook column


def _numeric(field: str, intervals: bool = False) -> bool:
    """A number as a table prints it ('1.2', '5%', '1.37x'); ``intervals``: also an interval's
    ends ('[1.23,', '1.52]')."""
    try:
        float((field.strip("[],") if intervals else field).rstrip("%x"))
        return True
    except ValueError:
        return field in ("NaN", "None", "True", "False")


def _table_runs(text: str) -> list[list[str]]:
    """Runs of consecutive table-like lines (>= 3 fields, at least half of them numbers; in a line
    whose columns are padded apart, a ratio's interval counts as numbers too)."""
    runs, run = [], []
    for line in text.splitlines():
        fields = line.split()
        aligned = len(re.findall(r"\S {2,}\S", line)) >= 2   # columns padded apart: a printed frame, not prose
        numeric = sum(_numeric(f, intervals=aligned) for f in fields)
        if len(fields) >= 3 and 2 * numeric >= len(fields):
            run.append(line)
        elif run:
            runs, run = runs + [run], []
    return runs + [run] if run else runs


def layout_problems(text: str) -> list[str]:
    """What a printed output does to a reader: a raw repr (dataclass, dict, tuples), a table
    of more than ~15 rows, or one so wide it wraps. Empty: nothing."""
    problems = [f"shows a raw repr {m.group(0)!r}..." for r in RAW_REPRS if (m := r.search(text))]
    if re.search(r" \\\n", text):
        problems.append("prints a table pandas wrapped (a line ending in '\\')")
    for run in _table_runs(text):
        if len(run) > MAX_TABLE_ROWS:
            problems.append(f"prints a table of {len(run)} rows (at most ~15; point to the store for the rest)")
        width = max(map(len, run))
        if width > MAX_TABLE_WIDTH:
            problems.append(f"prints a table {width} characters wide (it wraps)")
    return problems


def output_problems(nb, widget_state: bool = True) -> list[str]:
    """What is wrong with an executed notebook as a reader sees it (empty: nothing): a cell
    calling ``show_figure`` without an image, an explorer without its figure in the stored
    widget state (``widget_state=False``: not checked, e.g. a live page shows it), an object
    repr, progress bar or bare True/False as output, an error."""
    problems = []
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        if "show_figure(" in cell.source and not any("image/png" in o.get("data", {}) for o in cell.outputs):
            problems.append(f"code cell {i}: makes a figure and shows none")
        if widget_state and "explorer(" in cell.source and not _widget_images(nb):
            problems.append(f"code cell {i}: the explorer holds no figure")
        for out in cell.outputs:
            text = _text(out)
            if out.get("output_type") == "error":
                problems.append(f"code cell {i}: {out.get('ename')}: {out.get('evalue')}")
            elif any(r in text for r in OBJECT_REPRS) or (out.get("output_type") == "execute_result"
                                                          and text in ("True", "False")):
                problems.append(f"code cell {i}: shows {text[:70]!r}")
        printed = "".join(_text(o) for o in cell.outputs if o.get("output_type") != "error"
                          and WIDGET_MIME not in o.get("data", {}))
        problems += [f"code cell {i}: {p}" for p in layout_problems(printed)]
    return problems


def default_jobs(count: int) -> int:
    """How many notebooks run at once by default: one per core (each kernel decodes on one
    thread: ``core.threads``), at most ``count``. Not the idle cores: the install that
    ``scripts/lab.sh`` runs just before would leave the load average at one busy core.
    On a machine others share, ``--jobs 1``."""
    return max(1, min(count, os.cpu_count() or 1))


def run_all(smoke: bool = False, directory: Path = NOTEBOOK_DIR, only=(), jobs: int | None = None) -> dict[str, float]:
    """Execute every notebook (``only``: those whose number is listed, e.g. ("02", "05")), ``jobs``
    at a time, each in its own kernel (default ``default_jobs``: one per core); returns
    {name: seconds}. On the first failure no further notebook starts, the running ones finish,
    and the failure is raised."""
    paths = [p for p in notebook_paths(directory) if not only or p.name[:2] in only]
    if not paths:
        print(f"no notebooks yet in {directory}: nothing to run")
        return {}
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    jobs = jobs or default_jobs(len(paths))
    t_all = time.monotonic()
    failed = threading.Event()   # set by the thread that saw a failure: no notebook starts after it

    def one(p: Path) -> float | None:
        if failed.is_set():
            return None
        t0 = time.monotonic()
        print(f"running {p.name} (SMOKE={smoke}) ...", flush=True)
        try:
            nb = run_notebook(p, main_job=not smoke, SMOKE=smoke)   # only this run at defaults writes figures/
        except BaseException:
            failed.set()
            raise
        seconds = time.monotonic() - t0
        problems = "".join(f"\n  ! {line}" for line in output_problems(nb))
        print(f"  {p.name} done in {seconds:.0f} s, {figures_shown(nb)} figures shown{problems}", flush=True)
        return seconds

    times = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:   # a thread waits on its kernel's process
        futures = {pool.submit(one, p): p for p in paths}
        try:
            for future in as_completed(futures):
                if (seconds := future.result()) is not None:   # raises the notebook's failure
                    times[futures[future].name] = seconds
        except BaseException:   # a failure or Ctrl-C: nothing more starts; the running kernels finish
            failed.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    print(f"all {len(paths)} notebooks ran in {time.monotonic() - t_all:.0f} s ({jobs} at a time, "
          f"{sum(times.values()):.0f} s of kernels); figures in {ROOT / 'figures'}"
          + (" (SMOKE: under data/results/smoke/figures)" if smoke else ""))
    return dict(sorted(times.items()))


# ----------------------------------------------------------------------------- saving from JupyterLab

KEPT_CELL_METADATA = ("tags",)   # "parameters" / "injected-parameters": what papermill and run_notebook read
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}  # every committed notebook's


def strip_notebook(content: dict) -> dict:
    """A notebook (nbformat v4, as a dict) as it is committed: no outputs, no execution counts,
    no widget state; cell metadata only ``KEPT_CELL_METADATA``; notebook metadata only the
    kernelspec, as ``KERNELSPEC`` (a kernel names itself, e.g. "Python 3 (ipykernel)"), and the
    language's name (a kernel fills in versions). Changes ``content`` in place and returns it: the
    sources, the cell ids and the cell order are untouched."""
    for cell in content.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        meta = cell.get("metadata", {})
        cell["metadata"] = {k: meta[k] for k in KEPT_CELL_METADATA if k in meta}
    meta = content.get("metadata", {})
    kept = {"kernelspec": dict(KERNELSPEC)} if "kernelspec" in meta else {}
    if "language_info" in meta:
        kept["language_info"] = {"name": meta["language_info"].get("name", "python")}
    content["metadata"] = kept
    return content


def strip_on_save(model: dict, **kwargs) -> None:
    """A Jupyter ContentsManager ``pre_save_hook`` (``jupyter_server_config.py`` at the repository
    root; ``bash scripts/lab.sh jupyter`` starts JupyterLab with it): every notebook is written
    stripped (``strip_notebook``), so a save or an autosave after a run leaves ``git status``
    clean. The open page keeps its outputs; only the file on disk is stripped."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        strip_notebook(model["content"])
