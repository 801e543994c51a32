#!/usr/bin/env bash
# Install the lab and run its main job: every notebook in notebooks/ headless, top to bottom,
# figures under figures/. Extra arguments go to `ddtree-lab notebooks` (e.g. --smoke).
# `bash scripts/lab.sh jupyter [args]`: JupyterLab on notebooks/ instead, saving every notebook
# stripped (jupyter_server_config.py), its figures under the git-ignored figures/local/; as root
# (a container) with --allow-root.
# It installs only into a virtual or conda environment (python -m venv .venv && . .venv/bin/activate):
# `bash scripts/lab.sh --system [...]` installs into the active Python anyway, and so does CI (CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
system=0
if [[ "${1:-}" == "--system" ]]; then
    system=1
    shift
fi
in_env() {  # a virtual environment (sys.prefix != sys.base_prefix) or a conda one (CONDA_PREFIX)
    [[ -n "${CONDA_PREFIX:-}" ]] || python -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'
}
if [[ "$system" == 0 && "${CI:-}" != "true" ]] && ! in_env; then
    echo "lab.sh: $(python -c 'import sys; print(sys.executable)') is not a virtual or conda environment:" \
         "create one first (python -m venv .venv && . .venv/bin/activate), or pass --system to install into it anyway" >&2
    exit 2
fi
python -m pip install -q -e ".[dev]"
if [[ "${1:-}" == "jupyter" ]]; then
    shift
    if [[ "$(id -u)" == 0 ]]; then set -- --allow-root "$@"; fi   # root is what a container gives
    exec jupyter lab --config=jupyter_server_config.py "$@" notebooks/
fi
python -m ddtree_lab notebooks "$@"
