"""The expert union of MoE trees (issue 61 item 1): the independent-routing formula against a
simulation, the counting helpers on hand-built rows, the pairs of a small tree, the union
model's effective tokens, the fit recovering a known correlation, and the stored tables
(independent rows equal n (1 - (1 - k/n)^tokens); a tree's union never falls as it grows)."""
import numpy as np
import pandas as pd
import pytest
import torch

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.studies import expert_union as eu

N, K = 8, 2


def test_independent_union_is_the_expectation_of_independent_top_k():
    gen = torch.Generator().manual_seed(0)
    for tokens in (1, 3, 9):
        picks = torch.rand(20000, tokens, N, generator=gen).argsort(-1)[..., :K]  # k distinct experts a row
        unions = torch.nn.functional.one_hot(picks, N).flatten(1, 2).any(1).sum(1).double()  # [20000]
        print(tokens, unions.mean().item(), eu.independent_union(N, K, tokens))
        assert abs(unions.mean().item() - eu.independent_union(N, K, tokens)) < 0.03


def test_union_sizes_and_shared_experts_on_hand_built_rows():
    experts = torch.tensor([[0, 1], [1, 2], [3, 4], [0, 1]])  # [T=4, k=2]
    assert eu.union_sizes(experts, (0, 1, 2, 3)) == [2, 3, 5, 5]
    pairs = torch.tensor([[0, 1], [0, 3], [1, 2]])
    assert eu.shared_experts(experts, pairs) == 1 + 2 + 0


def test_tree_pairs_of_a_small_tree():
    parents = torch.tensor([-1, 0, 0, 1, 1, 0])  # root with children 1, 2, 5; node 1 with 3, 4
    pairs = eu.tree_pairs(parents, 10, torch.Generator().manual_seed(0))
    assert pairs["sibling"].tolist() == [[1, 2], [3, 4], [1, 5]]
    assert pairs["path"].tolist() == [[0, 1], [0, 2], [1, 3], [1, 4], [0, 5]]
    assert (pairs["random"][:, 0] != pairs["random"][:, 1]).all()


def test_rho_is_zero_when_independent_one_when_identical_and_inverts():
    assert eu.rho(K * K / N, N, K) == pytest.approx(0.0)
    assert eu.rho(K, N, K) == pytest.approx(1.0)
    assert eu.shared_of(eu.rho(0.9, N, K), N, K) == pytest.approx(0.9)


def test_effective_tokens_chain_sibling_and_extremes():
    chain = eu.chain_parents(5)
    assert eu.effective_tokens(chain, 0.0, 0.0).tolist() == [1, 2, 3, 4, 5]
    assert eu.effective_tokens(chain, 1.0, 1.0).tolist() == [1, 1, 1, 1, 1]
    star = [-1, 0, 0, 0]   # three siblings: the first pays 1 - rho_path, the later ones 1 - max(rho)
    assert eu.effective_tokens(star, 0.5, 0.75).tolist() == [1, 1.5, 1.75, 2.0]
    assert eu.expected_union(N, K, 1) == pytest.approx(K)


def _fake_cases(rho_path: float, rho_sibling: float, budgets) -> pd.DataFrame:
    """Cases whose 'measured' unions are the union model's own at the given rhos."""
    trees = [[-1, 0, 0, 1, 1, 2, 0, 3, 3, 4], [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8]]
    metrics = []
    for parents in trees:
        t = eu.effective_tokens(parents, rho_path, rho_sibling)
        c = eu.effective_tokens(eu.chain_parents(len(parents)), rho_path, 0.0)
        metrics.append({"layers": [1], "parents": parents,
                        "tree": [[float(eu.expected_union(N, K, t[b])) for b in budgets]],
                        "chain": [[float(eu.expected_union(N, K, c[b])) for b in budgets]]})
    return pd.DataFrame({"case": [0, 1], "_metrics": metrics})


def test_fit_rhos_recovers_the_correlation_that_made_the_unions():
    cfg = eu.UnionConfig(cases=2, budgets=(1, 2, 4, 8))
    fit = eu.fit_rhos(_fake_cases(0.6, 0.8, cfg.budgets), cfg, N, K, grid=100)
    print(fit)
    assert fit == {"path": pytest.approx(0.6), "sibling": pytest.approx(0.8)}


def test_stored_independent_rows_equal_the_formula_and_the_tree_union_grows():
    union = pd.read_csv(RESULTS_DIR / eu.UNION_CSV)
    ind = union[union.kind == "independent"]
    assert len(ind) and np.allclose(ind.experts, eu.independent_union(N, K, ind.budget + 1), atol=1e-3)
    assert set(union.kind) == {"tree", "chain", "token", "independent"} and union.budget.max() >= 256
    tree = union[union.kind == "tree"].groupby("budget").experts.mean()
    assert (tree.diff().dropna() >= 0).all() and (union[union.kind == "token"].experts == K).all()
    pairs = pd.read_csv(RESULTS_DIR / eu.PAIRS_CSV)
    assert {"sibling", "path", "random", "unrelated", "independent"} <= set(pairs.pair)
    assert set(eu.pooled_rho(pairs, "union")) == {"path", "sibling"}


@pytest.mark.slow
def test_measure_smoke_on_the_shipped_moe_target(tmp_path):
    """Two small cases on the shipped MLA pair: the tree verify routes one row per node, and the
    root routes alike in the tree's verify and in the plain forward of the text."""
    from ddtree_lab import load_pair
    from ddtree_lab.experiments.plumbing.results import ResultsStore
    pair = load_pair("mla")
    cases = eu.measure(pair, eu.SMOKE, ResultsStore(eu.STORE, tmp_path))
    assert len(cases) == eu.SMOKE.cases
    for m in cases["_metrics"]:
        assert len(m["parents"]) == eu.SMOKE.max_budget + 1 and len(m["gains"]) == eu.SMOKE.max_budget
    context, following = torch.arange(40, 80), torch.arange(80, 80 + eu.SMOKE.max_budget)
    tree, tree_rows, chain_rows = eu.routed_rows(pair.target, pair.drafter, context, following, eu.SMOKE)
    for layer, rows in tree_rows.items():
        assert rows.shape == (len(tree), K) and chain_rows[layer].shape == (eu.SMOKE.max_budget + 1, K)
        assert set(rows[0].tolist()) == set(chain_rows[layer][0].tolist())  # the root routes alike in both
    again = eu.measure(pair, eu.SMOKE, ResultsStore(eu.STORE, tmp_path))  # resumable: nothing recomputed
    assert len(ResultsStore(eu.STORE, tmp_path).rows()) == eu.SMOKE.cases and len(again) == eu.SMOKE.cases
