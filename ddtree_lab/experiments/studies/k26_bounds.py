"""The seed's K2.6 question as bounds, not a point (issue 69 item 3): Kimi K2.6 with the published
drafter (block 8) on 8 x H200, the kernel floor plus a fixed cost per forward, over every cell of

    fixed_ms   {0, 0.5, 1, 2, 5, 10, 25}: what a stack adds to every forward, the drafter's and the
               target's (launches, tensor-parallel collectives; ``gpu_projection.Setting.fixed_s``)
    routing    independent; the pairs measured on the lab's toy; fitted to published unions
               (``routing_fit.json``)
    chain_tau  {3.6, 5.3, 5.5}: the published band (``gpu_specs.KIMI_TAU_BAND``)
    tree_gain  the lab's measured sibling shape; the DDTree paper's Qwen3-8B and
               Qwen3-Coder-30B-A3B tree / chain ratios (``acceptance_model.shapes``)

Per cell, every budget 1..``MAX_BUDGET`` (a per-node grid): tau from the acceptance model, the
round from the roofline with the union of the model's best tree. Columns: best_budget,
within_5pct (every budget within 5% of the best, as ranges), chain_speedup, best_tree_speedup,
winner (chain / tree), and best_64_plus (the best speedup of a budget >= 64). A PROJECTION:
nothing here ran on a GPU.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...common import RESULTS_DIR
from . import acceptance_model as am
from . import gpu_projection as gp
from .gpu_specs import KIMI_TAU_BAND

BOUNDS_CSV = "k26_bounds.csv"
FIXED_MS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0)
CHAIN_TAUS = tuple(KIMI_TAU_BAND)
MAX_BUDGET = 512
WITHIN = 0.05
TIE = 1e-9   # relative: a best tree no faster than the chain by more than rounding is the chain (the tree of
             # block - 1 nodes is the chain itself when no sibling outweighs the chain's deepest node)
LARGE = 64   # the seed's "64-128+"
MODEL, ACCELERATOR, GPUS, STACK = "Kimi K2.6", "h200", 8, "kernel-floor"
GAIN_NAMES = {"lab": "lab's measured shape", "Qwen3-8B": "published Qwen3-8B (9.67 / 6.61)",
              "Qwen3-Coder-30B-A3B": "published Qwen3-Coder-30B-A3B (10.72 / 8.02)"}


def ranges(budgets) -> str:
    """Sorted budgets as ranges: [4, 5, 6, 9] -> "4-6;9"."""
    out, run = [], []
    for b in sorted(int(x) for x in budgets):
        if run and b != run[-1] + 1:
            out.append(run)
            run = []
        run.append(b)
    out += [run] if run else []
    return ";".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in out)


def cell(s: gp.Setting, r: gp.Routing, chain_tau: float, tree: am.ModelTree) -> dict:
    """One cell: speedups of every budget 1..len(tree.tau) and of the chain, under ``s`` and ``r``."""
    ar = gp.ar_seconds(s)
    b = np.arange(1, len(tree.tau) + 1)
    union = gp.tree_union(s.model, tree.parents, r)[b]
    speed = tree.tau * ar / gp.round_seconds(s, b + 1, union)   # [B]
    block = s.drafter.block
    chain = chain_tau * ar / float(gp.round_seconds(s, block, gp.chain_union(s.model, block, r)))
    best = int(np.argmax(speed))
    return {"best_budget": int(b[best]), "within_5pct": ranges(b[speed >= (1 - WITHIN) * speed[best]]),
            "chain_speedup": chain, "best_tree_speedup": float(speed[best]),
            "winner": "tree" if speed[best] > chain * (1 + TIE) else "chain",
            "best_tau": float(tree.tau[best]), "best_64_plus": float(speed[b >= LARGE].max()),
            "budget_64_plus_pays": bool(speed[b >= LARGE].max() >= max(chain, (1 - WITHIN) * speed[best]))}


def bounds(inputs: gp.Inputs, shapes: dict[str, am.Shape], fixed_ms=FIXED_MS, chain_taus=CHAIN_TAUS,
           max_budget: int = MAX_BUDGET) -> pd.DataFrame:
    """Every cell (module docstring) as one row of the stored table."""
    routings = (gp.INDEPENDENT, inputs.pairs, inputs.fitted)
    rows = []
    for tau in chain_taus:
        for gain, shape in shapes.items():
            tree = gp.model_curve(tau, shape, gp.DRAFTERS[MODEL].block, max_budget)
            for r in routings:
                for f in fixed_ms:
                    s = gp.setting(MODEL, ACCELERATOR, GPUS, STACK, 0.0)
                    s = gp.Setting(s.model, s.drafter, s.acc, s.gpus, s.stack, 0.0, f * 1e-3)
                    rows.append({"fixed_ms": f, "routing": r.name, "chain_tau": tau, "tree_gain": GAIN_NAMES[gain],
                                 **cell(s, r, tau, tree), "rho_path": r.rho_path, "rho_sibling": r.rho_sibling,
                                 "sibling_share": shape.s, "rank_decay": shape.rho,
                                 "block_size": s.drafter.block, "model": MODEL, "accelerator": ACCELERATOR,
                                 "gpus": GPUS, "stack": f"{STACK} + fixed cost per forward",
                                 "chain_tau_source": KIMI_TAU_BAND[tau]})
    return pd.DataFrame(rows)


def large_budget_threshold(table: pd.DataFrame) -> pd.DataFrame:
    """Per (chain_tau, routing, tree_gain): the smallest fixed cost at which a budget >= 64 pays
    (within 5% of the best tree and at least the chain's speedup), NaN where none of the grid does."""
    rows = []
    for key, g in table.groupby(["chain_tau", "routing", "tree_gain"], sort=False):
        hit = g[g.budget_64_plus_pays]
        rows.append(dict(zip(["chain_tau", "routing", "tree_gain"], key),
                         fixed_ms=float(hit.fixed_ms.min()) if len(hit) else np.nan))
    return pd.DataFrame(rows)


def finding(table: pd.DataFrame, published_tau: float = 5.3, plausible_ms: float = 2.0) -> list[str]:
    """Notebook 10's finding, rendered from ``k26_bounds.csv``: the region, not a point."""
    cells = len(table) // (table.chain_tau.nunique() * table.fixed_ms.nunique())
    pub = table[(table.chain_tau == published_tau) & (table.fixed_ms <= plausible_ms)]
    low = table[table.chain_tau == table.chain_tau.min()]
    low_trees = low[low.winner == "tree"]
    first = large_budget_threshold(table).fixed_ms
    where = table[table.budget_64_plus_pays.astype(bool)]
    large = (f"a budget of {LARGE} or more pays (within {WITHIN:.0%} of the best tree and at least the chain) only "
             f"from {first.min():g} ms of fixed cost per forward, in {int(first.notna().sum())} of {len(first)} "
             f"combinations of routing, tree gain and chain tau by {table.fixed_ms.max():g} ms, and in "
             f"{int((where.fixed_ms <= plausible_ms).sum())} cells at or below {plausible_ms:g} ms"
             if len(where) else f"no budget of {LARGE} or more pays in any cell up to {table.fixed_ms.max():g} ms")
    return [f"Kimi K2.6 on {GPUS} x H200, projected (nothing ran on a GPU): with the published drafter (block "
            f"{int(table.block_size.iloc[0])}, chain tau {published_tau:g}) the chain is the best draft in "
            f"{int((pub.winner == 'chain').sum())} of {len(pub)} cells up to {plausible_ms:g} ms of fixed cost per "
            f"forward ({cells} routing x tree-gain cells per cost); at chain tau {low.chain_tau.iloc[0]:g} trees win "
            f"{len(low_trees)} of {len(low)} cells, best budgets {int(low_trees.best_budget.min())}-"
            f"{int(low_trees.best_budget.max())}.",
            f"The seed's 64-128+: {large}."]


def write(directory=RESULTS_DIR) -> pd.DataFrame:
    t = bounds(gp.load_inputs(directory), am.shapes(directory))
    t.to_csv(directory / BOUNDS_CSV, index=False, float_format="%.6g")
    return t


def study() -> None:
    """The registry's step: build and store ``k26_bounds.csv``."""
    main()


def main(argv=None) -> None:
    t = write()
    with pd.option_context("display.width", 220, "display.max_rows", 300):
        print(t[["fixed_ms", "routing", "chain_tau", "tree_gain", "best_budget", "within_5pct", "chain_speedup",
                 "best_tree_speedup", "winner"]].to_string(index=False))
        print(large_budget_threshold(t).to_string(index=False))


if __name__ == "__main__":
    main()
