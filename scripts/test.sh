#!/usr/bin/env bash
# Install the lab (with its test extras and a browser) and run the tests over both cores
# (pytest-xdist; tests that check the checkout's committed files share one worker: --dist loadgroup).
#   bash scripts/test.sh          the fast lane: everything not marked slow (a few minutes)
#   bash scripts/test.sh --full   everything: notebooks in SMOKE mode, the browser test, the
#                                 chi-square and peer-loop tests (what CI runs)
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]" || exit 1
lane=(-m "not slow")
if [[ "${1:-}" == "--full" ]]; then
  lane=()
  shift
  bash scripts/install_browser.sh
fi
python -m pytest -q -n 2 --dist loadgroup "${lane[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "test.sh: pytest collected no tests: failing"; exit 1; fi
exit "$rc"
