"""docs/results.md's block "seed_hardware" (issues 61, 69), rendered from the stored files only:
the expert union by budget and the routing correlation (``expert_union.csv``,
``expert_pairs.csv``), the routing fitted to published unions (``expert_union_published.csv``),
the published points against the cost model alone and the trivial baseline
(``projection_validation.csv``), the Kimi K2.6 bounds as a region (``k26_bounds.csv``), and the
expert-aware ``auto`` and ``auto`` with the chain measured on this CPU (the ``expert_auto`` store,
``auto_chain.csv``). ``app.readme.BLOCKS`` holds it."""
from __future__ import annotations

import pandas as pd

from ..common import RESULTS_DIR
from ..experiments.plumbing.results import ResultsStore
from ..experiments.studies import expert_auto as ea
from ..experiments.studies import expert_union as eu
from ..experiments.studies import auto_chain as ac
from ..experiments.studies import gpu_projection as gp
from ..experiments.studies import k26_bounds as kb
from ..experiments.studies import published_unions as pu
from .templating import render as _render

SOURCES = tuple(f"data/results/{f}" for f in (eu.UNION_CSV, eu.PAIRS_CSV, pu.UNIONS_CSV, gp.PROJECTION_CSV,
                                              gp.VALIDATION_CSV, kb.BOUNDS_CSV, f"{ea.STORE}.jsonl", ac.TABLE_CSV))
COMMAND = ("python -m ddtree_lab.experiments.studies.expert_union && python -m ddtree_lab.experiments.studies.expert_auto"
           " && python -m ddtree_lab.experiments.studies.published_unions"
           " && python -m ddtree_lab.experiments.studies.gpu_projection && python -m ddtree_lab.experiments.studies.k26_bounds"
           " && python -m ddtree_lab.experiments.studies.auto_chain")
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
    return _render("readme/seed_hardware/union", cases=cases, experts=n, top_k=k, pairs=p, union=u,
                   saturation=eu.saturation(union, n),
                   table=_md(["budget", "tree", "chain (real text)", "independent routing"], rows))


def published_unions_part(unions: pd.DataFrame) -> str:
    rows = [[r.fit, r.model, int(r.rows), f"{r.distinct_published:.1f}", f"{r.distinct_predicted:.1f}",
             f"{r.rho_path:.3f}", "fitted" if r.calibration else f"{r.error:+.1%}"] for r in unions.itertuples()]
    return _render("readme/seed_hardware/published_unions",
                   table=_md(["fit", "model", "rows", "distinct (published)", "predicted", "rho_path", "error"], rows))


def published_part(check: pd.DataFrame) -> str:
    rows = [[r.model, r.stack, r.method, int(r.budget), f"{r.published_tau:.2f}", f"{r.published_speedup:.2f}x",
             f"{r.cost_only_speedup:.2f}x ({r.cost_only_error:+.1%})", f"{r.baseline_speedup:.2f}x ({r.baseline_error:+.1%})",
             r.verdict] for r in check[check.published_tau.notna()].itertuples()]
    return _render("readme/seed_hardware/published", table=_md(
        ["model", "stack", "method", "budget", "tau", "published", "cost model", "baseline", "verdict"], rows))


def kimi_part(bounds: pd.DataFrame) -> str:
    rows = []
    for f, g in bounds.groupby("fixed_ms"):
        cells = []
        for tau, h in g.groupby("chain_tau"):
            trees = h[h.winner == "tree"]
            lo, hi = (int(trees.best_budget.min()), int(trees.best_budget.max())) if len(trees) else (0, 0)
            span = "-" if not len(trees) else f"{lo}" if lo == hi else f"{lo}-{hi}"
            cells.append(f"chain in {int((h.winner == 'chain').sum())} of {len(h)}; best tree budget {span}")
        rows.append([f"{f:g}"] + cells)
    taus = sorted(bounds.chain_tau.unique())
    return _render("readme/seed_hardware/kimi",
                   table=_md(["fixed ms per forward"] + [f"chain tau {t:g}" for t in taus], rows))


def auto_part(chain: pd.DataFrame, directory=RESULTS_DIR) -> str:
    frame = ResultsStore(ea.STORE, directory).frame()
    measured = ea.table(frame[frame.run == ea.RUN])
    rows = [[r.method, r.budget, r.cost if r.budget == "auto" else "", f"{r.tau:.2f}", f"{r.tokens_per_s:.0f}",
             f"{r.speedup:.2f}x", f"{r.matches_ar:.0%}"] for r in measured.itertuples()]
    expert_auto = _md(["method", "budget", "cost", "tau", "tokens/s", "speedup over AR", "equal to AR"], rows)
    auto = chain[chain.config == "ddtree-auto"]
    rows = [[r.arch, r.best_rival, f"{r.vs_best:.3f}", f"{r.vs_best_paired:.3f} [{r.vs_best_lo:.3f}, {r.vs_best_hi:.3f}]",
             f"{r.tau:.2f}", f"{r.mean_tree_size:.1f}", f"{r.chain_rounds:.0%}", f"{r.matches_ar:.0%}"]
            for r in auto.itertuples()]
    return _render("readme/seed_hardware/auto", expert_auto_prompts=int(measured.n_prompts.max()),
                   expert_auto_table=expert_auto, auto_chain_prompts=int(chain.n_prompts.max()),
                   auto_chain_table=_md(["target", "best rival", "auto / best (pooled)", "per prompt, median [95%]",
                                         "tau", "mean tree size", "chain rounds", "equal to AR"], rows))


def render(directory=RESULTS_DIR) -> str:
    union = pd.read_csv(directory / eu.UNION_CSV)
    pairs = pd.read_csv(directory / eu.PAIRS_CSV)
    return "\n\n".join([union_part(union, pairs), published_unions_part(pd.read_csv(directory / pu.UNIONS_CSV)),
                         published_part(pd.read_csv(directory / gp.VALIDATION_CSV)),
                         kimi_part(pd.read_csv(directory / kb.BOUNDS_CSV)),
                         auto_part(pd.read_csv(directory / ac.TABLE_CSV), directory)])
