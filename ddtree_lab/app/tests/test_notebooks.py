"""Every notebook runs top to bottom in SMOKE mode from the shipped checkpoints and shows
what a researcher should see (every figure inline, no object reprs, no progress bars), and
the committed notebooks are stripped (no outputs, no widget state)."""
import json
import re

import nbformat
import pytest

from ddtree_lab.app.notebooks import layout_problems, notebook_paths, output_problems, parameterize, run_notebook

NOTEBOOKS = notebook_paths()


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) == 13


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_stripped_and_well_formed(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    params = nb.cells[1]
    assert params.cell_type == "code" and "parameters" in params.metadata.get("tags", [])
    assert "SMOKE = False" in params.source
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name}: outputs committed"
    assert "widgets" not in nb.metadata, f"{path.name}: widget state committed"
    assert path.stat().st_size < 40_000


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_is_shown_and_smoke_aware(path):
    """Figures go through show_figure(fig, name, SMOKE): saved (never into figures/ under
    SMOKE) and shown inline; no bare save_figure / display(fig) / plt.show."""
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert not re.search(r"\b(save_figure|display|plt\.show)\(", source)
    calls = re.findall(r"show_figure\(([^\n]*)\)", source)
    assert calls and all(c.rstrip().endswith("SMOKE") for c in calls), calls


def test_output_problems_sees_what_a_reader_would():
    nb = nbformat.v4.new_notebook()
    image = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "[figure]"})
    nb.cells = [nbformat.v4.new_code_cell("show_figure(fig, 'a', SMOKE)", outputs=[image]),
                nbformat.v4.new_code_cell("show_figure(fig, 'b', SMOKE)"),
                nbformat.v4.new_code_cell("save_figure(fig, 'c')", outputs=[nbformat.v4.new_output(
                    "execute_result", data={"text/plain": "PosixPath('figures/c.png')"}, execution_count=1)]),
                nbformat.v4.new_code_cell("lab.check(...)", outputs=[nbformat.v4.new_output(
                    "execute_result", data={"text/plain": "True"}, execution_count=2)]),
                nbformat.v4.new_code_cell("load", outputs=[nbformat.v4.new_output(
                    "display_data", data={"text/plain": "Loading weights:   0%|  | 0/108"})]),
                nbformat.v4.new_code_cell("explorer(frame)")]
    assert output_problems(nb) == ["code cell 1: makes a figure and shows none",
                                   "code cell 2: shows \"PosixPath('figures/c.png')\"",
                                   "code cell 3: shows 'True'",
                                   "code cell 4: shows 'Loading weights:   0%|  | 0/108'",
                                   "code cell 5: the explorer holds no figure"]
    nb.cells = nb.cells[:1]
    assert output_problems(nb) == []


def test_layout_problems_sees_reprs_long_and_wide_tables():
    """The issue-19 findings a script can see: a dataclass / dict / tuple repr as output, a
    table of more than ~15 rows, one too wide for the cell, one pandas wrapped."""
    assert layout_problems("ConcurrencyGrid(archs=('gdn',), budgets=(1, 2))") == [
        "shows a raw repr 'ConcurrencyGrid(archs='..."]
    assert layout_problems("commit: {'fork': {'state': 0.0}}")[0].startswith("shows a raw repr \"{'fork': ")
    assert layout_problems("got: [('gdn', 0.038, 0.028)]")[0].startswith("shows a raw repr")
    rows = "budget  tau  speedup\n" + "\n".join(f"{b}  {b / 10:.3f}  1.2" for b in range(20))
    assert layout_problems(rows) == ["prints a table of 20 rows (at most ~15; point to the store for the rest)"]
    assert layout_problems("budget  tau  speedup\n" + "\n".join(f"{b}  0.1  1.2" for b in range(15))) == []
    wide = " ".join(f"{i:.3f}" for i in range(30))
    assert layout_problems(wide) == [f"prints a table {len(wide)} characters wide (it wraps)"]
    assert layout_problems("a  b  \\\n1  2\n") == ["prints a table pandas wrapped (a line ending in '\\')"]
    assert layout_problems("gdn: surrogate expects 2.36 accepted tokens per round, observed 4.00 " * 3) == []


def test_a_table_of_ratios_and_intervals_too_wide_for_the_column_is_seen():
    """05's compiled-loop table (issue 60): ratios with intervals, 230 characters a line, wrapped."""
    line = ("   gdn                      lab DDTree 16 5.18         378            489       1.37x [1.23, 1.52]"
            "       2.41x [1.33, 2.87] 1.49x [0.92, 1.96] noise  1.34x [0.77, 52.96] noise      yes      0      10")
    problems = layout_problems("\n".join([line] * 4))
    assert problems == [f"prints a table {len(line)} characters wide (it wraps)"]
    assert layout_problems("\n".join([line[:110]] * 4)) == []


def test_layout_problems_see_the_issue_19_findings_in_an_executed_notebook():
    nb = nbformat.v4.new_notebook()
    table = "c  best  ratio\n" + "\n".join(f"{c}  16  0.9" for c in range(20))
    nb.cells = [nbformat.v4.new_code_cell("print(grid)", outputs=[nbformat.v4.new_output(
                    "stream", name="stdout", text="ConcurrencyGrid(archs=('gdn', 'mla'))\n")]),
                nbformat.v4.new_code_cell("print(table)", outputs=[nbformat.v4.new_output(
                    "stream", name="stdout", text=table)])]
    assert output_problems(nb) == ["code cell 0: shows a raw repr 'ConcurrencyGrid(archs='...",
                                   "code cell 1: prints a table of 20 rows (at most ~15; point to the store for the rest)"]


CHECKS_NOT_YET_IN_CLAIMS: set = set()   # notebooks whose checks are still written inline (none)


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xfail(reason="checks not yet in app.claims"))
                                  if p.stem in CHECKS_NOT_YET_IN_CLAIMS else p for p in NOTEBOOKS],
                         ids=lambda p: p.stem)
def test_every_check_comes_from_the_package_and_smoke_never_downgrades_one(path):
    """Checks are ``claims`` functions (``tests/test_claims.py`` feeds each a wrong result):
    no claim spelled out in a cell, and no SMOKE switch from check to compare (a SMOKE run
    skips a check it cannot make with ``record.check_unless``, which says so and counts it)."""
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    inline = re.findall(r"(?:lab|record)\.(?:check|compare|check_unless)\((?:f?[\"']|SMOKE and [^,]*, *f?[\"'])", source)
    assert not inline, f"{path.name}: a check written in the notebook: {inline}"
    assert "lab.compare if SMOKE" not in source and "if SMOKE else lab.check" not in source


def _as_run_in_jupyterlab(nb) -> dict:
    """A committed notebook as JupyterLab holds it after a run: outputs, execution counts, a
    full language_info, widget state, cell metadata the UI adds."""
    nb = json.loads(nbformat.writes(nb))
    for i, cell in enumerate(nb["cells"]):
        cell["metadata"]["scrolled"] = True
        if cell["cell_type"] == "code":
            cell["execution_count"] = i
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "tau 4.29\n"},
                               {"output_type": "display_data", "metadata": {},
                                "data": {"image/png": "iVBORw0KGgo=", "text/plain": "[figure]"}}]
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.12.3", "mimetype": "text/x-python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def test_strip_notebook_leaves_the_committed_notebook():
    from ddtree_lab.app.notebooks import strip_notebook
    committed = nbformat.read(NOTEBOOKS[5], as_version=4)
    run = _as_run_in_jupyterlab(committed)
    assert any(c.get("outputs") for c in run["cells"])
    assert nbformat.writes(nbformat.from_dict(strip_notebook(run))) == nbformat.writes(committed)


def test_strip_notebook_writes_the_committed_kernelspec():
    """A kernel names itself ("Python 3 (ipykernel)"): the save writes the one kernelspec every
    committed notebook carries (issue 67: 05 changed only its kernelspec, and git status showed it)."""
    from ddtree_lab.app.notebooks import KERNELSPEC, strip_notebook
    assert all(nbformat.read(p, as_version=4).metadata.kernelspec == KERNELSPEC for p in NOTEBOOKS)
    committed = nbformat.read(NOTEBOOKS[5], as_version=4)
    run = _as_run_in_jupyterlab(committed)
    run["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
    assert nbformat.writes(nbformat.from_dict(strip_notebook(run))) == nbformat.writes(committed)


def test_the_config_registers_its_save_hook_once(tmp_path):
    """jupyter_server_config.py names the hook by its import path: a function given there would be
    seen, once set, as an existing hook ("Overriding existing pre_save_hook" in the server log)."""
    import warnings
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader
    from ddtree_lab.app.notebooks import strip_on_save
    from ddtree_lab.common import ROOT
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT)).load_config()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = FileContentsManager(root_dir=str(tmp_path), config=config)
    assert manager.pre_save_hook is strip_on_save
    assert [str(w.message) for w in caught if "pre_save_hook" in str(w.message)] == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_jupyterlab_save_after_a_run_leaves_the_file_as_committed(path, tmp_path):
    """The repository's jupyter_server_config.py (``bash scripts/lab.sh jupyter``) wires the
    pre-save hook into Jupyter's own FileContentsManager: saving a run notebook (what autosave
    does) writes exactly the committed bytes, so git status stays clean."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader
    from ddtree_lab.common import ROOT
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT)).load_config()
    manager = FileContentsManager(root_dir=str(tmp_path), config=config)
    model = {"type": "notebook", "format": "json", "content": _as_run_in_jupyterlab(nbformat.read(path, as_version=4))}
    manager.save(model, path.name)
    assert (tmp_path / path.name).read_bytes() == path.read_bytes()


def test_parameterize_injects_after_the_parameters_cell():
    nb = parameterize(nbformat.read(NOTEBOOKS[0], as_version=4), SMOKE=True)
    assert nb.cells[2].source.endswith("SMOKE = True")
    assert "injected-parameters" in nb.cells[2].metadata["tags"]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(path):
    nb = run_notebook(path, timeout=900, SMOKE=True)
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "match:    True" in text, "the notebook checked no claim"
    assert "match:    False" not in text
    assert output_problems(nb) == [], "\n".join(output_problems(nb))


def _stub_run(monkeypatch, fail: str | None = None, hold: float = 0.0):
    """run_notebook replaced: records (name, start, end); raises for the notebook named ``fail``."""
    import threading
    import time as _time
    from ddtree_lab.app import notebooks
    seen, lock = [], threading.Lock()

    def run(p, **kw):
        start = _time.monotonic()
        if p.name[:2] == fail:
            raise RuntimeError(f"{p.name} failed")
        _time.sleep(hold)
        with lock:
            seen.append((p.name, start, _time.monotonic()))
        return nbformat.v4.new_notebook()
    monkeypatch.setattr(notebooks, "run_notebook", run)
    return seen


def test_run_all_runs_notebooks_side_by_side_and_returns_them_in_order(monkeypatch):
    from ddtree_lab.app import notebooks
    seen = _stub_run(monkeypatch, hold=0.3)
    times = notebooks.run_all(only=("00", "01", "02", "03"), jobs=2)
    assert list(times) == sorted(times) and len(times) == 4
    (_, s0, e0), (_, s1, e1) = sorted(seen, key=lambda r: r[1])[:2]
    assert s1 < e0, "with jobs=2 the second notebook starts before the first ends"


def test_run_all_stops_at_the_first_failure(monkeypatch):
    from ddtree_lab.app import notebooks
    seen = _stub_run(monkeypatch, fail="01")
    with pytest.raises(RuntimeError, match="01_.* failed"):
        notebooks.run_all(only=("00", "01", "02", "03"), jobs=1)
    assert [name[:2] for name, *_ in seen] == ["00"], "no notebook starts after a failure"


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_run_all_refuses_a_bad_jobs(jobs):
    from ddtree_lab.app import notebooks
    with pytest.raises(ValueError, match=r"jobs must be an int >= 1, got"):
        notebooks.run_all(only=("00",), jobs=jobs)


def test_default_jobs_is_one_per_core_at_most_the_count(monkeypatch):
    from ddtree_lab.app import notebooks
    monkeypatch.setattr(notebooks.os, "cpu_count", lambda: 2)
    assert notebooks.default_jobs(11) == 2 and notebooks.default_jobs(1) == 1
    monkeypatch.setattr(notebooks.os, "cpu_count", lambda: None)
    assert notebooks.default_jobs(11) == 1
