"""The chain as one of ``auto``'s candidates (issue 69 item 6): ``allocate.auto_with_chain``
picks, under the surrogate, the candidate with the most expected tokens per predicted second
among the chain and every prefix of the tree, building no tree when its bound rules every
size out; the loop with it equals AR at T = 0 and the specification at T = 0 and T > 0."""
import functools
import math

import pytest
import torch

from ddtree_lab import generate, load_pair, reference_generate
from ddtree_lab.core import allocate, rules, tree as tree_mod
from ddtree_lab.core.drafter import Draft


class ChainCost:
    """A round costs ``base`` + ``per_node`` x nodes (s); the chain's round ``chain_s``."""

    def __init__(self, base=0.02, per_node=1e-4, chain_s=0.019, max_budget=64):
        self.base, self.per_node, self.chain_seconds, self.max_budget = base, per_node, chain_s, max_budget

    def batch_round_seconds(self, tokens: torch.Tensor, batch: int) -> torch.Tensor:
        assert batch == 1
        return self.base + self.per_node * tokens.double()


def brute_force(draft, cost) -> tuple[str, int]:
    """("chain", L) or ("tree", n): every candidate scored, the chain winning ties."""
    full = tree_mod.build_tree(draft.logits, 1, cost.max_budget)
    gains = full.log_weights[1:].exp().tolist()
    seconds = cost.batch_round_seconds(torch.arange(1, full.num_nodes + 1), 1).tolist()
    rates = [(1 + math.fsum(gains[:n])) / seconds[n - 1] for n in range(1, full.num_nodes + 1)]
    p1 = torch.softmax(draft.logits.double(), -1).amax(-1)
    chain = (1 + math.fsum(torch.cumprod(p1, 0).tolist())) / cost.chain_seconds
    best = max(range(len(rates)), key=lambda i: (rates[i], -i))
    return ("chain", draft.logits.shape[0]) if chain >= rates[best] else ("tree", best + 1)


def assert_picks_as_scored(draft, cost, scorer=None, first: int = 32) -> None:
    """``auto_with_chain`` (growing from ``first`` nodes) picks what ``scorer`` (default
    ``brute_force``) finds by scoring every candidate."""
    kind, n = (scorer or brute_force)(draft, cost)
    got = allocate.auto_with_chain(draft, 1, rules.BestFirst(), cost, first=first)
    want = (rules.dflash_chain(draft, 1, 7) if kind == "chain"
            else tree_mod.truncate(tree_mod.build_tree(draft.logits, 1, cost.max_budget), n))
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.parents, want.parents), (kind, n)


@pytest.mark.parametrize("sharp", [0.5, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("chain_s", [0.015, 0.0195, 0.02, 0.03])
def test_the_choice_equals_scoring_every_candidate(sharp, chain_s):
    gen = torch.Generator().manual_seed(int(sharp * 10 + chain_s * 1e4))
    cost = ChainCost(chain_s=chain_s)
    for _ in range(8):
        assert_picks_as_scored(Draft(torch.randn(7, 50, generator=gen) * sharp, None), cost)


class StepCost(ChainCost):
    """A round whose seconds rise in steps (flat between the measured budgets, as the lab's
    interpolated cost model can be): the rate over prefixes is not unimodal."""

    def batch_round_seconds(self, tokens: torch.Tensor, batch: int) -> torch.Tensor:
        return self.base + self.per_node * 2.0 ** torch.ceil(torch.log2(tokens.double()))


@pytest.mark.parametrize("first", [2, 4, 32])
@pytest.mark.parametrize("cost", [ChainCost(max_budget=256), StepCost(per_node=2e-4, max_budget=256),
                                  StepCost(base=0.01, per_node=5e-5, chain_s=0.011, max_budget=128)],
                         ids=["linear", "steps", "cheap-steps"])
def test_growing_the_tree_picks_what_one_build_at_the_largest_size_picks(first, cost):
    """``auto_with_chain`` builds ``first`` nodes and grows only while a longer prefix could win:
    its pick equals scoring every prefix of the tree built at ``cost.max_budget`` at once."""
    gen = torch.Generator().manual_seed(first)
    for sharp in (0.3, 1.0, 2.0, 4.0):
        for _ in range(4):
            assert_picks_as_scored(Draft(torch.randn(7, 64, generator=gen) * sharp, None), cost, first=first)


def test_a_best_first_trees_prefixes_are_its_smaller_trees():
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        logits = torch.randn(7, 64, generator=gen) * 2
        big = tree_mod.build_tree(logits, 1, 200)
        for n in (1, 4, 32, 128):
            small = tree_mod.build_tree(logits, 1, n)
            cut = tree_mod.truncate(big, n)
            assert torch.equal(small.tokens, cut.tokens) and torch.equal(small.parents, cut.parents)


def test_the_bound_holds_and_prunes():
    """A tree of n nodes expects at most E_c + n m tokens; a confident draft builds no tree."""
    gen = torch.Generator().manual_seed(0)
    for sharp in (0.5, 3.0, 10.0):
        logits = torch.randn(7, 40, generator=gen) * sharp
        lp = torch.log_softmax(logits.double(), -1).topk(2, -1).values
        along = torch.cat([torch.zeros(1, dtype=torch.float64), lp[:, 0].cumsum(0)])
        e_chain, m = 1 + float(along[1:].exp().sum()), float((along[:-1] + lp[:, 1]).exp().max())
        full = tree_mod.build_tree(logits, 1, 128)
        expected = 1 + full.log_weights[1:].exp().cumsum(0)
        assert bool((expected <= e_chain + m * torch.arange(1, full.num_nodes + 1) + 1e-12).all())
    confident = torch.full((7, 40), -20.0)
    confident[:, 3] = 20.0
    plan = allocate.chain_plan(confident, ChainCost())
    assert plan.chain and plan.max_budget == 0 and abs(plan.tokens - 8.0) < 1e-9


def test_no_chain_candidate_without_its_price_or_beyond_one_sequence():
    assert not allocate.chain_candidate(object(), rules.BestFirst(), 1)
    assert not allocate.chain_candidate(ChainCost(), rules.BestFirst(), 2)
    assert not allocate.chain_candidate(ChainCost(), rules.dflash_chain, 1)
    assert allocate.chain_candidate(ChainCost(), rules.BestFirst(), 1)


@functools.lru_cache(maxsize=None)
def _pair(arch):
    return load_pair(arch)


@pytest.mark.parametrize("arch", ["gdn", "mla"])
@pytest.mark.parametrize("chain_s", [0.012, 0.05])   # a cheap chain; a dear one
def test_auto_with_the_chain_equals_ar_and_the_specification(arch, chain_s):
    fast = assert_equals_ar_and_the_specification(arch, ChainCost(chain_s=chain_s, max_budget=32))
    assert (7 in fast.tree_sizes) == (chain_s < 0.02), fast.tree_sizes   # a cheap chain is verified in some round


def assert_equals_ar_and_the_specification(arch: str, cost):
    """auto under ``cost`` at T = 0 on a prompt of ``arch``'s pair: the loop equals AR and the
    specification (tokens, tree sizes, acceptance lengths) -> the loop's Generation."""
    p = _pair(arch)
    prompt = p.prompt_ids(0)[:40]
    spec = dict(method="ddtree", budget="auto", max_new_tokens=24)
    fast = generate(p.target, p.drafter, prompt, cost_model=cost, **spec)
    ar = generate(p.target, None, prompt, method="ar", max_new_tokens=24)
    ref = reference_generate(p.target, p.drafter, prompt, cost_model=cost, **spec)
    assert fast.tokens == ar.tokens == ref.tokens
    assert fast.tree_sizes == ref.tree_sizes and fast.acceptance_lengths == ref.acceptance_lengths
    return fast


def test_auto_with_the_chain_equals_the_specification_at_T_above_0():
    p = _pair("gdn")
    prompt = p.prompt_ids(1)[:25]
    spec = dict(method="ddtree", budget="auto", max_new_tokens=24, temperature=0.8, seed=3)
    cost = ChainCost(chain_s=0.014, max_budget=32)
    fast = generate(p.target, p.drafter, prompt, cost_model=cost, **spec)
    ref = reference_generate(p.target, p.drafter, prompt, cost_model=cost, **spec)
    assert fast.tokens == ref.tokens and fast.tree_sizes == ref.tree_sizes


# ----------------------------------------------------------------------------- calibrated acceptance

CAL = allocate.Calibration(top1=(3.0, 0.9), off=(-1.6, 0.66))   # the shape of the shipped fits: the chain under-valued by q


class CalibratedCost(ChainCost):
    def __init__(self, acceptance=CAL, **kw):
        super().__init__(**kw)
        self.acceptance = acceptance


def top1_flags(tree, logits) -> list[bool]:
    """Node by node from its root path: every token its depth's argmax."""
    best = logits.argmax(-1).tolist()
    return [all(int(tree.tokens[v]) == best[int(tree.depths[v]) - 1] for v in tree.path_to(u)[1:])
            for u in range(1, len(tree))]


def calibrated_brute_force(draft, cost) -> tuple[str, int]:
    full = tree_mod.build_tree(draft.logits, 1, cost.max_budget)
    flags = torch.tensor(top1_flags(full, draft.logits))
    gains = cost.acceptance(full.log_weights[1:], flags).tolist()
    seconds = cost.batch_round_seconds(torch.arange(1, full.num_nodes + 1), 1).tolist()
    rates = [(1 + math.fsum(gains[:n])) / seconds[n - 1] for n in range(1, full.num_nodes + 1)]
    along = torch.log_softmax(draft.logits.double(), -1).amax(-1).cumsum(0)
    chain = (1 + math.fsum(cost.acceptance(along, torch.ones(len(along), dtype=torch.bool)).tolist())) / cost.chain_seconds
    best = max(range(len(rates)), key=lambda i: (rates[i], -i))
    return ("chain", draft.logits.shape[0]) if chain >= rates[best] else ("tree", best + 1)


@pytest.mark.parametrize("first", [2, 32])
@pytest.mark.parametrize("acceptance", [CAL, allocate.Calibration(top1=(0.0, 1.0), off=(0.0, 1.0)),
                                        allocate.Calibration(top1=(-2.0, 0.5), off=(1.0, 2.0))],
                         ids=["shipped-shape", "q-like", "off-favoured"])
@pytest.mark.parametrize("chain_s", [0.01, 0.02, 0.03])
def test_a_calibrated_choice_equals_scoring_every_candidate_by_the_calibration(first, acceptance, chain_s):
    """Weighed by a calibration, the chain and every prefix of the tree built at the largest size
    are scored alike; growing from ``first`` nodes picks the same (its bound holds calibrated)."""
    gen = torch.Generator().manual_seed(int(chain_s * 1e3) + first)
    cost = CalibratedCost(acceptance, chain_s=chain_s, per_node=2e-4, max_budget=128)
    for sharp in (0.3, 1.0, 3.0):
        for _ in range(4):
            assert_picks_as_scored(Draft(torch.randn(7, 40, generator=gen) * sharp, None), cost,
                                   calibrated_brute_force, first)


def test_the_shipped_shaped_calibration_values_the_chain_more_than_q_does():
    gen = torch.Generator().manual_seed(5)
    chains = {"q": 0, "calibrated": 0}
    for _ in range(40):
        draft = Draft(torch.randn(7, 40, generator=gen) * 2.0, None)
        for name, cost in (("q", ChainCost(chain_s=0.02)), ("calibrated", CalibratedCost(chain_s=0.02))):
            chains[name] += allocate.auto_with_chain(draft, 1, rules.BestFirst(), cost).is_chain
    assert chains["calibrated"] > chains["q"], chains


def test_on_top1_path_marks_the_argmax_path_only():
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        logits = torch.randn(7, 20, generator=gen)
        tree = tree_mod.build_tree(logits, 1, 60)
        assert allocate.on_top1_path(tree, logits).tolist() == top1_flags(tree, logits)
        assert sum(top1_flags(tree, logits)) <= 7


@pytest.mark.parametrize("fit", [(0.0, 0.0), (0.0, -1.0), (float("nan"), 1.0)])
def test_a_calibration_must_rise_with_q(fit):
    with pytest.raises(ValueError, match="top1 must be"):
        allocate.Calibration(top1=fit, off=(0.0, 1.0))


@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_calibrated_auto_equals_ar_and_the_specification(arch):
    assert_equals_ar_and_the_specification(arch, CalibratedCost(chain_s=0.03, max_budget=32))
