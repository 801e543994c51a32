#!/usr/bin/env bash
# Recompute every stored result after retraining (`ddtree-lab train-all`), then render the
# README from the new stores. Timing runs alone (issue 29: a timing taken beside another job
# is not comparable; every timing row records the load average):
#   two lanes, one CPU core each (this machine has two), what is read for tau and tokens:
#     lane 0: quality (GDN), the DFlash 2 study (GDN)
#     lane 1: quality (MLA), the DFlash 2 study (MLA), exactness
#   then one lane, the other core idle, every timing store: the bench (T = 0 / 0.3 / 0.6 / 1),
#     the concurrency sweep, build_tree, verify cost, the compiled verify, batched verify cost,
#     what a round costs (scripts/bench_round.py), the compiled loop (scripts/bench_loop_compile.py),
#     a training step of the drafter recipe (scripts/recipe_cost.py)
#   then every notebook, alone (their stores: leakage, verify cost, sweeps, calibration,
#     teacher-forced; 07 and 08 find the concurrency and DFlash 2 rows).
# Logs under data/results/recompute-logs/. Every step is resumable: rerun after a crash. A step
# that finished leaves STEP.done holding the code version and the checkpoints' manifests' digest;
# a rerun on the same code and models skips it (a store's own rows are resumable besides).
# Rows of older models stay in the stores unless removed (`--fresh` removes every store and
# every .done first).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=data/results/recompute-logs
mkdir -p "$LOGS"
if [[ "${1:-}" == "--fresh" ]]; then
  rm -f data/results/*.jsonl data/results/*.csv.gz data/results/quality-*.json "$LOGS"/*.done
fi
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD"  # absolute: the notebooks' kernels run in notebooks/
STAMP="$(python -c 'from ddtree_lab.experiments.plumbing.results import code_version; print(code_version())')-$(cat data/checkpoints/*/manifest.json | sha256sum | cut -c1-16)"
export LOGS STAMP
lab() { python -m ddtree_lab --threads 1 "$@"; }
step() {  # step NAME COMMAND...: run it into NAME.log unless NAME.done holds this STAMP
  local name=$1; shift
  if [[ "$(cat "$LOGS/$name.done" 2>/dev/null)" == "$STAMP" ]]; then echo "$name: done, skipped"; return 0; fi
  "$@" > "$LOGS/$name.log" 2>&1 || { echo "$name failed: see $LOGS/$name.log" >&2; return 1; }
  echo "$STAMP" > "$LOGS/$name.done"
}
lane0() {
  step quality-gdn lab quality --archs gdn
  step dflash2-gdn lab dflash2 --archs gdn
}
lane1() {
  step quality-mla lab quality --archs mla
  step dflash2-mla lab dflash2 --archs mla
  step exactness python scripts/exactness.py
}
timing() {
  step bench lab bench --fresh
  step concurrency lab concurrency
  step bench_tree python scripts/bench_tree.py
  step bench_verify python scripts/bench_verify.py
  step bench_compile python scripts/bench_compile.py
  step bench_batch python scripts/bench_batch.py
  step bench_round python scripts/bench_round.py
  step bench_loop_compile python scripts/bench_loop_compile.py
  step recipe_cost python scripts/recipe_cost.py
}
funcs="set -e; $(declare -f lab step lane0 lane1 timing)"  # a failed step stops its lane, and the script
taskset -c 0 bash -c "$funcs; lane0" & p0=$!
taskset -c 1 bash -c "$funcs; lane1" & p1=$!
s0=0; wait $p0 || s0=$?; s1=0; wait $p1 || s1=$?
(( s0 == 0 && s1 == 0 )) || { echo "a lane failed (lane0: $s0, lane1: $s1): not timing on stale stores" >&2; exit 1; }
taskset -c 0 bash -c "$funcs; timing"
taskset -c 0 bash -c "$funcs; step notebooks lab notebooks"
python -m ddtree_lab readme
