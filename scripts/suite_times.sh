#!/usr/bin/env bash
# Time a newcomer's install, the main job and the README's two test commands on a clean clone of this checkout's
# HEAD and store what they took in data/results/suite_times.json (the README's Quick start renders it: `ddtree-lab
# readme`). Run it with nothing else on the machine; it takes about 17 minutes here.
#   fresh install: python -m venv + pip install --no-cache-dir -e ".[dev]"   (a new venv, an empty pip cache)
#   main job:   bash scripts/lab.sh           (every notebook on the committed stores)
#   fast lane:  bash scripts/test.sh          (every test not marked slow, both cores)
#   full suite: CI=true bash .ci/run          (what CI runs)
# Each record: wall seconds of the whole command (install included), the load average before it
# started; for the tests pytest's own seconds and its passed / skipped counts, for the main job
# its notebooks and how many ran at once; and the commit timed.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE="$PWD"; COMMIT="$(git rev-parse --short HEAD)"
CLONE="$(mktemp -d)"; trap 'rm -rf "$CLONE"' EXIT
git clone -q "$HERE" "$CLONE/ddtree_lab" && cd "$CLONE/ddtree_lab"
timed() {  # timed NAME COMMAND...: run it, print one JSON record
  local name=$1; shift; local load t0 t1 log="$CLONE/$name.log"
  load="$(cut -d' ' -f1 /proc/loadavg)"; t0=$(date +%s.%N)
  "$@" > "$log" 2>&1 || { tail -20 "$log" >&2; echo "$name failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  python - "$name" "$log" "$t0" "$t1" "$load" <<'PY'
import json, re, sys
name, log, t0, t1, load = sys.argv[1:]
tail = open(log).read().splitlines()[-5:]
record = {"name": name, "wall_s": round(float(t1) - float(t0), 1), "load_avg_1min": float(load)}
if name == "fresh_install":   # its wall seconds are the record
    pass
elif name == "main_job":   # "all 11 notebooks ran in 79 s (2 at a time, ..."
    m = next(m for l in reversed(tail) if (m := re.search(r"all (\d+) notebooks ran in .*\((\d+) at a time", l)))
    record |= {"notebooks": int(m.group(1)), "jobs": int(m.group(2))}
else:
    line = next(l for l in reversed(tail) if re.search(r"\d+ passed.* in [\d.]+s", l))
    count = lambda word: int(m.group(1)) if (m := re.search(rf"(\d+) {word}", line)) else 0
    record |= {"tests_s": float(re.search(r" in ([\d.]+)s", line).group(1)),
               "passed": count("passed"), "skipped": count("skipped")}
print(json.dumps(record))
PY
}
fresh="$(timed fresh_install bash -c 'python -m venv "$1/venv" && "$1/venv/bin/python" -m pip install -q --no-cache-dir -e ".[dev]"' _ "$CLONE")"
main="$(timed main_job bash scripts/lab.sh --system)"   # the active Python, its install warm
git status --porcelain | grep . && { echo "the main job changed tracked files" >&2; exit 1; }
fast="$(timed fast_lane bash scripts/test.sh)"
full="$(CI=true timed full_suite bash .ci/run)"
cd "$HERE"
python - "$COMMIT" "$fresh" "$main" "$fast" "$full" <<'PY'
import json, os, sys
commit, *records = sys.argv[1:]
out = {"commit": commit, "cpus": os.cpu_count(), "runs": [json.loads(r) for r in records]}
open("data/results/suite_times.json", "w").write(json.dumps(out, indent=1) + "\n")
print(json.dumps(out, indent=1))
PY
pip install -q --no-deps -e . > /dev/null 2>&1 || true   # the clone's install re-pointed the editable one
