"""JupyterLab for this lab: notebooks are saved stripped (no outputs, no execution counts, no
widget state), so running a notebook, tweaking it and letting autosave write it leaves
``git status`` clean. ``bash scripts/lab.sh jupyter`` starts JupyterLab with this file; the
hook is ``ddtree_lab.app.notebooks.strip_on_save`` (tested in app/tests/test_notebooks.py)."""


def _strip_on_save(model, **kwargs):
    from ddtree_lab.app.notebooks import strip_on_save   # late: the server starts without the lab's imports
    strip_on_save(model, **kwargs)


c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
c.FileContentsManager.pre_save_hook = _strip_on_save
