"""Issue 69: the per-depth acceptance model (exact inverse of the chain, best first equal to brute
force, no tau on its cap), the routing fitted to published unions (each fit reproduces what it
used; the stored table's held-out errors), and the K2.6 bounds (every cell, consistent columns,
one cell rebuilt)."""
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from ddtree_lab.app import claims
from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.studies import acceptance_model as am
from ddtree_lab.experiments.studies import gpu_projection as gp
from ddtree_lab.experiments.studies import k26_bounds as kb
from ddtree_lab.experiments.studies import published_unions as pu

SHAPE = am.Shape("t", 0.5, 0.3, "")


@pytest.mark.parametrize("tau,depth", [(1.5, 7), (5.3, 7), (6.61, 15)])
def test_the_chain_acceptance_inverts_the_chain_tau(tau, depth):
    a = am.chain_acceptance(tau, depth)
    assert 1 + sum(a ** d for d in range(1, depth + 1)) == pytest.approx(tau, rel=1e-12)
    with pytest.raises(ValueError, match="chain_tau"):
        am.chain_acceptance(depth + 1.0, depth)


def test_best_first_equals_the_heaviest_nodes_and_a_tree_without_siblings_is_the_chain():
    a, depth, ranks = 0.7, 3, 6
    values = sorted((math.prod(am.rank_prob(a, SHAPE.s, SHAPE.rho, r) for r in path)
                     for d in range(1, depth + 1) for path in itertools.product(range(1, ranks + 1), repeat=d)),
                    reverse=True)
    tree = am.model_tree(a, SHAPE, depth, 20)
    assert np.allclose(tree.tau, 1 + np.cumsum(values[:20]), rtol=1e-12)
    assert all(p < i for i, p in enumerate(tree.parents) if i)
    chain = am.model_tree(0.8, am.Shape("none", 0.0, 0.3, ""), 7, 7)
    assert chain.parents == [-1] + list(range(7)) and chain.tau[-1] == pytest.approx(1 + sum(0.8 ** d for d in range(1, 8)))


@pytest.mark.parametrize("tau", [3.6, 5.3, 5.5])
def test_no_projected_tau_sits_on_its_cap(tau):
    t = am.tree_tau(tau, SHAPE, 7, range(1, 513))
    assert claims.no_tau_on_cap(pd.Series(t, index=range(1, 513))).ok
    assert (np.diff(t) > 0).all() and t[-1] < 8


def test_a_published_gain_is_reached():
    chain, tree, _ = am.published_ratio("Qwen3-8B")
    s = am.fit_gain(chain, tree, 15, am.PAPER_FIT_BUDGET, 0.25)
    got = am.tree_tau(chain, am.Shape("q", s, 0.25, ""), 15, [am.PAPER_FIT_BUDGET])[0]
    assert 0 < s < 1 and got == pytest.approx(tree, rel=1e-6)


def test_each_union_fit_reproduces_what_it_used():
    for name, used in pu.FITS.items():
        rho = pu.fit([pu.POINTS[i] for i in used])
        if len(used) == 1:
            assert pu.chain_union(pu.POINTS[used[0]], rho) == pytest.approx(pu.POINTS[used[0]].distinct, rel=1e-3)
    p = pu.POINTS[0]
    assert pu.chain_union(p, 0.0) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 8))
    assert pu.chain_union(p, 1.0) == pytest.approx(8.0)


def test_the_stored_unions_and_routing_fit():
    t = pd.read_csv(RESULTS_DIR / pu.UNIONS_CSV)
    fit = json.loads((RESULTS_DIR / pu.FIT_JSON).read_text())
    assert {"model", "experts", "top_k", "rows", "distinct_published", "distinct_predicted", "calibration",
            "source"} <= set(t.columns)
    assert {(r.model, r.rows) for r in t.itertuples()} >= {("Laguna XS 2.1", 8), ("Laguna XS 2.1", 15)}
    assert np.allclose(t.error, t.distinct_predicted / t.distinct_published - 1, rtol=1e-4, atol=1e-5)  # 6 digits
    used = t[t.fit == pu.USED]
    assert np.allclose(used.rho_path, fit["rho_path"]) and fit["rho_sibling"] >= fit["rho_path"] and fit["source"]
    print(claims.unions_predicted(t))


def test_ranges():
    assert kb.ranges([4, 5, 6, 9, 11, 12]) == "4-6;9;11-12" and kb.ranges([7]) == "7"


def test_the_stored_bounds():
    t = pd.read_csv(RESULTS_DIR / kb.BOUNDS_CSV)
    assert claims.bounds_cover(t).ok
    assert set(t.chain_tau) == set(kb.CHAIN_TAUS) and set(t.fixed_ms) == set(kb.FIXED_MS)
    assert ((t.winner == "tree") == (t.best_tree_speedup > t.chain_speedup * (1 + kb.TIE))).all()
    for r in t.itertuples():
        spans = [tuple(map(int, part.split("-"))) if "-" in part else (int(part),) * 2
                 for part in r.within_5pct.split(";")]
        assert any(lo <= r.best_budget <= hi for lo, hi in spans)
    assert (t.block_size == 8).all() and t.chain_tau_source.str.len().min() > 10


def test_one_stored_cell_is_rebuilt():
    t = pd.read_csv(RESULTS_DIR / kb.BOUNDS_CSV)
    row = t[(t.fixed_ms == 1.0) & (t.chain_tau == 5.3) & (t.routing == "independent")
            & (t.tree_gain == kb.GAIN_NAMES["lab"])].iloc[0]
    shape = am.Shape("lab", row.sibling_share, row.rank_decay, "")
    base = gp.setting(kb.MODEL, kb.ACCELERATOR, kb.GPUS, kb.STACK, 0.0)
    s = gp.Setting(base.model, base.drafter, base.acc, base.gpus, base.stack, 0.0, 1e-3)
    got = kb.cell(s, gp.INDEPENDENT, 5.3, gp.model_curve(5.3, shape, 8, kb.MAX_BUDGET))
    assert got["best_budget"] == row.best_budget and got["winner"] == row.winner
    assert got["chain_speedup"] == pytest.approx(row.chain_speedup, rel=1e-5)
