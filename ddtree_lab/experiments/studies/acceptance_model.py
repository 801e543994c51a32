"""tau(B) from a per-depth acceptance model (issue 69 item 2; docs/background.md, "tau(B) from
a per-depth acceptance model").

A round drafts L = block_size - 1 depths. Given that the target accepted the path down to a
node, the node's child of drafter rank r is the target's token with probability

    pi_1 = a                                   (the chain: the drafter's top token)
    pi_r = (1 - a) s (1 - rho) rho^(r - 2)     r >= 2: a sibling catches a share of the misses

the same at every depth. A node's value is the product of pi along its path (the probability
the target accepts it); a round expects 1 + the sum of its nodes' values. So

    chain tau  = 1 + sum_{d=1..L} a^d          (one parameter: a, solved from the chain's tau)
    tree tau(B) = 1 + the B largest node values (best first: every prefix is prefix-closed)

s (the share of the chain's misses that some sibling catches) and rho (how fast the share
falls with rank) are the tree's gain over the chain: fitted on the lab's own trees (the bench's
block-8 tau outside loops, both targets, ``fit_shape``), or re-fitted so that a published tree
tau is reached (``fit_gain``: the DDTree paper's Qwen3-8B and Qwen3-Coder-30B-A3B ratios).
Every value pi < 1, so tau(B) < B + 1: no projected tau sits on its cap.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...common import RESULTS_DIR
from .gpu_specs import PUBLISHED

BENCH_CSV = "bench.csv"
FIT_BUDGETS = (1, 4, 16, 32, 64, 128, 256)
PAPER_FIT_BUDGET = 256   # the DDTree paper's speedup peaks at budgets 256-512: its tree tau is read at 256


@dataclass(frozen=True)
class Shape:
    """A tree's gain over its chain: sibling share ``s`` in [0, 1], rank decay ``rho`` in [0, 1)."""
    name: str
    s: float
    rho: float
    source: str


@dataclass(frozen=True)
class ModelTree:
    """The model's best tree: tau [N] (tau at budgets 1..N), parents [N + 1] (root -1, pop order)."""
    tau: np.ndarray
    parents: list


def chain_acceptance(chain_tau: float, depth: int) -> float:
    """a with 1 + sum_{d=1..depth} a^d = chain_tau (bisection); chain_tau in (1, depth + 1)."""
    if not 1.0 < chain_tau < depth + 1:
        raise ValueError(f"chain_tau must lie in (1, {depth + 1}) for {depth} depths, got {chain_tau!r}")
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 + sum(mid ** d for d in range(1, depth + 1)) < chain_tau else (lo, mid)
    return (lo + hi) / 2


def rank_prob(a: float, s: float, rho: float, r: int) -> float:
    """pi_r: the probability that the child of rank r (1 = the drafter's top) is the target's token."""
    return a if r == 1 else (1 - a) * s * (1 - rho) * rho ** (r - 2)


def model_tree(a: float, shape: Shape, depth: int, nodes: int) -> ModelTree:
    """The best tree of ``nodes`` nodes over ``depth`` depths, best first (DDTree's construction,
    arXiv 2604.12989 section 3, on the model's values): pop the heaviest node, push its first
    child and its next sibling."""
    heap = [(-a, 0, 1, 1)]   # (-value, parent index, depth, rank)
    parents, values = [-1], []
    while heap and len(values) < nodes:
        neg, parent, d, r = heapq.heappop(heap)
        me = len(parents)
        parents.append(parent)
        values.append(-neg)
        parent_value = -neg / rank_prob(a, shape.s, shape.rho, r)
        nxt = rank_prob(a, shape.s, shape.rho, r + 1) * parent_value
        if nxt > 0:
            heapq.heappush(heap, (-nxt, parent, d, r + 1))
        if d < depth:
            heapq.heappush(heap, (-a * -neg, me, d + 1, 1))
    return ModelTree(1.0 + np.cumsum(values), parents)


def tree_tau(chain_tau: float, shape: Shape, depth: int, budgets) -> np.ndarray:
    """tau at each of ``budgets`` for a chain of ``chain_tau`` over ``depth`` depths."""
    b = np.asarray(budgets, dtype=int)
    t = model_tree(chain_acceptance(chain_tau, depth), shape, depth, int(b.max())).tau
    return t[np.minimum(b, len(t)) - 1]


# ----------------------------------------------------------------------------- fits

def lab_curves(bench: pd.DataFrame, column: str = "tau_outside_loops") -> list[tuple[float, int, dict]]:
    """[(chain tau, depth, {budget: tree tau})] per target of the bench (T = 0, exact mode)."""
    out = []
    t = bench[(bench.temperature == 0) & (bench.gdn_mode == "wy")]
    for _, g in t.groupby("arch"):
        chain = g[g.method == "dflash"].iloc[0]
        trees = g[(g.method == "ddtree") & (g.budget.astype(str) != "auto")]
        out.append((float(chain[column]), int(chain.block_size) - 1,
                    {int(b): float(v) for b, v in zip(trees.budget, trees[column]) if int(b) in FIT_BUDGETS}))
    return out


def _loss(curves, s: float, rho: float) -> float:
    err = 0.0
    for chain, depth, taus in curves:
        got = tree_tau(chain, Shape("fit", s, rho, ""), depth, list(taus))
        err += sum((g / t - 1) ** 2 for g, t in zip(got, taus.values()))
    return err


def fit_shape(curves, grid: int = 21, rounds: int = 3) -> Shape:
    """(s, rho) minimising the squared relative error of tau(B) over every curve: a grid, then
    ``rounds`` - 1 finer grids around the best cell."""
    best = (math.inf, 0.0, 0.0)
    s_axis, r_axis = np.linspace(0, 1, grid), np.linspace(0, 0.975, grid)
    for _ in range(rounds):
        best = min((_loss(curves, s, r), s, r) for s in s_axis for r in r_axis)
        ds, dr = s_axis[1] - s_axis[0], r_axis[1] - r_axis[0]
        s_axis = np.clip(np.linspace(best[1] - ds, best[1] + ds, 11), 0, 1)
        r_axis = np.clip(np.linspace(best[2] - dr, best[2] + dr, 11), 0, 0.99)
    return Shape("lab", float(best[1]), float(best[2]), "")


def fit_gain(chain_tau: float, tree: float, depth: int, budget: int, rho: float) -> float:
    """s at which the model's tau(budget) equals ``tree`` (rho kept); 1.0 when even s = 1 falls short."""
    def at(s):
        return float(tree_tau(chain_tau, Shape("fit", s, rho, ""), depth, [budget])[0])
    if at(1.0) <= tree:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) < tree else (lo, mid)
    return (lo + hi) / 2


def published_ratio(model: str) -> tuple[float, float, str]:
    """(chain tau, tree tau, source) of the DDTree paper's HumanEval point for ``model``."""
    chain = next(p for p in PUBLISHED if p.model == model and p.method == "dflash")
    tree = next(p for p in PUBLISHED if p.model == model and p.method == "ddtree")
    return chain.tau, tree.tau, tree.source


def shapes(directory=RESULTS_DIR) -> dict[str, Shape]:
    """The tree gains of the bounds: the lab's (fitted on ``bench.csv``) and the two published
    DDTree ratios (s re-fitted at block 16, budget ``PAPER_FIT_BUDGET``, the lab's rho kept)."""
    lab = fit_shape(lab_curves(pd.read_csv(directory / BENCH_CSV)))
    out = {"lab": Shape("lab", lab.s, lab.rho, "fitted on the lab's bench (data/results/bench.csv): block 8, "
                        "T = 0, tau outside loops at budgets 1-256 and the chain, both targets")}
    for model in ("Qwen3-8B", "Qwen3-Coder-30B-A3B"):
        chain, tree, src = published_ratio(model)
        s = fit_gain(chain, tree, 15, PAPER_FIT_BUDGET, lab.rho)
        out[model] = Shape(model, s, lab.rho, f"{tree:g} / {chain:g} at block 16 read at budget {PAPER_FIT_BUDGET} "
                                                f"(the lab's rho kept); {src}")
    return out


def shape_table(shape_map: dict[str, Shape], directory=RESULTS_DIR) -> pd.DataFrame:
    """Per shape: s, rho, and the fit: the lab's curves (measured vs model) or the published point."""
    rows = []
    for chain, depth, taus in lab_curves(pd.read_csv(directory / BENCH_CSV)):
        got = tree_tau(chain, shape_map["lab"], depth, list(taus))
        rows += [{"shape": "lab", "chain_tau": chain, "depth": depth, "budget": b, "measured_tau": t,
                  "model_tau": float(g), "error": float(g) / t - 1} for (b, t), g in zip(taus.items(), got)]
    for name in ("Qwen3-8B", "Qwen3-Coder-30B-A3B"):
        chain, tree, _ = published_ratio(name)
        got = float(tree_tau(chain, shape_map[name], 15, [PAPER_FIT_BUDGET])[0])
        rows.append({"shape": name, "chain_tau": chain, "depth": 15, "budget": PAPER_FIT_BUDGET,
                     "measured_tau": tree, "model_tau": got, "error": got / tree - 1})
    out = pd.DataFrame(rows)
    return out.assign(s=out["shape"].map(lambda k: shape_map[k].s), rho=out["shape"].map(lambda k: shape_map[k].rho))
