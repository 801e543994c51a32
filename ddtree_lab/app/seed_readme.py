"""docs/results.md's block "seed_hardware" (issue 61), rendered from the stored files only:
the expert union by budget and the routing correlation (``expert_union.csv``,
``expert_pairs.csv``), the published points against the cost model's predictions, the Kimi K2.6
on H200 projection and the projected policies (``gpu_projection.csv``), and the expert-aware
``auto`` measured on this CPU (the ``expert_auto`` store). ``app.readme.BLOCKS`` holds it."""
from __future__ import annotations

import pandas as pd

from ..common import RESULTS_DIR
from ..experiments.plumbing.results import ResultsStore
from ..experiments.studies import expert_auto as ea
from ..experiments.studies import expert_union as eu
from ..experiments.studies import gpu_projection as gp

SOURCES = tuple(f"data/results/{f}" for f in (eu.UNION_CSV, eu.PAIRS_CSV, gp.PROJECTION_CSV, f"{ea.STORE}.jsonl"))
COMMAND = ("python -m ddtree_lab.experiments.studies.expert_union && python -m ddtree_lab.experiments.studies.expert_auto"
           " && python -m ddtree_lab.experiments.studies.gpu_projection")
SHOWN_BUDGETS = (1, 4, 16, 64, 256, 512)


def _md(header: list, rows: list[list]) -> str:
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(header), line(["---"] * len(header))] + [line(r) for r in rows])


def union_part(union: pd.DataFrame, pairs: pd.DataFrame) -> str:
    wide = eu.union_by_budget(union, SHOWN_BUDGETS)
    cases = int(union[union.kind == "tree"].cases.max())
    n = round(float(union[union.kind == "independent"].experts.max()))
    k = round(float(union[union.kind == "token"].experts.mean()))
    rows = [[int(r.budget), f"{r.tree:.2f}", f"{r.chain:.2f}", f"{r.independent:.2f}"] for r in wide.itertuples()]
    p, u = eu.pooled_rho(pairs, "pairs"), eu.pooled_rho(pairs, "union")
    sat = eu.saturation(union, n)
    return (f"**Expert union of one verify** (`expert_union`: {cases} positions of held-out code, block 16, the MLA "
            f"target's {n} routed experts, top-{k}; distinct experts per MoE layer, mean over layers and cases; one "
            f"token loads {k}):\n\n" + _md(["budget", "tree", "chain (real text)", "independent routing"], rows)
            + f"\n\nRouting correlation rho (0: independent): pairs of one tree, mean over MoE layers: sibling "
            f"{p['sibling']:.2f}, parent-child {p['path']:.2f}, random {p['random']:.2f}; roots of different "
            f"positions {p['unrelated']:.2f}. Union-implied (fitted on the unions before they saturate, what the "
            f"projection carries): path {u['path']:.2f}, sibling {u['sibling']:.2f}. The mean union reaches 90% of "
            f"the {n} experts at budget " + ", ".join(f"{kind} {b if b is not None else 'never'}"
                                                       for kind, b in sat.items()) + ".")


def published_part(table: pd.DataFrame) -> str:
    pub = table[table.published_speedup.notna()]
    rows = [[r.model, r.accelerator, r.stack, r.method, int(r.budget), f"{r.tau:.2f}", f"{r.predicted_speedup:.2f}x",
             f"{r.published_speedup:.2f}x", "fitted" if r.calibration else f"{r.error:+.1%}"] for r in pub.itertuples()]
    worst = pub[~pub.calibration.astype(bool)].error.abs().max()
    return ("**The round-cost model against the published points** (`gpu_projection`: one overhead per stack fitted "
            "on one point, every other point predicted; DDTree-paper points without a named budget: the best of "
            "the paper's grid, tau from the lab's shape):\n\n"
            + _md(["model", "accelerator", "stack", "method", "budget", "tau", "predicted", "published",
                   "error"], rows) + f"\n\nLargest prediction error: {worst:.0%}.")


def kimi_part(table: pd.DataFrame) -> str:
    rows = []
    for stack in ("transformers-eager", "kernel-floor"):
        for r in gp.stop_paying(table, "Kimi K2.6", "h200", stack).itertuples():
            over = "never" if pd.isna(r.last_budget_over_chain) else int(r.last_budget_over_chain)
            rows.append([stack, r.routing, int(r.best_budget), f"{r.best_speedup:.2f}x", f"{r.dflash_speedup:.2f}x",
                         over, f"{r.speedup_64:.2f}x", f"{r.speedup_128:.2f}x"])
    return ("**Kimi K2.6 on 8 x H200, projected** (not measured; independent routing and the measured correlation "
            "bound each stack):\n\n" + _md(["stack", "routing", "best budget", "speedup there", "DFlash chain",
                                            "last budget at or above the chain", "at 64", "at 128"], rows))


def auto_part(table: pd.DataFrame, directory=RESULTS_DIR) -> str:
    frame = ResultsStore(ea.STORE, directory).frame()
    measured = ea.table(frame[frame.run == ea.RUN])
    rows = [[r.method, r.budget, r.cost if r.budget == "auto" else "", f"{r.tau:.2f}", f"{r.tokens_per_s:.0f}",
             f"{r.speedup:.2f}x", f"{r.matches_ar:.0%}"] for r in measured.itertuples()]
    out = (f"**Expert-aware `auto`, measured on this CPU** (`expert_auto`: MLA target, {int(measured.n_prompts.max())} "
           "HumanEval prompts, block 8, T = 0, one interleaved run; cost: what prices a tree):\n\n"
           + _md(["method", "budget", "cost", "tau", "tokens/s", "speedup over AR", "equal to AR"], rows))
    pol = table[table.method.astype(str).str.startswith("auto: ")]
    rows = [[r.stack, r.method.removeprefix("auto: "), f"{r.budget:.0f}", f"{r.tau:.2f}",
             f"{r.tokens_per_s / pol[(pol['stack'] == r.stack)].tokens_per_s.iloc[0]:.3f}"] for r in pol.itertuples()]
    return out + ("\n\n**Projected on Kimi K2.6 / 8 x H200** (the lab's drafter trees, measured routing; tokens/s over "
                  "the best fixed budget's):\n\n" + _md(["stack", "policy", "mean tree size", "tau", "vs best fixed"],
                                                        rows))


def render(directory=RESULTS_DIR) -> str:
    union = pd.read_csv(directory / eu.UNION_CSV)
    pairs = pd.read_csv(directory / eu.PAIRS_CSV)
    table = pd.read_csv(directory / gp.PROJECTION_CSV)
    return "\n\n".join([union_part(union, pairs), published_part(table), kimi_part(table), auto_part(table, directory)])
