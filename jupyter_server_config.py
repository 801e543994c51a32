"""JupyterLab for this lab: notebooks are saved stripped (no outputs, no execution counts, no
widget state, the one kernelspec the committed notebooks carry), so running a notebook, tweaking
it and letting autosave write it leaves ``git status`` clean. ``bash scripts/lab.sh jupyter``
starts JupyterLab with this file (``--config``: Jupyter reads no config from the working
directory on its own); the hook is ``ddtree_lab.app.notebooks.strip_on_save`` (tested in
app/tests/test_notebooks.py).

The hook is named by its import path, not given as a function: jupyter_server validates a
configured callable after it is set, sees it as an "existing" hook and warns "Overriding existing
pre_save_hook" although it is registered once; a name is imported (and registered) once, without
the warning. Importing it loads nbformat, not torch (``ddtree_lab`` loads its API lazily)."""

c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
c.FileContentsManager.pre_save_hook = "ddtree_lab.app.notebooks.strip_on_save"
