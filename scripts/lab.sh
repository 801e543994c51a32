#!/usr/bin/env bash
# Install the lab and run its main job: every notebook in notebooks/ headless, top to bottom,
# figures under figures/. Extra arguments go to `ddtree-lab notebooks` (e.g. --smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]"
python -m ddtree_lab notebooks "$@"
