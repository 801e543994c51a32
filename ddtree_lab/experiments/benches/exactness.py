"""Exactness of tree verification on the shipped pairs (docs/background.md section 4).

For each target (GDN: naive / fork / wy; MLA), the first DDTree tree (budget 64, block 8)
of HumanEval prompts 0-2: the max per-node logit error against a forward of each node's own
path, in float64 under the harness and in float32, argmax flips, and the commit's cache
error in float64. Results -> data/results/exactness.csv (the exactness table of docs/results.md).

    python scripts/exactness.py
"""
from __future__ import annotations

import pandas as pd
import torch

from ddtree_lab.train.pair import load_pair
from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.experiments.studies.precision import exactness_table

OUT = RESULTS_DIR / "exactness.csv"


def run() -> None:
    torch.set_num_threads(1)
    table = pd.concat([exactness_table(load_pair(arch)) for arch in ("gdn", "mla")], ignore_index=True)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2e}"))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_timing_table(table, OUT)  # not a timing: the stamp says where it was computed
    print(f"saved {OUT}")


def main() -> None:
    run()


if __name__ == "__main__":
    main()
