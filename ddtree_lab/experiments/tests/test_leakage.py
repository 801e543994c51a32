"""State leakage of naive GDN tree verification (docs/background.md section 4), per node.

On a chain, naive == wy; on a branched tree, naive is exact exactly at the nodes whose
predecessors in flattened order are all ancestors, and wrong after the first branch; fork
matches wy everywhere. Plus column semantics and the AR-divergence summary.
"""
import pandas as pd
import pytest
import torch

from ddtree_lab.experiments.studies import leakage
from ddtree_lab.core.tree import chain_tree
from helpers import generator, random_tree, toy_pair

EXACT_TOL = 1e-5   # float32 rounding between modes, measured ~2e-7
LEAK_MIN = 1e-4    # leaked nodes, measured >= 4e-3 on gdn-toy


@pytest.fixture(scope="module")
def pair():
    return toy_pair("gdn-toy")


def prompts(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 63, (int(torch.randint(1, 10, (), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def test_chain_has_no_leakage(pair):
    target, _ = pair
    g = torch.Generator().manual_seed(5)
    tree = chain_tree(torch.randint(0, 64, (7,), generator=g), root_token=3)
    f = leakage.node_errors(target, [1, 2, 3, 4], tree)
    print(f"chain: naive max {f.err_naive.max():.2e}, fork max {f.err_fork.max():.2e}")
    assert len(f) == 8 and (f.non_ancestors_before == 0).all() and not f.first_branch_before.any()
    assert f.err_naive.max() < EXACT_TOL and f.err_fork.max() < EXACT_TOL


@pytest.fixture(scope="module")
def table(pair):
    target, drafter = pair
    return leakage.leakage_table(target, prompts(), drafter, budgets=(4, 24), block_size=8)


def test_leakage_only_after_first_branch(table):
    clean, leaked = table[~table.first_branch_before], table[table.first_branch_before]
    frac = (leaked.err_naive > LEAK_MIN).mean()
    print(f"clean nodes {len(clean)}: naive max {clean.err_naive.max():.2e}; leaked nodes {len(leaked)}: "
          f"naive min {leaked.err_naive.min():.2e}, {frac:.0%} > {LEAK_MIN}; "
          f"fork max {table.err_fork.max():.2e}")
    assert len(clean) >= 3 and len(leaked) >= 10
    assert clean.err_naive.max() < EXACT_TOL
    assert frac > 0.5
    assert table.err_fork.max() < EXACT_TOL


def test_columns_and_semantics(table, pair):
    assert list(table.columns) == ["prompt", "budget", "node", "depth", "flat_position",
                                   "non_ancestors_before", "first_branch_before", "err_naive", "err_fork", "argmax_flip"]
    assert sorted(table.groupby(["prompt", "budget"]).size().tolist()) == [5, 5, 5, 25, 25, 25]
    tree = random_tree("bushy", 30, 64, generator("leakage-columns"))
    f = leakage.node_errors(pair[0], [7, 8], tree)
    for i in range(len(tree)):
        ancestors = set(tree.path_to(i)[:-1])
        brute = sum(j not in ancestors for j in range(i))
        assert f.non_ancestors_before[i] == brute and f.first_branch_before[i] == (brute > 0)
        assert f.flat_position[i] == i and f.depth[i] == int(tree.depths[i])


def test_leakage_table_accepts_a_logits_source(pair):
    target, _ = pair
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(9))
    f = leakage.leakage_table(target, [[1, 2, 3]], lambda prompt: logits, budgets=(6,))
    assert len(f) == 7 and (f.prompt == 0).all() and (f.budget == 6).all()


def test_divergence_summary_lists_and_frames():
    ar = [[1, 2, 3, 4], [5, 6, 7], [1, 1]]
    other = [[1, 2, 3, 4], [5, 9, 7], [1, 1, 2]]
    s = leakage.divergence_summary(ar, other)
    assert s["first_divergence"] == [None, 1, 2] and s["n_diverged"] == 2 and s["fraction_diverged"] == 2 / 3
    frame = lambda runs, prompts: pd.DataFrame({"prompt": prompts, "_metrics": [{"tokens": t} for t in runs]})
    s = leakage.divergence_summary(frame(ar, [10, 11, 12]), frame(other[::-1], [12, 11, 10]))
    assert s["first_divergence"] == [2, 1, None] and s["prompts"] == [12, 11, 10]
    with pytest.raises(ValueError, match="no AR run"):
        leakage.divergence_summary(frame(ar, [10, 11, 12]), frame(other[:1], [99]))
