#!/usr/bin/env bash
# The GPU run of issue 12, as one script (planned for one H200, under 8 minutes):
#   exactness of every verify mode vs the stock forward at the published layer widths, and the
#   verify-cost curve 1..512, in float32 and bfloat16, on CUDA with the stock kernels
#   and a compiled verify (torch.compile; on CUDA also mode reduce-overhead, CUDA graphs)
#   transformers picks up there (flash-linear-attention, causal-conv1d if they install).
# Output: data/results/gpu/{exactness,gdn_cost}-<dtype>.{csv,json} and gdn_cost-<dtype>.png,
# verify_projection-bfloat16.csv: Kimi K2.6 layers' measured verify ms by budget beside the projection,
# and fixed_cost.csv: the stack's fixed cost per forward (issue 69: a tiny MoE's 1-token and 16-token
# forward, eager and compiled; the main unknown of data/results/k26_bounds.csv), measured first.
#
#   bash scripts/gpu_check.sh          # on a GPU machine
#   bash scripts/gpu_check.sh --tiny   # the same steps with the toy presets on whatever device
#                                      # there is (the CPU smoke run the tests make)
#   bash scripts/gpu_check.sh --dry    # the fixed-cost step only, eager, 3 repeats, on the CPU (seconds)
# Environment: GPU_CHECK_OUT (output folder), GPU_CHECK_BUDGETS (cost budgets, e.g. "1 16"),
# GPU_CHECK_EXACT_BUDGETS (exactness budgets), GPU_CHECK_REPEATS (timing repeats, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."

TINY=""
[[ "${1:-}" == "--tiny" ]] && TINY="--tiny"
OUT="${GPU_CHECK_OUT:-data/results/gpu}"
if [[ "${1:-}" == "--dry" ]]; then
    mkdir -p "$OUT"
    python -m ddtree_lab.experiments.studies.fixed_cost --dry --device cpu --out "$OUT"
    echo "gpu_check --dry: wrote $OUT/fixed_cost.csv"
    exit 0
fi
COST_BUDGETS="${GPU_CHECK_BUDGETS:-1 2 4 8 16 32 64 128 256 512}"
EXACT_BUDGETS="${GPU_CHECK_EXACT_BUDGETS:-1 16 64 256 512}"
mkdir -p "$OUT"
if python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    DEVICE=cuda
    THREADS=8
    # optional kernels: used by the stock GDN path (prefill, the oracle, the "stock" column)
    timeout 150 pip install -q flash-linear-attention || echo "flash-linear-attention: not installed, torch fallback"
    timeout 150 pip install -q --no-build-isolation causal-conv1d || echo "causal-conv1d: not installed, torch fallback"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt" || true
else
    [[ -n "$TINY" ]] || { echo "no CUDA device: run with --tiny for the CPU smoke run" >&2; exit 2; }
    DEVICE=cpu
    THREADS=1
fi
CKPT="$(mktemp -d)"
trap 'rm -rf "$CKPT"' EXIT

# the stack's fixed cost per forward first (short: a tiny MoE), so a cut-off run still has it
python -m ddtree_lab.experiments.studies.fixed_cost --device "$DEVICE" --out "$OUT" ${TINY:+--dry} \
    || echo "fixed cost per forward: failed (see above)"

for DTYPE in float32 bfloat16; do
    COMMON=(--device "$DEVICE" --dtype "$DTYPE" --out "$OUT" --tag="-$DTYPE" --checkpoint "$CKPT" --threads "$THREADS" $TINY)
    python scripts/full_size_check.py exact "${COMMON[@]}" --budgets $EXACT_BUDGETS
    python scripts/full_size_check.py cost "${COMMON[@]}" --budgets $COST_BUDGETS --repeats "${GPU_CHECK_REPEATS:-5}"
done
# a compiled verify (issue 17 item 5): inductor, then CUDA graphs (mode reduce-overhead) on a GPU
COMPILE_DEFAULT="1 16 64 256"
[[ -n "$TINY" ]] && COMPILE_DEFAULT="1"
COMPILE_BUDGETS="$(echo "${GPU_CHECK_COMPILE_BUDGETS:-$COMPILE_DEFAULT}" | tr ' ' ',')"
python scripts/bench_compile.py --budgets "$COMPILE_BUDGETS" --repeats "${GPU_CHECK_REPEATS:-5}" \
    --out "$OUT/compile-default.csv" ${TINY:+--archs gdn-toy}
if [[ "$DEVICE" == cuda ]]; then
    python scripts/bench_compile.py --mode reduce-overhead --budgets "$COMPILE_BUDGETS" \
        --repeats "${GPU_CHECK_REPEATS:-5}" --out "$OUT/compile-reduce-overhead.csv" \
        || echo "compiled verify (reduce-overhead): failed (see above)"
fi
# the measured verify beside the GPU projection (issue 61): Kimi K2.6's dense and MoE layers at full
# width (384 routed experts on a GPU), measured ms by budget against the datasheet projection
ACCELERATOR=()
[[ "$DEVICE" == cpu ]] && ACCELERATOR=(--accelerator h200)   # the CPU smoke run: projected for an H200, labelled
python scripts/gpu_projection_check.py --device "$DEVICE" --dtype bfloat16 --out "$OUT" --threads "$THREADS" \
    $TINY "${ACCELERATOR[@]}" --budgets $COST_BUDGETS --repeats "${GPU_CHECK_REPEATS:-5}"
echo "gpu_check: wrote $(ls "$OUT" | tr '\n' ' ')"
