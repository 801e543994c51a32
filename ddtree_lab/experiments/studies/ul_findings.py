"""Whether the lab's findings hold on a target that writes code (issue 70 item 4): the shipped MLA
target (its greedy continuations loop on most held-out prompts) against its unlikelihood fine-tune
(``data/checkpoints/unlikelihood/mla-target``, the run that met the loop goal), each with its own
DFlash drafter trained by one recipe (``train_drafter(preset="quick", steps=STEPS)``: the same
data size and schedule for both, so neither drafter is the better trained one).

Measured per pair, interleaved (``sweep.run_sweep``; HumanEval prompts 0..N-1, block 8, T = 0):
AR, the DFlash chain, DDTree at ``BUDGETS`` and prompt lookup (transformers', drafting as many
tokens as the chain). Read from it: the tree over the chain (tau and tokens/s), the best budget
(tokens/s), lookup against the drafters, and the sibling collapse (``calibration.continuation_ratio``:
after an accepted rank >= 1 sibling, how often the next depth is accepted, over the main path's,
DDTree-64, outside loops). GDN is not measured: its best fine-tune looped on 46% of prompts
(goal 20%) and was not kept, so "naive against exact on GDN" has no fine-tuned GDN target here.

    python -m ddtree_lab.experiments.studies.ul_findings [--smoke]   -> data/results/ul_findings.csv
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from . import smoke_main
from ...common import RESULTS_DIR, ROOT
from ...core.models import load_target
from ...train.checkpoints import CKPT_DIR, ckpt_path
from ...train.drafters import train_drafter
from ...train.loops import is_looping
from ...train.pair import pair_from_dirs
from ..plumbing.results import ResultsStore
from ..plumbing.summary import summarize
from ..plumbing.sweep import expand_grid, run_sweep
from .calibration import continuation_ratio, outside_loops, record_rounds
from .official import run_with_official

RUN, TABLE_CSV = "ul_findings", "ul_findings.csv"
UL_DIR = CKPT_DIR / "unlikelihood"
STEPS = 1000  # each drafter's optimizer steps ("quick" preset: its data, this schedule)


def pair_dirs() -> dict:
    """{label: (target dir, drafter dir)}: the looping shipped MLA target and its fine-tune."""
    return {"looping": (ckpt_path("mla", "target"), UL_DIR / "mla-looping-drafter"),
            "fine-tuned": (UL_DIR / "mla-target", UL_DIR / "mla-drafter")}


@dataclass(frozen=True)
class FindingsGrid:
    """DDTree budgets, HumanEval prompts 0..num_prompts-1, new tokens, block size."""
    budgets: tuple = (4, 16, 64)
    num_prompts: int = 10
    max_new_tokens: int = 96
    block_size: int = 8


SMOKE = FindingsGrid(budgets=(4,), num_prompts=1, max_new_tokens=16)


def configs(grid: FindingsGrid) -> list[dict]:
    """AR, the chain, lookup and DDTree at the grid's budgets (MLA, T = 0)."""
    common = dict(arch=["mla"], gdn_mode=["wy"], temperature=[0.0], max_new_tokens=[grid.max_new_tokens],
                  block_size=[grid.block_size], accept_rule=["rejection"])
    return (expand_grid(method=["ar", "dflash", "lookup"], budget=[0], **common)
            + expand_grid(method=["ddtree"], budget=list(grid.budgets), **common))


def label(method: str, budget) -> str:
    return {"ar": "ar", "dflash": "chain", "lookup": "lookup"}.get(method, f"ddtree-{budget}")


def findings(frame: pd.DataFrame, collapse: dict) -> dict:
    """One pair's measured findings from its sweep rows and its sibling-collapse ratio."""
    s = summarize(frame).assign(config=lambda t: [label(m, b) for m, b in zip(t.method, t.budget)]).set_index("config")
    trees = s[s.index.str.startswith("ddtree-")]
    best = trees.tokens_per_s.idxmax()
    drafters = s.loc[["chain"] + list(trees.index)]
    return {"chain_tau": s.loc["chain", "tau"], "chain_tokens_per_s": s.loc["chain", "tokens_per_s"],
            "best_budget": int(best.split("-")[1]), "best_tree_tau": trees.loc[best, "tau"],
            "best_tree_tokens_per_s": trees.loc[best, "tokens_per_s"],
            "tree_over_chain_tau": trees.loc[best, "tau"] / s.loc["chain", "tau"],
            "tree_over_chain_speed": trees.loc[best, "tokens_per_s"] / s.loc["chain", "tokens_per_s"],
            "tree64_over_chain_tau": trees.loc["ddtree-64", "tau"] / s.loc["chain", "tau"]
            if "ddtree-64" in trees.index else float("nan"),
            "lookup_tau": s.loc["lookup", "tau"], "lookup_tokens_per_s": s.loc["lookup", "tokens_per_s"],
            "lookup_over_best_drafter_speed": s.loc["lookup", "tokens_per_s"] / drafters.tokens_per_s.max(),
            "ar_tokens_per_s": s.loc["ar", "tokens_per_s"], "matches_ar": float(s.matches_ar.min()),
            "sibling_collapse": collapse["ratio"], "sibling_collapse_lo": collapse["lo"],
            "sibling_collapse_hi": collapse["hi"]}


def train_drafters() -> None:
    """Each pair's drafter, trained where missing (``train_drafter``: the "quick" preset's data,
    ``STEPS`` steps, on one thread; resumable from ``runs/ul-<name>``; about 10 minutes each)."""
    for target_dir, drafter_dir in pair_dirs().values():
        if not (drafter_dir / "manifest.json").is_file():
            train_drafter("mla", "quick", target=load_target(target_dir), out=drafter_dir,
                          runs_dir=ROOT / "runs" / f"ul-{drafter_dir.name}", steps=STEPS)


def collapse_of(pair, grid: FindingsGrid) -> dict:
    """The after-sibling continuation ratio of DDTree-64 (the grid's largest budget), outside loops."""
    frame = record_rounds(pair, list(range(grid.num_prompts)), budget=max(grid.budgets), block_size=grid.block_size,
                          max_new_tokens=grid.max_new_tokens)
    return continuation_ratio(outside_loops(frame))


def study(smoke: bool = False) -> pd.DataFrame:
    """Both pairs' drafters (``train_drafters``), sweeps (resumable, each in its own store folder,
    ``ul_findings/<pair>/``) and findings -> the table,
    written to ``ul_findings.csv`` (smoke: into data/results/smoke/)."""
    torch.set_num_threads(1)
    train_drafters()
    grid = SMOKE if smoke else FindingsGrid()
    root = RESULTS_DIR / "smoke" if smoke else RESULTS_DIR
    rows = []
    for name, (target_dir, drafter_dir) in pair_dirs().items():
        pair = pair_from_dirs(target_dir, drafter_dir)
        store = ResultsStore(RUN, root / RUN / name)
        frame = run_sweep(configs(grid), list(range(grid.num_prompts)), store, {"mla": pair}, runner=run_with_official,
                          run=RUN)
        frame = frame[frame.prompt < grid.num_prompts]
        rows.append({"pair": name, "target": str(target_dir.relative_to(CKPT_DIR.parent.parent)), "prompts": grid.num_prompts,
                     "loop_share": float(frame[frame.method == "ar"]._metrics.map(lambda m: is_looping(m["tokens"])).mean()),
                     **findings(frame, collapse_of(pair, grid))})
    table = pd.DataFrame(rows)
    table.to_csv(root / TABLE_CSV, index=False, float_format="%.6g")
    with pd.option_context("display.width", 200):
        print(table.to_string(index=False))
    return table


def main(argv=None) -> None:
    smoke_main(study, __doc__, argv)


if __name__ == "__main__":
    main()
