"""The budget explorer in a real browser: JupyterLab + headless Debian chromium.

Starts ``jupyter lab`` on 127.0.0.1 (free port, random token, a temporary root dir and
temporary settings/workspaces), opens a notebook, runs all cells through the JupyterLab
command API (``window.jupyterapp``, exposed by ``--LabApp.expose_app_in_browser``), waits
for the explorer's figure, presses an arrow key on the budget slider's upper handle and
checks that the figure's <img> changes. The notebook is ``BROWSER_NOTEBOOK`` (run with
SMOKE=True) when it exists, else a small synthetic one that calls ``widgets.explorer``.
Selenium is pointed at /usr/bin/chromedriver so Selenium Manager never downloads anything.
"""
import inspect
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
BROWSER_NOTEBOOK = ROOT / "notebooks" / "05_budget_sweeps.ipynb"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
TEST_BUDGET_S = 110  # whole test, server start to teardown

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                       reason="needs Debian's /usr/bin/chromium and /usr/bin/chromedriver (apt install chromium chromium-driver)"),
]


def synthetic_notebook():
    """A small notebook: build the hand-made results frame of test_plots, show the explorer."""
    from test_plots import make_frame
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Budget explorer smoke notebook (browser test)."),
        nbformat.v4.new_code_cell("SMOKE = False  # unused here", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(inspect.getsource(make_frame) + "\nframe = make_frame()"),
        nbformat.v4.new_code_cell("from ddtree_lab import widgets\nwidgets.explorer(frame)"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def notebook_under_test(directory: Path) -> Path:
    """Write the notebook to open into ``directory``: the real one (SMOKE) if shipped."""
    if BROWSER_NOTEBOOK.exists():
        from ddtree_lab.app.notebooks import parameterize
        nb = parameterize(nbformat.read(BROWSER_NOTEBOOK, as_version=4), SMOKE=True)
    else:
        nb = synthetic_notebook()
    path = directory / "explorer.ipynb"
    nbformat.write(nb, path)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(check, timeout: float, what: str, poll: float = 0.25):
    """Poll ``check()`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _server_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def start_lab(root_dir: Path, home: Path, port: int, token: str) -> subprocess.Popen:
    """jupyter lab in its own process group, settings isolated under ``home``."""
    env = {**os.environ, "DDTREE_LAB_FIGURES": str(home / "figures"),  # never the real figures/
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
           "IPYTHONDIR": str(home / "ipython"), "MPLBACKEND": "agg", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
           f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root_dir}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with open(home / "lab.log", "wb") as log:
        return subprocess.Popen(cmd, env=env, cwd=root_dir, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop_lab(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (server + kernels), SIGKILL what is left after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # kernels that outlived the server, if any
    except ProcessLookupError:
        pass
    proc.wait(timeout=5)


def start_chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(30)
    return driver


KERNEL_READY_JS = """
const app = window.jupyterapp;
const panel = app && app.shell.currentWidget;
const kernel = panel && panel.sessionContext && panel.sessionContext.session
               && panel.sessionContext.session.kernel;
return !!(kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
          && panel.context.isReady);
"""
RUN_ALL_JS = "window.jupyterapp.commands.execute('notebook:run-all-cells'); return true;"
FIGURE_SRC_JS = """
const img = document.querySelector('.ddtree-figure img');
return img ? img.getAttribute('src') : null;
"""
ERRORS_JS = """
return Array.from(document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
  .map(e => e.innerText).filter(t => t.includes('Traceback')).map(t => t.slice(-3000)).join('\\n---\\n');
"""


def _figure_or_fail(driver):
    """The figure's img src once rendered; fails at once if a cell raised."""
    errors = driver.execute_script(ERRORS_JS)
    if errors:
        pytest.fail(f"a notebook cell raised:\n{errors}")
    return driver.execute_script(FIGURE_SRC_JS)


def _budget_handle(driver):
    """The upper handle of the slider whose label reads 'budget' (None until rendered)."""
    from selenium.webdriver.common.by import By
    found = driver.find_elements(By.XPATH, "//div[contains(@class,'widget-slider')]"
                                 "[.//label[normalize-space()='budget']]//div[contains(@class,'noUi-handle-upper')]")
    return found[0] if found else None


def test_explorer_slider_redraws_figure(tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    t0 = time.monotonic()
    work, home = tmp_path / "lab", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    nb_path = notebook_under_test(work)
    port, token = _free_port(), secrets.token_hex(16)
    lab = start_lab(work, home, port, token)
    driver = None
    try:
        _wait_for(lambda: lab.poll() is not None or _server_up(f"http://127.0.0.1:{port}/api/status?token={token}"),
                  40, "jupyter lab to answer")
        assert lab.poll() is None, (home / "lab.log").read_text()[-3000:]
        driver = start_chromium()
        driver.get(f"http://127.0.0.1:{port}/lab/tree/{nb_path.name}?token={token}")
        _wait_for(lambda: driver.execute_script(KERNEL_READY_JS), 45, "the notebook's kernel to be idle")
        driver.execute_script(RUN_ALL_JS)
        remaining = TEST_BUDGET_S - (time.monotonic() - t0)
        before = _wait_for(lambda: _figure_or_fail(driver), max(10, remaining - 20),
                           "the explorer figure (.ddtree-figure img)")
        handle = _wait_for(lambda: _budget_handle(driver), 10, "the budget slider")
        upper = handle.get_attribute("aria-valuenow")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", handle)
        ActionChains(driver).send_keys(Keys.ARROW_LEFT).perform()  # keys, not a click: toasts may cover it
        after = _wait_for(lambda: (src := driver.execute_script(FIGURE_SRC_JS)) != before and src, 15,
                          "the figure to change after moving the budget slider")
        assert after.startswith("data:image/png") and after != before
        assert handle.get_attribute("aria-valuenow") != upper  # the handle really moved
    finally:
        if driver is not None:
            driver.quit()
        stop_lab(lab)
    print(f"browser test took {time.monotonic() - t0:.1f} s")
