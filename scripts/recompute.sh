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
# Logs under data/results/recompute-logs/. Every step is resumable: rerun after a crash.
# Rows of older models stay in the stores unless removed (`--fresh` removes every store first).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=data/results/recompute-logs
if [[ "${1:-}" == "--fresh" ]]; then
  rm -f data/results/*.jsonl data/results/*.csv.gz data/results/quality-*.json
fi
mkdir -p "$LOGS"
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD"  # absolute: the notebooks' kernels run in notebooks/
lab() { python -m ddtree_lab --threads 1 "$@"; }
lane0() {
  lab quality --archs gdn > "$LOGS/quality-gdn.log" 2>&1
  lab dflash2 --archs gdn > "$LOGS/dflash2-gdn.log" 2>&1
}
lane1() {
  lab quality --archs mla > "$LOGS/quality-mla.log" 2>&1
  lab dflash2 --archs mla > "$LOGS/dflash2-mla.log" 2>&1
  python scripts/exactness.py > "$LOGS/exactness.log" 2>&1
}
timing() {
  lab bench --fresh > "$LOGS/bench.log" 2>&1
  lab concurrency > "$LOGS/concurrency.log" 2>&1
  python scripts/bench_tree.py > "$LOGS/bench_tree.log" 2>&1
  python scripts/bench_verify.py > "$LOGS/bench_verify.log" 2>&1
  python scripts/bench_compile.py > "$LOGS/bench_compile.log" 2>&1
  python scripts/bench_batch.py > "$LOGS/bench_batch.log" 2>&1
  python scripts/bench_round.py > "$LOGS/bench_round.log" 2>&1
  python scripts/bench_loop_compile.py > "$LOGS/bench_loop_compile.log" 2>&1
  python scripts/recipe_cost.py > "$LOGS/recipe_cost.log" 2>&1
}
taskset -c 0 bash -c "$(declare -f lab lane0); LOGS=$LOGS; lane0" & p0=$!
taskset -c 1 bash -c "$(declare -f lab lane1); LOGS=$LOGS; lane1" & p1=$!
wait $p0 && wait $p1
taskset -c 0 bash -c "$(declare -f lab timing); LOGS=$LOGS; timing"
taskset -c 0 bash -c "$(declare -f lab); lab notebooks > $LOGS/notebooks.log 2>&1"
python -m ddtree_lab readme
