"""``ddtree-lab bench``: AR vs DFlash vs DDTree, side by side, HumanEval prompts, T = 0 and 1.

One run interleaves every config per prompt (so machine noise hits them alike) and prints
tokens/s, tau, speedup over AR and the share of tree building in a round, for both targets
(GDN with naive, fork and wy verification), at fixed budgets and at ``auto``; at T = 1 the
exact modes at the budgets of ``T1_BUDGETS``. Every row also reports tau outside loops and
the loop share (``summary.summarize``). The table is saved to data/results/bench.csv and the
T = 0 goals are printed as PASS/MISS.
"""
from __future__ import annotations

import pandas as pd

from ..core.decode import PHASES
from ..common import RESULTS_DIR
from .results import ResultsStore
from .summary import summarize
from .sweep import expand_grid, run_sweep

BUDGETS = (1, 4, 16, 32, 64, 128, 256)
T1_BUDGETS = (1, 4, 16, 64)   # at T = 1 acceptance is short: small trees tell the story


def bench_grid(archs=("gdn", "mla"), budgets=BUDGETS, block_size: int = 8,
               max_new_tokens: int = 128, t1_budgets=T1_BUDGETS) -> list[dict]:
    """T = 0: AR, DFlash, DDTree at ``budgets`` + auto (GDN: naive, fork, wy; auto wy only);
    T = 1: AR, DFlash, DDTree (exact wy) at ``t1_budgets``."""
    common = dict(max_new_tokens=[max_new_tokens], block_size=[block_size])
    grid = []
    for arch in archs:
        modes = ["naive", "fork", "wy"] if arch == "gdn" else ["-"]
        grid += expand_grid(arch=[arch], method=["ar", "dflash"], budget=[0], gdn_mode=["wy"],
                            temperature=[0.0], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(budgets) + ["auto"],
                            gdn_mode=modes, temperature=[0.0], **common)
        grid += expand_grid(arch=[arch], method=["ar", "dflash"], budget=[0], gdn_mode=["wy"],
                            temperature=[1.0], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(t1_budgets), gdn_mode=["wy"],
                            temperature=[1.0], **common)
    return [g for g in grid if not (g["budget"] == "auto" and g["gdn_mode"] in ("naive", "fork"))]


def tree_share(frame: pd.DataFrame) -> pd.Series:
    """Per row: seconds building trees over seconds of the speculative rounds."""
    return frame["_metrics"].map(lambda m: m["timings"]["tree"] / max(1e-12, sum(m["timings"][p] for p in PHASES)))


def bench_table(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.assign(tree_share=tree_share(frame))
    table = summarize(frame)
    keys = ["arch", "method", "gdn_mode", "budget", "temperature"]
    share = frame.groupby(keys, dropna=False)["tree_share"].mean()
    return table.join(share, on=keys)


def goals(table: pd.DataFrame) -> list[str]:
    """The issue's goals (at T = 0), PASS/MISS with the measured figure."""
    out = []
    for arch, t in table[table.temperature == 0].groupby("arch"):
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


def run_bench(pairs: dict, num_prompts: int = 10, fresh: bool = False, **grid_kwargs) -> pd.DataFrame:
    """The bench on ``pairs`` ({arch: Pair}); prints the table and the goals, saves bench.csv."""
    store = ResultsStore("bench")
    if fresh and store.path.is_file():
        store.path.unlink()
    frame = run_sweep(bench_grid(tuple(pairs), **grid_kwargs), list(range(num_prompts)), store, pairs)
    table = bench_table(frame[frame.prompt < num_prompts])
    cols = ["arch", "temperature", "method", "gdn_mode", "budget", "block_size", "tau", "tokens_per_s",
            "speedup", "matches_ar", "tree_share", "tau_outside_loops", "loop_round_share", "entropy", "n_prompts"]
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.precision", 3):
        print(table[[c for c in cols if c in table]].to_string(index=False))
    for line in goals(table):
        print(line)
    table.to_csv(RESULTS_DIR / "bench.csv", index=False)
    return table
