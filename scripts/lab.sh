#!/usr/bin/env bash
# Install the lab and run its main job: every notebook in notebooks/ headless, top to bottom,
# figures under figures/. Extra arguments go to `ddtree-lab notebooks` (e.g. --smoke).
# `bash scripts/lab.sh jupyter [args]`: JupyterLab on notebooks/ instead, saving every notebook
# stripped (jupyter_server_config.py), its figures under the git-ignored figures/local/.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]"
if [[ "${1:-}" == "jupyter" ]]; then
    shift
    exec jupyter lab --config=jupyter_server_config.py "$@" notebooks/
fi
python -m ddtree_lab notebooks "$@"
