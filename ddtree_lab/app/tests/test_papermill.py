"""The notebooks follow papermill's parameter convention, so papermill can run them.

papermill reads the cell tagged ``parameters`` line by line (``NAME = value  # help``); a
line it cannot parse (an ``=`` inside the comment, for one) silently drops that parameter
from ``papermill --help-notebook`` and from its type checks. Every global the cell assigns
must be one papermill sees, with the value the cell gives it.
"""
import ast

import nbformat
import pytest

from ddtree_lab.app.notebooks import notebook_paths

papermill = pytest.importorskip("papermill")
from papermill.translators import PythonTranslator  # noqa: E402


def parameters_cell(nb):
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    return cells[0]


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_papermill_sees_every_parameter(path):
    cell = parameters_cell(nbformat.read(path, as_version=4))
    assigned = {t.id: ast.unparse(n.value) for n in ast.parse(cell.source).body if isinstance(n, ast.Assign)
                for t in n.targets}
    seen = {p.name: p.default for p in PythonTranslator.inspect(cell)}
    print(f"{path.name}: {sorted(seen)}")
    assert seen.keys() == assigned.keys(), f"papermill misses {sorted(set(assigned) - set(seen))}"
    assert all(ast.literal_eval(seen[k]) == ast.literal_eval(v) for k, v in assigned.items())
    assert "SMOKE" in seen


@pytest.mark.parametrize("path", notebook_paths()[:1], ids=lambda p: p.stem)
def test_papermill_injects_parameters_where_our_runner_does(path):
    """papermill's and ``notebooks.parameterize``'s injected cell sit right after 'parameters'."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook
    from ddtree_lab.app.notebooks import parameterize
    ours = parameterize(nbformat.read(path, as_version=4), SMOKE=True)
    theirs = parameterize_notebook(load_notebook_node(str(path)), {"SMOKE": True})
    idx = [i for i, c in enumerate(theirs.cells) if "injected-parameters" in c.metadata.get("tags", [])]
    assert idx == [i for i, c in enumerate(ours.cells) if "injected-parameters" in c.metadata.get("tags", [])]
    assert "SMOKE = True" in theirs.cells[idx[0]].source and "SMOKE = True" in ours.cells[idx[0]].source
