"""The expert-aware ``auto`` budget (issue 61 item 4): ``allocate.auto_trees`` reads a cost
model that prices each tree by its own nodes and cuts the best prefix; it only chooses the tree,
so the MLA target's output equals AR at T = 0; its cost moves with the tree's expected union
and equals the base curve on the tree the base was measured on; the stored run is lossless."""
import pytest
import torch

from ddtree_lab.core import allocate
from ddtree_lab.core import tree as tree_mod
from ddtree_lab.experiments.plumbing.costs import CostModel
from ddtree_lab.experiments.plumbing.expert_costs import ExpertCostModel
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.experiments.studies import expert_auto as ea

BASE = CostModel((1, 8, 64), (1.0, 1.2, 3.0), 0.2)


def _tree(budget=32, seed=0) -> tree_mod.DraftTree:
    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(seed)) * 3
    return tree_mod.build_tree(logits, 3, budget)


class _Priced:
    """A cost model that prices every prefix of a tree: cheap at exactly ``cheap`` nodes."""
    max_budget = 32

    def __init__(self, cheap: int):
        self.cheap = cheap

    def tree_round_seconds(self, tree):
        s = torch.full((tree.num_nodes,), 10.0, dtype=torch.float64)
        s[self.cheap - 1] = 0.01
        return s


def test_auto_trees_cuts_the_prefix_a_tree_priced_cost_model_prefers():
    full = _tree()
    out = allocate.auto_trees([full], _Priced(5))[0]
    assert out.num_nodes == 5 and torch.equal(out.tokens, full.tokens[:6])
    with pytest.raises(ValueError, match="one tree at a time"):
        allocate.auto_trees([full, _tree(seed=1)], _Priced(5))


def test_expert_cost_is_the_base_on_its_reference_tree_and_moves_with_the_union():
    full = _tree()
    model = ExpertCostModel(BASE, 0.01, 7, 8, 2, 0.5, 0.5, tuple(full.parents.tolist()))
    base = BASE.round_seconds(torch.arange(1, full.num_nodes + 1))
    assert torch.allclose(model.tree_round_seconds(full), base)
    chain = tree_mod.chain_tree(full.tokens[1:], int(full.tokens[0]))
    loose = ExpertCostModel(BASE, 0.01, 7, 8, 2, 0.5, 0.9, tuple(full.parents.tolist()))  # siblings share more
    assert (loose.tree_round_seconds(chain)[1:] >= loose.tree_round_seconds(full)[1:] - 1e-12).all()


def test_expert_aware_auto_equals_ar_at_t0_on_the_mla_target():
    from ddtree_lab import generate, load_pair
    target, drafter, _ = pair = load_pair("mla")
    ids = pair.prompt_ids(0)
    full = tree_mod.build_tree(torch.randn(7, target.config.vocab_size), 1, 64)
    model = ExpertCostModel(CostModel((1, 16, 64), (0.01, 0.012, 0.03), 0.005), 1e-4, 7, 8, 2, 0.68, 0.86,
                            tuple(full.parents.tolist()))
    ar = generate(target, drafter, ids, method="ar", max_new_tokens=24)
    auto = generate(target, drafter, ids, method="ddtree", budget="auto", block_size=8, max_new_tokens=24,
                    cost_model=model)
    print(auto.tree_sizes, auto.acceptance_lengths)
    assert auto.tokens == ar.tokens and max(auto.tree_sizes) <= 64


def test_the_stored_run_is_lossless_and_holds_both_autos():
    frame = ResultsStore(ea.STORE).frame()
    table = ea.table(frame[frame.run == ea.RUN])
    print(table.to_string())
    autos = table[table.budget.astype(str) == "auto"]
    assert set(autos.cost) == {"nodes", "experts"} and (table.matches_ar == 1).all()
