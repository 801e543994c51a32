"""What a round costs (``studies.round_cost``), on a quiet machine: the interleaved round-cost
run (AR, ``dflash_generate``, the lab's DFlash and DDTree 4 / 16 / 64 on the same prompts, into
the store "round_cost"), then the lab's verify against its floor (``verify_floor``): at real
decoding states of greedy DDTree runs (budgets 16 and 64, every 4th round), verify as the loop
calls it against transformers' stock forward of the same flattened tree tokens with the same
tree mask on a ``DynamicCache`` of the same rows; one thread, 10 interleaved pairs per state.
Writes data/results/verify_floor.csv (one row per state, with the machine's load average).
``ddtree-lab recompute round_cost`` runs it (alone: a timing).

    python scripts/bench_round.py [--prompts 12] [--floor-prompts 4] [--repeats 10]
"""
from __future__ import annotations

import argparse

import pandas as pd
import torch

from ddtree_lab.train.pair import load_pair
from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.measure import print_row
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.experiments.studies.round_cost import (floor_summary, round_table, run_round_cost,
                                                      verify_floor)


def every_nth(n: int) -> list[int]:
    """n HumanEval prompt ids spread over the 164."""
    return list(range(0, 164, 164 // n))[:n]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=12, help="HumanEval prompts of the run (every 164 // n-th), >= 1")
    ap.add_argument("--floor-prompts", type=int, default=4, help="HumanEval prompts of the floor states, >= 1")
    ap.add_argument("--repeats", type=int, default=10, help="interleaved pairs per state, >= 6")
    return ap


def run(prompts: int = 12, floor_prompts: int = 4, repeats: int = 10) -> None:
    if min(prompts, floor_prompts) < 1 or repeats < 6:
        raise ValueError(f"--prompts and --floor-prompts must be >= 1 and --repeats >= 6 (a 95% interval needs "
                         f"6 pairs), got {prompts}, {floor_prompts} and {repeats}")
    torch.set_num_threads(1)
    pairs = {arch: load_pair(arch) for arch in ("mla", "gdn")}
    measured = run_round_cost(pairs, every_nth(prompts))
    print(round_table(measured).to_string(index=False))
    frames = []
    for arch, pair in pairs.items():
        frames.append(verify_floor(pair, every_nth(floor_prompts), repeats=repeats,
                                   progress=print_row))
    rows = pd.concat(frames, ignore_index=True)
    out = RESULTS_DIR / "verify_floor.csv"
    write_timing_table(rows, out)
    print(floor_summary(rows).to_string(index=False))
    print(f"wrote {out}")


def main() -> None:
    run(**vars(parser().parse_args()))


if __name__ == "__main__":
    main()
