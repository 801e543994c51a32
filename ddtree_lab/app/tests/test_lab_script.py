"""``scripts/lab.sh`` (the main job and ``lab.sh jupyter``) run with stand-ins for ``python``,
``jupyter`` and ``id`` on PATH that only log their arguments: it installs only into a virtual or
conda environment unless ``--system`` or CI=true, and passes ``--allow-root`` to JupyterLab as root.
The environment question (``python -c``) goes to a real interpreter: the base one, or a venv."""
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ddtree_lab.common import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)   # not a venv (a venv's base interpreter)
INSTALL = "python -m pip install -q -e .[dev]"


def lab_sh(tmp_path: Path, *args: str, python: str = BASE_PYTHON, uid: int = 1000, **env: str):
    """(exit status, stderr lines, logged commands) of ``bash scripts/lab.sh ARGS``."""
    shims, log = tmp_path / "bin", tmp_path / "log"
    shims.mkdir(exist_ok=True)
    scripts = {"python": f'if [ "$1" = -c ]; then exec "{python}" "$@"; fi\necho "python $*" >> "{log}"',
               "jupyter": f'echo "jupyter $*" >> "{log}"', "id": f"echo {uid}"}
    for name, body in scripts.items():
        (shims / name).write_text(f"#!/bin/sh\n{body}\n")
        (shims / name).chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "CONDA_PREFIX")}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "lab.sh"), *args], capture_output=True, text=True,
                         env=base | {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"} | env)
    logged = log.read_text().splitlines() if log.exists() else []
    return out.returncode, out.stderr.splitlines(), logged


def test_it_refuses_to_install_outside_an_environment_in_one_line(tmp_path):
    rc, err, logged = lab_sh(tmp_path, "--smoke")
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("lab.sh: ") and "python -m venv .venv" in err[0] and "--system" in err[0]
    assert logged == []   # nothing installed, nothing run


@pytest.mark.parametrize("how", ["--system", "CI=true", "conda", "venv"])
def test_it_installs_into_an_environment_or_when_told(tmp_path, how):
    kwargs = {"--system": {}, "CI=true": {"CI": "true"}, "conda": {"CONDA_PREFIX": str(tmp_path)}}.get(how, {})
    if how == "venv":
        venv.create(tmp_path / "venv", with_pip=False, symlinks=os.name != "nt")
        kwargs = {"python": str(tmp_path / "venv" / "bin" / "python")}
    rc, err, logged = lab_sh(tmp_path, *(["--system"] if how == "--system" else []), "--smoke", **kwargs)
    assert (rc, err) == (0, [])
    assert logged == [INSTALL, "python -m ddtree_lab notebooks --smoke"]   # --system itself is dropped


@pytest.mark.parametrize("uid", [0, 1000])
def test_jupyter_passes_allow_root_as_root(tmp_path, uid):
    rc, err, logged = lab_sh(tmp_path, "--system", "jupyter", "--port", "8899", uid=uid)
    assert (rc, err) == (0, [])
    allow = ["--allow-root"] if uid == 0 else []
    assert logged == [INSTALL, " ".join(["jupyter lab --config=jupyter_server_config.py", *allow,
                                         "--port 8899 notebooks/"])]
