"""``check_lossless``: at T = 0 token for token against AR, at T > 0 a chi-square per position
against the target's exact distribution. It passes the built-in rules and walks and a rule of
one's own, and fails a lossy mode and a deliberately biased walk."""
import itertools

import pytest
import torch

from ddtree_lab import check_lossless, load_pair
from ddtree_lab.core import rules
from ddtree_lab.core import lossless, rules
from helpers import sharp_drafter, toy_pair

TOY = toy_pair("gdn-toy")


def top2_per_depth(draft, root_token, budget):
    """Every node gets the 2 best tokens of the next depth, breadth first, until the budget."""
    paths = [p for d in range(1, len(draft.logits) + 1) for p in itertools.product(range(2), repeat=d)]
    return rules.from_rank_paths(draft.logits, root_token, paths[:budget])


def test_chi_square_pools_small_cells_and_reads_the_upper_tail():
    p = torch.tensor([0.5, 0.3, 0.15, 0.03, 0.01, 0.01], dtype=torch.float64)
    fair = torch.bincount(torch.multinomial(p, 2000, replacement=True, generator=torch.Generator().manual_seed(0)),
                          minlength=6).double()
    stat, df, pv = lossless.chi_square(fair, 2000 * p)
    assert df == 5 and pv > 1e-3
    _, _, pv = lossless.chi_square(fair[[1, 0, 2, 3, 4, 5]], 2000 * p)
    assert pv < 1e-12
    _, df, _ = lossless.chi_square(torch.tensor([8.0, 7.0, 1.0, 0.0]), torch.tensor([8.0, 6.0, 1.5, 0.5]))
    assert df == 1  # 0.5 and 1.5 pooled (2 expected), then with 6 (the next smallest): two cells
    stat, df, pv = lossless.chi_square(torch.tensor([3.0, 1.0]), torch.tensor([2.0, 2.0]))
    assert (df, pv) == (0, 1.0)  # everything pooled: nothing to test


def test_at_T0_a_rule_of_ones_own_equals_ar_and_a_leaking_mode_does_not():
    pair = load_pair("gdn")
    prompt = [pair.prompt_ids(0)[:40]]
    report = check_lossless(pair.target, pair.drafter, prompt, method="ddtree", budget=12, max_new_tokens=12,
                            tree=top2_per_depth)
    assert report.passed and report.counts == {0: (12, 12)} and "lossless at T = 0" in report.text()
    leaky = check_lossless(pair.target, pair.drafter, prompt, method="ddtree", budget=32, max_new_tokens=12,
                           gdn_mode="naive")
    assert not leaky.passed and leaky.counts[0][0] < 12 and leaky.p_value == 0.0, leaky.text()


@pytest.mark.parametrize("walk", ["rejection", "target"])
def test_at_T_above_0_the_built_in_walks_pass_on_a_sharp_toy_drafter(walk):
    """A drafter whose q differs from p a lot, 400 runs of the first two tokens."""
    target, drafter = TOY
    report = check_lossless(target, sharp_drafter(drafter), [[5, 9, 2], [7]], method="ddtree", budget=6,
                            block_size=4, temperature=0.5, accept_rule=walk, samples=400, positions=2)
    print(report.text())
    assert report.passed and set(report.p_values) == {1, 2} and report.samples == 400
    observed, expected = report.counts[2]
    assert float(observed.sum()) == 400 and abs(float(expected.sum()) - 400) < 1e-6


def test_at_T_above_0_a_biased_walk_fails_on_a_sharp_toy_drafter():
    target, drafter = TOY
    report = check_lossless(target, sharp_drafter(drafter), [[5, 9, 2]], method="ddtree", budget=6, block_size=4,
                            temperature=0.5, accept_rule=lossless.biased_walk(1.0), samples=400, positions=2)
    assert not report.passed and report.p_value < 1e-3, report.text()


def test_bad_arguments_are_refused_before_any_work():
    target, drafter = TOY
    for bad, match in ((dict(prompts=[1, 2]), "prompts must be a non-empty list"),
                       (dict(samples=0), "samples must be an int >= 1"), (dict(positions=1.5), "positions must be"),
                       (dict(budget="auto"), "one fixed budget")):
        kwargs = dict(prompts=[[1, 2]], method="ddtree", budget=4, block_size=4, temperature=0.5) | bad
        with pytest.raises(ValueError, match=match):
            check_lossless(target, drafter, **kwargs)


@pytest.fixture(scope="module")
def shipped():
    pair = load_pair("gdn")
    return pair, [pair.prompt_ids(0), pair.prompt_ids(1)]


SLOW_CASES = [("unary", "rejection"), (top2_per_depth, "target")]   # each rule once, each walk once


@pytest.mark.slow
@pytest.mark.parametrize("tree,walk", SLOW_CASES, ids=[f"{getattr(t, '__name__', t)}-{w}" for t, w in SLOW_CASES])
def test_the_default_check_passes_a_built_in_and_a_rule_of_ones_own(shipped, tree, walk):
    """The shipped GDN pair, two HumanEval prompts, T = 0.8, DDTree-16, the default sample count
    (how long it takes is a measurement, not a test: the check prints it)."""
    pair, prompts = shipped
    report = check_lossless(pair.target, pair.drafter, prompts, method="ddtree", budget=16, temperature=0.8,
                            tree=tree, accept_rule=walk)
    print(report.text())
    assert report.passed and report.samples == lossless.SAMPLES


@pytest.mark.slow
def test_the_default_check_fails_a_biased_walk(shipped):
    pair, prompts = shipped
    report = check_lossless(pair.target, pair.drafter, prompts, method="ddtree", budget=16, temperature=0.8,
                            accept_rule=lossless.biased_walk(1.0))
    print(report.text())
    assert not report.passed and report.p_value < 1e-3


def test_the_biased_walk_is_the_target_walk_when_it_never_fires():
    tree = rules.from_rank_paths(torch.randn(3, 16), 1, [(0,), (1,), (0, 0)])
    logits = torch.randn(4, 16)
    fair = rules.target_matching(tree, logits, None, 0.7, torch.Generator().manual_seed(5))
    never = lossless.biased_walk(0.0)
    assert never(tree, logits, None, 0.7, torch.Generator().manual_seed(5)) == fair
    assert isinstance(rules.as_walk(never), lossless.BiasedWalk) and not never.draws_tree
    assert rules.ACCEPT_RULES == tuple(rules.WALKS)
