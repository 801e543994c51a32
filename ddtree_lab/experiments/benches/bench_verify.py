"""Cost of exact tree verification on the real-size random-init targets (TreeWY, arXiv
2608.20961; docs/background.md section 4).

A thin wrapper over ``ddtree_lab.experiments.studies.verify_cost`` (its docstrings define every column): the GDN
target (``build_target("gdn")``, float32, one thread) times verify + commit in naive / fork /
wy, and transformers' own forward of the same flattened tokens (stock), and their memory at
budgets 1..256, and checks the goals at budget 64 (wy <= 1.1x naive, fork <= 2x naive, commit
< 10% of a verify; on a MISS a per-kernel breakdown says what dominates); the MLA target
(``build_target("mla")``) times verify over a 1-token decode (root-only verify and stock HF).
Every ratio is the median of 15 paired repeats with a 95% interval and a sign test
(``experiments.spread``). Results -> data/results/bench_verify.csv.

    PYTHONPATH=. python scripts/bench_verify.py [--quick]
"""
from __future__ import annotations

import argparse

import pandas as pd
import torch
import transformers

from ddtree_lab.core.verify import loop_ready
from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.plumbing.results import RESULTS_DIR, write_timing_table
from ddtree_lab.experiments.plumbing.spread import format_ratio_columns
from ddtree_lab.experiments.studies.verify_cost import gdn_breakdown, gdn_cost_table, goal_lines, mla_cost_table

PREFIX_LEN, GOAL_BUDGET = 128, 64
OUT = RESULTS_DIR / "bench_verify.csv"


def show(name: str, model, table: pd.DataFrame, repeats: int) -> None:
    mb = {c: c.replace("_bytes", "_MB") for c in table.columns if c.endswith("_bytes")}
    spread = [c for c in table.columns if c.endswith(("_lo", "_hi", "_p"))]  # in the CSV; intervals printed below
    shown = table.assign(**{c: table[c] / 2**20 for c in mb}).rename(columns=mb).drop(columns=spread)
    print(f"\n{name} target ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params), prefix {PREFIX_LEN}, "
          f"median of {repeats}, ms; bytes in MB")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    ratios = [c[:-3] for c in spread if c.endswith("_lo")]
    print("ratios: median of paired repeats [95% interval] ('noise': the interval holds 1)")
    for _, row in table.iterrows():
        print(f"  budget {int(row['budget'])}: " + "; ".join(f"{r} {format_ratio_columns(row, r)}" for r in ratios))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 repeats instead of 15")
    return p


def run(quick: bool = False) -> None:
    repeats = 3 if quick else 15
    torch.set_num_threads(1)
    gdn = build_target("gdn")
    gdn_table = gdn_cost_table(gdn, prefix_len=PREFIX_LEN, repeats=repeats)
    show("GDN", gdn, gdn_table, repeats)
    lines = goal_lines(gdn_table, budget=GOAL_BUDGET)
    print(f"\ngoals at budget {GOAL_BUDGET}:\n  " + "\n  ".join(lines))
    if any(line.startswith("MISS") for line in lines):
        print(f"\nbreakdown at budget {GOAL_BUDGET}, ms per call:")
        print(gdn_breakdown(gdn, GOAL_BUDGET, PREFIX_LEN, repeats).to_string(index=False, float_format="{:.2f}".format))
    mla = build_target("mla")
    with loop_ready(mla):  # the loops' kernels: MoE experts as grouped matmuls
        mla_table = mla_cost_table(mla, prefix_len=PREFIX_LEN, repeats=repeats)
    show("MLA", mla, mla_table, repeats)
    meta = {"prefix_len": PREFIX_LEN, "repeats": repeats, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    table = pd.concat({"gdn": gdn_table, "mla": mla_table}, names=["arch"]).reset_index(level=0)
    write_timing_table(table.assign(**meta), OUT)
    print(f"\nsaved {OUT}")


def main() -> None:
    run(**vars(parser().parse_args()))


if __name__ == "__main__":
    main()
