#!/usr/bin/env bash
# The family study's pairs (notebook 11): one tiny hybrid per recurrent family, each trained
# MINUTES (default 10) on the lab's corpus by the README's own flow (`ddtree-lab tiny-target
# --family F`), then its DFlash drafter (`ddtree-lab train-drafter --target --preset quick`).
# A finished directory is kept: rerun to resume after an interrupt (a target or a drafter is the
# unit of work; a drafter's own run resumes from its .run folder).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${MINUTES:-10}"
out=data/checkpoints/families
mkdir -p "$out"
for f in ${FAMILIES:-gdn kda mamba2 short_conv}; do
  if [[ ! -f "$out/$f-target/model.safetensors" ]]; then
    python -m ddtree_lab tiny-target --family "$f" --minutes "$MINUTES" --out "$out/$f-target.tmp" --threads 1
    rm -rf "$out/$f-target" && mv "$out/$f-target.tmp" "$out/$f-target"
  fi
done
for f in ${FAMILIES:-gdn kda mamba2 short_conv}; do
  if [[ ! -f "$out/$f-drafter/model.safetensors" ]]; then
    python -m ddtree_lab train-drafter --target "$out/$f-target" --out "$out/$f-drafter" --preset quick --steps "${STEPS:-1000}" --threads 1
    rm -rf "$out/$f-drafter.run"
  fi
done
