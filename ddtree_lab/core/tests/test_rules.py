"""Tree rules and acceptance walks as plug-ins (``core.rules``): the built-ins have the plug-in
shape, a rule or a walk of one's own runs through every entry point and equals AR at T = 0, a
broken tree is a ValueError naming the node and the fault before the verify, keys name a
plug-in by its definition, and core never compares a rule's or a walk's name."""
import itertools
import re

import pytest
import torch

from ddtree_lab import GenerationSpec, generate, generate_batch, load_pair, reference_generate
from ddtree_lab.core import rules
from ddtree_lab.common import ROOT
from ddtree_lab.core import decode, rules
from ddtree_lab.core.conditional import build_conditional_tree, conditional_chain
from ddtree_lab.core.drafter import Draft
from ddtree_lab.core.spec import Sampling
from ddtree_lab.core.tree import DraftTree, accept, build_tree, chain_of
from helpers import toy_dflash2, toy_pair

TOY = toy_pair("gdn-toy")


def top2_per_depth(draft, root_token, budget):
    """Every node gets the 2 best tokens of the next depth, breadth first, until the budget."""
    paths = [p for d in range(1, len(draft.logits) + 1) for p in itertools.product(range(2), repeat=d)]
    return rules.from_rank_paths(draft.logits, root_token, paths[:budget])


def _draft(L=5, V=64, seed=0):
    return Draft(torch.randn(L, V, generator=torch.Generator().manual_seed(seed)) * 2)


def test_the_built_ins_are_rules_of_the_plugin_shape():
    draft = _draft()
    assert rules.unary is rules.best_first and rules.TREES == ("unary", "conditional")
    assert all(torch.equal(getattr(rules.best_first(draft, 3, 12), f), getattr(build_tree(draft.logits, 3, 12), f))
               for f in ("tokens", "parents", "depths", "log_weights"))
    chain = rules.dflash_chain(draft, 3, 5)
    assert torch.equal(chain.tokens, chain_of(draft.logits.argmax(-1), 3).tokens)
    assert rules.dflash_chain(draft, 3, 2).num_nodes == 2 and rules.best_first.chain is rules.dflash_chain
    _, d2 = toy_dflash2()
    cdraft = d2.draft(d2.new_state(), torch.randn(5, d2.cfg.feature_size), 3, 8)
    assert torch.equal(rules.conditional(cdraft, 3, 16).tokens, build_conditional_tree(cdraft.conditional, 3, 16).tokens)
    assert torch.equal(rules.conditional_chain(cdraft, 3, 7).tokens, conditional_chain(cdraft.conditional, 3).tokens)
    assert isinstance(rules.conditional.proposal(cdraft), rules.Conditional)
    assert type(rules.best_first.proposal(draft)) is rules.Marginal
    assert type(rules.as_rule(top2_per_depth).proposal(draft)) is rules.MarginalAnyTree


def test_from_rank_paths_rebuilds_the_best_first_tree():
    draft = _draft(4, 30, seed=1)
    built = build_tree(draft.logits, 5, 20)
    ranks = rules.canonical_ranks(draft.logits)
    paths = [tuple(int(ranks[int(built.depths[j]) - 1, int(built.tokens[j])]) for j in built.path_to(i)[1:])
             for i in range(1, len(built))]
    again = rules.from_rank_paths(draft.logits, 5, paths)
    assert all(torch.equal(getattr(again, f), getattr(built, f)) for f in ("tokens", "parents", "depths", "log_weights"))
    with pytest.raises(ValueError, match=r"rank path \(0, 1, 0\).*listed after its prefix \(0, 1\)"):
        rules.from_rank_paths(draft.logits, 5, [(0,), (0, 1, 0)])


@pytest.fixture(scope="module")
def gdn():
    pair = load_pair("gdn")
    return pair, [pair.prompt_ids(0)[:30], pair.prompt_ids(1)[:20]]


def test_a_rule_of_ones_own_runs_through_every_entry_point_and_equals_ar(gdn):
    """A function rule: generate, generate_batch, a GenerationSpec and the reference loop give
    the same tokens, equal to AR at T = 0, with trees within the budget and drafts accepted."""
    pair, prompts = gdn
    spec = GenerationSpec(method="ddtree", budget=10, block_size=8, max_new_tokens=16, tree=top2_per_depth)
    ar = [generate(pair.target, None, p, method="ar", max_new_tokens=16).tokens for p in prompts]
    one = [generate(pair.target, pair.drafter, p, spec) for p in prompts]
    batch = generate_batch(pair.target, pair.drafter, prompts, spec)
    ref = reference_generate(pair.target, pair.drafter, prompts[0], spec)
    assert [g.tokens for g in one] == [g.tokens for g in batch] == ar and ref.tokens == ar[0]
    assert ref.acceptance_lengths == one[0].acceptance_lengths and ref.tree_sizes == one[0].tree_sizes
    assert max(max(g.tree_sizes) for g in one) <= 10 and sum(one[0].acceptance_lengths) > len(one[0].acceptance_lengths)


def test_a_plugin_wrapping_a_built_in_decodes_as_the_built_in(gdn):
    """The plug-in path is the built-in's path: DDTree's builder passed as a plain function (with
    DFlash's q as its proposal) gives the built-in's tokens at T = 0.8 under both walks."""
    pair, prompts = gdn

    def ddtree_again(draft, root_token, budget):
        return build_tree(draft.logits, root_token, budget)
    ddtree_again.proposal = lambda draft: rules.Marginal(draft.logits)
    for walk in ("rejection", "target"):
        kw = dict(method="ddtree", budget=8, max_new_tokens=12, temperature=0.8, accept_rule=walk, seed=4)
        own = generate(pair.target, pair.drafter, prompts[1], tree=ddtree_again, **kw)
        assert own.tokens == generate(pair.target, pair.drafter, prompts[1], tree="unary", **kw).tokens, walk


def test_a_walk_of_ones_own_is_called_with_the_walk_signature(gdn):
    """A plain function walk (target matching written out) equals the built-in bit for bit; one
    with ``draws_tree`` gets the tree drawn from q, as the rejection walk does."""
    pair, prompts = gdn
    calls = []

    def matching(tree, target_logits, proposal, temperature, generator):
        calls.append((len(tree), tuple(target_logits.shape)))
        return accept(tree, rules.choose_tokens(target_logits, temperature, generator))

    def rejecting(tree, target_logits, proposal, temperature, generator):
        return rules.accept_rejection(tree, target_logits, proposal, temperature, generator)
    rejecting.draws_tree = True
    kw = dict(method="ddtree", budget=8, max_new_tokens=12, temperature=0.8, seed=2)
    for own, built in ((matching, "target"), (rejecting, "rejection")):
        got = generate(pair.target, pair.drafter, prompts[0], accept_rule=own, **kw)
        assert got.tokens == generate(pair.target, pair.drafter, prompts[0], accept_rule=built, **kw).tokens
    assert calls and all(n == rows for n, (rows, _) in calls)


SHAPE = [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]  # a good tree of 6 draft nodes, depth 3


def _broken(kind: str):
    """A rule whose tree has one fault (a good tree of ``SHAPE``, one field changed)."""
    def rule(draft, root_token, budget):
        t = rules.from_rank_paths(draft.logits, root_token, SHAPE)
        tokens, parents, depths = t.tokens.clone(), t.parents.clone(), t.depths.clone()
        if kind == "parent":
            parents[2] = 2
        elif kind == "root":
            tokens[0] = (root_token + 1) % 60
        elif kind == "budget":
            return t
        elif kind == "depth":
            depths[3] += 1
        elif kind == "siblings":
            tokens[2] = tokens[1]
        elif kind == "deep":
            return chain_of(draft.logits.argmax(-1).repeat(2)[:len(draft.logits) + 1], root_token)
        return DraftTree(tokens, parents, depths, t.log_weights)
    rule.__name__ = f"broken_{kind}"
    return rule


BROKEN = [("parent", r"node 2 has parent 2, at or after it"),
          ("root", r"node 0 holds token \d+, not the root token \d+"),
          ("budget", r"6 draft nodes, more than the budget 5"),
          ("depth", r"node 3 has depth \d, but its parent node \d has depth \d \(expected \d\)"),
          ("siblings", r"node 2 holds token \d+, as its sibling node 1 does \(the children of node 0"),
          ("deep", r"node 4 has depth 4, deeper than the block \(3 draft positions")]


@pytest.mark.parametrize("kind,message", BROKEN, ids=[k for k, _ in BROKEN])
def test_a_broken_tree_is_a_value_error_naming_the_node_and_the_fault_before_the_verify(monkeypatch, kind, message):
    target, drafter = TOY
    def no_verify(*args, **kwargs):
        raise AssertionError("the verify ran on a broken tree")
    monkeypatch.setattr(decode, "verify_batch_unchecked", no_verify)
    budget = 5 if kind == "budget" else 8
    with pytest.raises(ValueError, match=message) as err:
        generate(target, drafter, [3, 1, 4], method="ddtree", budget=budget, block_size=4, max_new_tokens=4,
                 tree=_broken(kind))
    print(err.value)


def test_check_tree_refuses_what_is_not_a_tree():
    good = build_tree(_draft().logits, 3, 4)
    with pytest.raises(ValueError, match="must return a DraftTree, got list"):
        rules.check_tree([1, 2], 3, 4, 5)
    with pytest.raises(ValueError, match="no draft node"):
        rules.check_tree(DraftTree(good.tokens[:1], good.parents[:1], good.depths[:1], good.log_weights[:1]), 3, 4, 5)
    with pytest.raises(ValueError, match=r"node 2 holds token 99, outside the vocabulary \[0, 64\)"):
        bad = good.tokens.clone()
        bad[2] = 99
        rules.check_tree(DraftTree(bad, good.parents, good.depths, good.log_weights), 3, 4, 5, 64)
    with pytest.raises(ValueError, match="parents must hold integers"):
        rules.check_tree(DraftTree(good.tokens, good.parents.double(), good.depths, good.log_weights), 3, 4, 5)
    assert rules.check_tree(good, 3, 4, 5, 64) is good


def test_a_rule_without_a_chain_runs_under_ddtree_only_and_names_are_objects_from_the_api_on():
    with pytest.raises(ValueError, match="method 'dflash' drafts a chain.*'top2_per_depth' has none"):
        GenerationSpec(method="dflash", tree=top2_per_depth)
    spec = GenerationSpec(tree="conditional", sampling=Sampling(0.5, "target"))
    assert spec.tree is rules.conditional and spec.sampling.accept_rule is rules.target_matching
    assert spec.as_dict()["tree"] == "conditional" and spec.as_dict()["sampling"]["accept_rule"] == "target"
    own = GenerationSpec(tree=top2_per_depth)
    assert own == GenerationSpec(tree=top2_per_depth) and own.as_dict()["tree"] == "top2_per_depth"


# names of the built-in rules and walks: core holds their objects, never compares these
NAMES = rules.TREES + tuple(rules.WALKS) + ("best_first", "dflash_chain", "conditional_chain")
NAME = "|".join(NAMES)
NAME_COMPARISON = re.compile(
    rf"""[=!]=\s*['"]({NAME})['"]|['"]({NAME})['"]\s*[=!]=|\bin\s*[(\[{{][^)\]}}]*['"]({NAME})['"]"""
    r"""|\.name\s*[=!]=|(tree|accept_rule|rule|walk)\s*[=!]=\s*['"]""")


def name_comparisons(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if NAME_COMPARISON.search(line)]


def test_core_never_compares_a_rule_or_a_walk_name():
    found = {p.name: name_comparisons(p.read_text()) for p in sorted((ROOT / "ddtree_lab" / "core").glob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, found


def test_the_name_grep_sees_the_comparisons_core_used_to_make():
    mutants = ['if self.name == "conditional":', 'conditional = spec.tree == "conditional" or x',
               'return not self.greedy and self.accept_rule == "rejection"', 'if tree not in ("unary", "conditional"):',
               'if "target" != rule:']
    assert [bool(name_comparisons(m)) for m in mutants] == [True] * len(mutants)
    assert not name_comparisons('rule = TREE_RULES[tree]\nif method == "dflash":\nWALKS = {w.name: w for w in x}')
