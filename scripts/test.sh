#!/usr/bin/env bash
# Install the lab (with its test extras and a browser) and run the whole test suite,
# notebooks in SMOKE mode included. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]" || exit 1
bash scripts/install_browser.sh
python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "test.sh: pytest collected no tests: failing"; exit 1; fi
exit "$rc"
