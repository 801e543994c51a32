"""``ddtree-lab bench``: AR vs DFlash vs DDTree, side by side, HumanEval prompts, T=0.

One run interleaves every config per prompt (so machine noise hits them alike) and prints
tokens/s, tau, speedup over AR and the share of tree building in a round, for both targets
(GDN with naive, fork and wy verification), at fixed budgets and at ``auto``; the table is
saved to data/results/bench.csv and the goals are printed as PASS/MISS.
"""
from __future__ import annotations

import pandas as pd

from ..core.decode import PHASES
from ..common import RESULTS_DIR
from .results import ResultsStore
from .sweep import expand_grid, run_sweep

BUDGETS = (1, 4, 16, 32, 64, 128, 256)


def bench_grid(archs=("gdn", "mla"), budgets=BUDGETS, block_size: int = 8,
               max_new_tokens: int = 128) -> list[dict]:
    common = dict(temperature=[0.0], max_new_tokens=[max_new_tokens], block_size=[block_size])
    grid = []
    for arch in archs:
        modes = ["naive", "fork", "wy"] if arch == "gdn" else ["-"]
        grid += expand_grid(arch=[arch], method=["ar"], budget=[0], gdn_mode=["-"], **common)
        grid += expand_grid(arch=[arch], method=["dflash"], budget=[0], gdn_mode=["wy"], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(budgets) + ["auto"],
                            gdn_mode=modes, **common)
    return [g for g in grid if not (g["budget"] == "auto" and g["gdn_mode"] in ("naive", "fork"))]


def tree_share(frame: pd.DataFrame) -> pd.Series:
    """Per row: seconds building trees over seconds of the speculative rounds."""
    return frame["_metrics"].map(lambda m: m["timings"]["tree"] / max(1e-12, sum(m["timings"][p] for p in PHASES)))


def bench_table(frame: pd.DataFrame) -> pd.DataFrame:
    from ..app.plots import summarize
    frame = frame.assign(tree_share=tree_share(frame))
    table = summarize(frame)
    share = frame.groupby(["arch", "method", "gdn_mode", "budget"], dropna=False)["tree_share"].mean()
    return table.join(share, on=["arch", "method", "gdn_mode", "budget"])


def goals(table: pd.DataFrame) -> list[str]:
    """The issue's goals, PASS/MISS with the measured figure."""
    out = []
    for arch, t in table.groupby("arch"):
        exact = t[(t.method == "ddtree") & (t.gdn_mode.isin(["wy", "-"]))]
        fixed = exact[exact.budget != "auto"]
        best = fixed.loc[fixed.tokens_per_s.idxmax()]
        out.append(_goal(f"{arch}: DDTree best budget ({best.budget}) over AR, wall-clock", best.speedup, 2.0))
        dfl = t[t.method == "dflash"].iloc[0]
        b64 = fixed[fixed.budget == 64]
        if len(b64):
            out.append(_goal(f"{arch}: DDTree-64 / DFlash tau", b64.tau.iloc[0] / dfl.tau, 1.3))
            out.append(_goal(f"{arch}: DDTree-64 / DFlash wall-clock", b64.tokens_per_s.iloc[0] / dfl.tokens_per_s, 1.2))
        auto = exact[exact.budget == "auto"]
        if len(auto):
            out.append(_goal(f"{arch}: auto / best fixed tokens/s", auto.tokens_per_s.iloc[0] / best.tokens_per_s, 0.95))
        b256 = fixed[fixed.budget == 256]
        if len(b256):
            out.append(_goal(f"{arch}: tree-building share of a round at budget 256", b256.tree_share.iloc[0], 0.05,
                             below=True))
    return out


def _goal(name: str, value: float, target: float, below: bool = False) -> str:
    ok = value < target if below else value >= target
    return f"{'PASS' if ok else 'MISS'}  {name}: {value:.3f} (goal {'<' if below else '>='} {target})"


def run_bench(num_prompts: int = 10, archs=("gdn", "mla"), fresh: bool = False, **grid_kwargs) -> pd.DataFrame:
    store = ResultsStore("bench")
    if fresh and store.path.is_file():
        store.path.unlink()
    frame = run_sweep(bench_grid(archs, **grid_kwargs), list(range(num_prompts)), store)
    table = bench_table(frame[frame.prompt < num_prompts])
    cols = ["arch", "method", "gdn_mode", "budget", "block_size", "tau", "tokens_per_s", "speedup",
            "matches_ar", "tree_share", "prompts"]
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.precision", 3):
        print(table[[c for c in cols if c in table]].to_string(index=False))
    for line in goals(table):
        print(line)
    table.to_csv(RESULTS_DIR / "bench.csv", index=False)
    return table
