"""Routing correlation fitted to published expert unions of real MoEs (issue 69 item 4).

The union model (``expert_union``): rows worth t_eff independent tokens load, per MoE layer,
U = n (1 - (1 - k/n)^t_eff) experts; a chain of ``rows`` rows (each row the next position of
the one before) is worth t_eff = 1 + (rows - 1)(1 - rho_path). A published measurement of
(n, k, rows, distinct experts) pins rho_path. Each fit below uses some points and predicts the
others (``calibration`` False: held out); the fit stored for K2.6 (``routing_fit.json``) uses
both Laguna points, and the GLM point is never fitted on.

rho_sibling: no published point measures siblings (rows that share a parent); it is rho_path
times the lab's directly measured sibling / path pair ratio (``expert_pairs.csv``, measure
"pairs"), a stated assumption.

Why not the toy's fit: the lab's MLA target has n = 8 experts, top-2. Its union reaches 6 of 8
within a few rows, so the union-implied fit (``expert_union.fit_rhos``) reads rho from 2-4
rows where the union is already near its ceiling: there a small error in U moves t_eff a lot,
and the fitted rho (path 0.68, sibling 0.86) sits far above the rho its pairs measure directly
(``toy_rhos``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...common import RESULTS_DIR
from . import expert_union as eu

UNIONS_CSV, FIT_JSON = "expert_union_published.csv", "routing_fit.json"
LUCEBOX_501 = ("https://github.com/Luce-Org/lucebox/pull/501 (Laguna XS 2.1, 256 routed experts top-8: 8 verify "
               "rows read 64 expert slots, 39.4 distinct; 15 rows read 120, 58.9 distinct; as quoted in "
               "issue 69, the PR itself not in the lab's search corpus)")
MLX_1485 = ("https://github.com/ml-explore/mlx-lm/pull/1485 (comment, 2026-07-26: GLM-4.7-Flash, 64 routed experts "
            "top-4, 46 MoE layers, router instrumented over 96 greedy decode steps: consecutive positions share "
            "25.7% of their top-4 experts, 'a k=1 verify step reads ~1.74x the expert weights of a 1-token step'; "
            "2 rows: 4 + 4 x (1 - 0.257) distinct)")


@dataclass(frozen=True)
class UnionPoint:
    """A published measurement: ``rows`` consecutive rows of a MoE with ``experts`` routed experts,
    top ``top_k``, loading ``distinct`` experts per layer on average."""
    model: str
    experts: int
    top_k: int
    rows: int
    distinct: float
    source: str


POINTS = (UnionPoint("Laguna XS 2.1", 256, 8, 8, 39.4, LUCEBOX_501),
          UnionPoint("Laguna XS 2.1", 256, 8, 15, 58.9, LUCEBOX_501),
          UnionPoint("GLM-4.7-Flash", 64, 4, 2, 4 + 4 * (1 - 0.257), MLX_1485))
FITS = {"laguna-8": (0,), "laguna-15": (1,), "laguna-both": (0, 1)}   # fit name -> the points it uses
USED = "laguna-both"   # the fit stored for K2.6


def chain_union(p: UnionPoint, rho_path: float) -> float:
    """The union model's distinct experts of ``p.rows`` consecutive rows."""
    return float(eu.expected_union(p.experts, p.top_k, 1 + (p.rows - 1) * (1 - rho_path)))


def fit(points, grid: int = 20001) -> float:
    """rho_path in [0, 1] minimising the squared relative error over ``points``."""
    values = np.linspace(0, 1, grid)
    err = [sum((chain_union(p, r) / p.distinct - 1) ** 2 for p in points) for r in values]
    return float(values[int(np.argmin(err))])


def fits() -> dict[str, float]:
    return {name: fit([POINTS[i] for i in used]) for name, used in FITS.items()}


def table(rhos: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per (fit, published point): the stored ``expert_union_published.csv``
    (independent: the prediction with rho 0)."""
    rhos = rhos or fits()
    rows = []
    for name, rho in rhos.items():
        for i, p in enumerate(POINTS):
            pred = chain_union(p, rho)
            rows.append({"model": p.model, "experts": p.experts, "top_k": p.top_k, "rows": p.rows,
                         "distinct_published": round(p.distinct, 4), "distinct_predicted": pred,
                         "calibration": i in FITS.get(name, ()), "fit": name, "rho_path": rho,
                         "error": pred / p.distinct - 1,
                         "independent": float(eu.independent_union(p.experts, p.top_k, p.rows)),
                         "source": p.source})
    return pd.DataFrame(rows)


def toy_rhos(directory=RESULTS_DIR) -> dict:
    """The lab's 8-expert toy: rho from its pairs measured directly and its union-implied fit."""
    pairs = pd.read_csv(directory / eu.PAIRS_CSV)
    return {"pairs": eu.pooled_rho(pairs, "pairs"), "union": eu.pooled_rho(pairs, "union")}


def routing_fit(rhos: dict[str, float], toy: dict) -> dict:
    """The routing stored for K2.6: rho_path of ``USED``, rho_sibling = rho_path x the toy's
    sibling / path pair ratio, each with its source."""
    ratio = toy["pairs"]["sibling"] / toy["pairs"]["path"]
    path = rhos[USED]
    return {"rho_path": path, "rho_sibling": min(1.0, path * ratio), "fit": USED,
            "source": f"rho_path fitted on {', '.join(f'{POINTS[i].model} {POINTS[i].rows} rows' for i in FITS[USED])} "
                      f"({UNIONS_CSV}); rho_sibling = rho_path x {ratio:.3f}, the lab's measured sibling / path pair "
                      f"ratio (expert_pairs.csv, measure pairs): no published point measures siblings",
            "sibling_over_path": ratio, "toy_pairs": toy["pairs"], "toy_union_fit": toy["union"]}


def write(directory=RESULTS_DIR) -> tuple[pd.DataFrame, dict]:
    """Both stored files; the table also carries the toy's two rho_path values (fitted on no
    published point) beside the published fits."""
    rhos, toy = fits(), toy_rhos(directory)
    t = table(rhos | {"toy pairs": toy["pairs"]["path"], "toy union fit": toy["union"]["path"]})
    fit_ = routing_fit(rhos, toy)
    t.to_csv(directory / UNIONS_CSV, index=False, float_format="%.6g")
    (directory / FIT_JSON).write_text(json.dumps(fit_, indent=1, sort_keys=True) + "\n")
    return t, fit_


def load_fit(directory=RESULTS_DIR) -> dict:
    return json.loads((directory / FIT_JSON).read_text())


def held_out_errors(t: pd.DataFrame) -> pd.DataFrame:
    """The rows no fit used: per fit and point, the error (the goals' numbers)."""
    return t[~t.calibration & t.fit.isin(list(FITS))][["fit", "model", "rows", "distinct_published", "distinct_predicted", "error"]]


def study() -> None:
    """The registry's step (``main``)."""
    main()


def main(argv=None) -> None:
    t, f = write()
    print(t.drop(columns="source").to_string(index=False))
    print(json.dumps({k: v for k, v in f.items() if k != "source"}, indent=1))
    worst = held_out_errors(t).error.abs().max()
    print(f"largest held-out error {worst:+.1%}" if not math.isnan(worst) else "no held-out point")


if __name__ == "__main__":
    main()
