"""Tests for ddtree_lab.core.tree (DDTree, arXiv 2604.12989, sections 3-4).

The heap builder must equal its brute-force twin exactly (ties included), built trees must
be valid prefix-closed trees whose buffers and acceptance walk match their twins in `core/naive.py`,
and no prefix-closed tree of the same size may beat the built one under the surrogate.
"""
from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddtree_lab.core import naive
from ddtree_lab.core.tree import (DraftTree, accept, leading_rows, ancestor_mask,
                             build_tree, build_trees, chain_of, chain_tree,
                             expected_acceptance, expected_acceptance_prefixes,
                             position_ids)

FIELDS = ("tokens", "parents", "depths", "log_weights")
FAST = settings(max_examples=100, deadline=None)


# ----------------------------------------------------------------------------- helpers

@st.composite
def logits_cases(draw, max_depth: int = 3, max_vocab: int = 5) -> torch.Tensor:
    """Small [L, V] logits: random, peaked (large scale), flat (all tied) or repeated values."""
    depth, vocab = draw(st.integers(1, max_depth)), draw(st.integers(2, max_vocab))
    kind = draw(st.sampled_from(["random", "peaked", "flat", "repeated"]))
    size = depth * vocab
    if kind == "flat":
        values = [0.0] * size
    elif kind == "repeated":
        values = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0]), min_size=size, max_size=size))
    else:
        values = draw(st.lists(st.floats(-3, 3, width=32), min_size=size, max_size=size))
    scale = 40.0 if kind == "peaked" else 1.0
    return scale * torch.tensor(values).view(depth, vocab)  # [L, V]


def num_prefixes(logits: torch.Tensor) -> int:
    depth, vocab = logits.shape
    return sum(vocab ** d for d in range(1, depth + 1))


def assert_same_tree(name: str, ref: DraftTree, out: DraftTree) -> None:
    """Exact equality of every field, printing the first field that differs."""
    for field in FIELDS:
        a, b = getattr(ref, field), getattr(out, field)
        assert torch.equal(a, b), f"{name}: {field} differs\nref={a}\nout={b}"


def truncate(tree: DraftTree, size: int) -> DraftTree:
    """The first ``size`` nodes (root included) of a tree."""
    return DraftTree(*(getattr(tree, f)[:size] for f in FIELDS))


def token_path(tree: DraftTree, node: int) -> tuple[int, ...]:
    """Draft tokens along the root path of ``node`` (root token excluded)."""
    return tuple(int(tree.tokens[i]) for i in tree.path_to(node)[1:])


def surrogate_value(log_probs: torch.Tensor, paths) -> float:
    """Sum over token paths of the product of marginals: the surrogate's expected acceptance."""
    return math.fsum(math.exp(sum(float(log_probs[d, t]) for d, t in enumerate(p))) for p in paths)


def random_prefix_closed(rng: random.Random, depth: int, vocab: int, size: int) -> set:
    """``size`` token paths grown one random leaf at a time from all candidate prefixes."""
    paths: set = set()
    while len(paths) < size:
        candidates = [p + (t,) for p in [()] + sorted(paths) if len(p) < depth
                      for t in range(vocab) if p + (t,) not in paths]
        paths.add(rng.choice(candidates))
    return paths


# ----------------------------------------------------------------------------- builders

@settings(max_examples=250, deadline=None)
@given(logits=logits_cases(), data=st.data())
def test_heap_matches_reference(logits, data):
    budget = data.draw(st.integers(1, num_prefixes(logits) + 3), label="budget")
    root = data.draw(st.integers(0, logits.shape[1] - 1), label="root")
    assert_same_tree("build_tree", naive.build_tree(logits, root, budget),
                     build_tree(logits, root, budget))


@settings(max_examples=100, deadline=None)
@given(logits=logits_cases(), data=st.data())
def test_a_batch_of_trees_equals_each_tree_alone(logits, data):
    """``build_trees`` over drafts of one shape (random, flipped, all tied, negated) with their
    own roots and budgets: each tree equals the brute-force twin's, ties at every cut included."""
    batch = torch.stack([logits, logits.flip(-1), torch.zeros_like(logits), -logits])  # [4, L, V]
    budgets = [data.draw(st.integers(1, num_prefixes(logits) + 3), label=f"budget{b}") for b in range(4)]
    roots = [data.draw(st.integers(0, logits.shape[1] - 1), label=f"root{b}") for b in range(4)]
    for b, tree in enumerate(build_trees(batch, roots, budgets)):
        assert_same_tree(f"tree {b}", naive.build_tree(batch[b], roots[b], budgets[b]), tree)


def test_rows_no_tree_can_reach_are_only_checked():
    """Budgets of at most D < L nodes reach depth D at most: ``build_trees`` ranks the first D
    rows only, and the trees equal the brute-force twin's; a NaN or +inf in a deeper row is
    still refused, a -inf there is not (as a row's normaliser would find)."""
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(2, 5, 3, generator=gen)
    for b, tree in enumerate(build_trees(logits, [0, 1], [2, 3])):
        assert int(tree.depths.max()) <= 3
        assert_same_tree(f"tree {b}", naive.build_tree(logits[b], b, [2, 3][b]), tree)
    for bad in (float("nan"), float("inf")):
        broken = logits.clone()
        broken[1, 4, 2] = bad
        with pytest.raises(ValueError, match="draft_logits must hold finite values"):
            build_trees(broken, [0, 1], [2, 3])
    deep_minus_inf = logits.clone()
    deep_minus_inf[1, 4, 2] = float("-inf")
    assert [len(t) for t in build_trees(deep_minus_inf, [0, 1], [2, 3])] == [3, 4]


def test_build_trees_names_a_bad_batch():
    with pytest.raises(ValueError, match=r"3-D tensor \[B, L, V\]"):
        build_trees(torch.zeros(2, 3), [0], [1])
    with pytest.raises(ValueError, match="one entry per draft"):
        build_trees(torch.zeros(2, 2, 3), [0], [1, 1])
    with pytest.raises(ValueError, match=r"budget must be an int in \[1, inf\)"):
        build_trees(torch.zeros(2, 2, 3), [0, 0], [1, 0])


@settings(max_examples=25, deadline=None)
@given(logits=logits_cases())
def test_every_budget_is_a_prefix_of_the_full_tree(logits):
    total = num_prefixes(logits)
    full = naive.build_tree(logits, 0, total)
    assert full.num_nodes == total
    for budget in range(1, total + 3):
        tree = build_tree(logits, 0, budget)
        assert tree.budget == min(budget, total)
        assert_same_tree(f"budget {budget}", truncate(full, min(budget, total) + 1), tree)


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.sampled_from([-2.0, 0.0, 1.0, 1.5]), min_size=40, max_size=300),
       data=st.data())
def test_top_k_ties_broken_by_lower_token_id(values, data):
    """One row, wide vocabulary, many ties at the top-K cut: heap == stable-sort oracle."""
    logits = torch.tensor([values])  # [1, V]
    budget = data.draw(st.integers(1, len(values)), label="budget")
    tree = build_tree(logits, 0, budget)
    expected = sorted(range(len(values)), key=lambda t: (-values[t], t))[:budget]
    assert tree.tokens[1:].tolist() == expected
    assert_same_tree("wide row", naive.build_tree(logits, 0, budget), tree)


def test_flat_logits_give_breadth_first_in_token_order():
    tree = build_tree(torch.zeros(2, 3), root_token=1, budget=5)
    assert tree.tokens.tolist() == [1, 0, 1, 2, 0, 1]
    assert tree.parents.tolist() == [-1, 0, 0, 0, 1, 1]


# ----------------------------------------------------------------------------- invariants

def assert_tree_invariants(tree: DraftTree, log_probs: torch.Tensor | None) -> None:
    parents, depths = tree.parents.tolist(), tree.depths.tolist()
    assert parents[0] == -1 and depths[0] == 0 and float(tree.log_weights[0]) == 0.0
    assert all(0 <= parents[i] < i for i in range(1, len(tree)))  # topological, prefix-closed
    assert all(depths[i] == depths[parents[i]] + 1 for i in range(1, len(tree)))
    for kids in tree.children:
        sibling_tokens = [int(tree.tokens[c]) for c in kids]
        assert len(set(sibling_tokens)) == len(sibling_tokens)
    if log_probs is not None:
        for i in range(1, len(tree)):
            expected = sum(float(log_probs[d, t]) for d, t in enumerate(token_path(tree, i)))
            assert math.isclose(float(tree.log_weights[i]), expected, rel_tol=1e-12, abs_tol=1e-12)
        assert bool((tree.log_weights[1:].diff() <= 0).all())  # pop order = best first


@FAST
@given(logits=logits_cases(), budget=st.integers(1, 60), start=st.integers(0, 100))
def test_built_tree_invariants_and_buffers(logits, budget, start):
    tree = build_tree(logits, 0, budget)
    assert_tree_invariants(tree, torch.log_softmax(logits.double(), dim=-1))
    assert torch.equal(ancestor_mask(tree), naive.ancestor_mask(tree))
    assert torch.equal(position_ids(tree, start), start + tree.depths)
    assert len({token_path(tree, i) for i in range(len(tree))}) == len(tree)  # no duplicates


def test_chain_tree_invariants():
    log_probs = torch.log(torch.tensor([0.9, 0.5, 0.8], dtype=torch.float64))
    tree = chain_tree(torch.tensor([4, 2, 7]), root_token=3, log_probs=log_probs)
    assert tree.tokens.tolist() == [3, 4, 2, 7]
    assert tree.parents.tolist() == [-1, 0, 1, 2] and tree.depths.tolist() == [0, 1, 2, 3]
    assert_tree_invariants(tree, None)
    assert torch.equal(ancestor_mask(tree), torch.ones(4, 4, dtype=torch.bool).tril())
    assert math.isclose(expected_acceptance(tree), 0.9 + 0.45 + 0.36)
    assert chain_tree(torch.tensor([4, 2]), 3).log_weights.tolist() == [0.0, 0.0, 0.0]


def test_the_loops_chain_is_chain_tree_with_one_frame_per_length():
    """``chain_of`` (the decoding loop's, unchecked) builds what ``chain_tree`` builds; chains
    of one length share their parents, depths and zero log weights (built once per length),
    and a later chain leaves an earlier one as it was."""
    a = chain_of(torch.tensor([4, 2, 7]), 3)
    ref = chain_tree(torch.tensor([4, 2, 7]), 3)
    for field in ("tokens", "parents", "depths", "log_weights"):
        assert torch.equal(getattr(a, field), getattr(ref, field)), field
    b = chain_of(torch.tensor([9, 9, 1]), 5)
    assert a.parents is b.parents and a.depths is b.depths and a.log_weights is b.log_weights
    assert a.tokens.tolist() == [3, 4, 2, 7] and b.tokens.tolist() == [5, 9, 9, 1]
    weighted = chain_of(torch.tensor([4, 2]), 3, torch.tensor([-0.5, -0.25], dtype=torch.float64))
    assert weighted.log_weights.tolist() == [0.0, -0.5, -0.75] and a.log_weights.tolist() == [0.0] * 4


# ----------------------------------------------------------------------------- accept

@FAST
@given(logits=logits_cases(), budget=st.integers(1, 60), seed=st.integers(0, 2**16))
def test_accept_matches_reference(logits, budget, seed):
    tree = build_tree(logits, 0, budget)
    rng = random.Random(seed)
    vocab = logits.shape[1]
    choice = [int(tree.tokens[rng.choice(kids)]) if kids and rng.random() < 0.8
              else rng.randrange(vocab) for kids in tree.children]
    target = torch.tensor(choice)
    assert accept(tree, target) == naive.accept(tree, target)
    assert accept(tree, target) == accept(tree, target.clone())  # deterministic


def test_accept_on_chain_stops_at_first_mismatch():
    tree = chain_tree(torch.tensor([5, 6, 7, 8]), root_token=1)
    assert accept(tree, torch.tensor([5, 6, 9, 8, 0])) == ([0, 1, 2], 9)
    assert accept(tree, torch.tensor([5, 6, 7, 8, 3])) == ([0, 1, 2, 3, 4], 3)
    assert accept(tree, torch.tensor([0, 6, 7, 8, 3])) == ([0], 0)


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(st.integers(0, 3), max_size=8), choice=st.data())
def test_accept_on_chains_matches_reference(tokens, choice):
    """A chain takes ``accept``'s prefix walk; it agrees with the brute-force twin (a small
    vocabulary, so long matches and early mismatches both occur)."""
    tree = chain_tree(torch.tensor(tokens, dtype=torch.long), root_token=1)
    target = torch.tensor(choice.draw(st.lists(st.integers(0, 3), min_size=len(tree), max_size=len(tree))))
    assert tree.is_chain
    assert accept(tree, target) == naive.accept(tree, target)


def test_is_chain_and_leading_rows():
    tree = build_tree(torch.tensor([[3.0, 1.0, 0.0], [2.0, 0.0, 1.0]]), 0, 4)
    assert chain_tree(torch.tensor([4, 5]), 0).is_chain and chain_tree(torch.tensor([], dtype=torch.long), 0).is_chain
    assert not tree.is_chain and build_tree(torch.tensor([[3.0, 0.0], [2.0, 0.0]]), 0, 1).is_chain
    assert leading_rows([0]) and leading_rows([0, 1, 2]) and not leading_rows([0, 2]) and not leading_rows([0, 1, 3])


# ----------------------------------------------------------------------------- optimality

@settings(max_examples=40, deadline=None)
@given(logits=logits_cases(), seed=st.integers(0, 2**16), data=st.data())
def test_built_tree_beats_random_prefix_closed_trees(logits, seed, data):
    depth, vocab = logits.shape
    budget = data.draw(st.integers(1, min(num_prefixes(logits), 20)), label="budget")
    log_probs = torch.log_softmax(logits.double(), dim=-1)  # [L, V]
    tree = build_tree(logits, 0, budget)
    best = expected_acceptance(tree)
    built_paths = [token_path(tree, i) for i in range(1, len(tree))]
    assert math.isclose(best, surrogate_value(log_probs, built_paths), rel_tol=1e-12)
    rng = random.Random(seed)
    for _ in range(20):
        rival = random_prefix_closed(rng, depth, vocab, budget)
        assert surrogate_value(log_probs, rival) <= best + 1e-12


@FAST
@given(logits=logits_cases())
def test_expected_acceptance_prefixes_are_best_trees(logits):
    total = num_prefixes(logits)
    tree = build_tree(logits, 0, total)
    prefixes = expected_acceptance_prefixes(tree)  # [N]
    assert prefixes.shape == (total,)
    for budget in range(1, total + 1):
        assert math.isclose(float(prefixes[budget - 1]),
                            expected_acceptance(build_tree(logits, 0, budget)), rel_tol=1e-12)


# ----------------------------------------------------------------------------- bad inputs

GOOD_LOGITS = torch.zeros(2, 4)  # [L, V]
GOOD_TREE = build_tree(GOOD_LOGITS, 0, 3)

BAD_INPUTS = [
    ("budget_zero", lambda: build_tree(GOOD_LOGITS, 0, 0), r"budget must be an int in \[1, inf\)"),
    ("budget_negative", lambda: build_tree(GOOD_LOGITS, 0, -3), "budget"),
    ("budget_bool", lambda: build_tree(GOOD_LOGITS, 0, True), "budget"),
    ("budget_float", lambda: build_tree(GOOD_LOGITS, 0, 2.5), "budget"),
    ("budget_naive", lambda: naive.build_tree(GOOD_LOGITS, 0, 0), "budget"),
    ("logits_1d", lambda: build_tree(torch.zeros(4), 0, 3), r"draft_logits must be a 2-D"),
    ("logits_3d", lambda: build_tree(torch.zeros(1, 2, 4), 0, 3), "draft_logits"),
    ("logits_empty", lambda: build_tree(torch.zeros(0, 4), 0, 3), "draft_logits"),
    ("logits_list", lambda: build_tree([[0.0, 1.0]], 0, 3), "draft_logits"),
    ("logits_nan", lambda: build_tree(torch.tensor([[0.0, float("nan")]]), 0, 3), "draft_logits"),
    ("logits_inf", lambda: build_tree(torch.tensor([[0.0, float("-inf")]]), 0, 3), "draft_logits"),
    ("root_negative", lambda: build_tree(GOOD_LOGITS, -1, 3), r"root_token must be an int in \[0, 3\]"),
    ("root_too_big", lambda: build_tree(GOOD_LOGITS, 4, 3), "root_token"),
    ("root_float", lambda: build_tree(GOOD_LOGITS, 1.0, 3), "root_token"),
    ("choice_short", lambda: accept(GOOD_TREE, torch.zeros(3, dtype=torch.long)),
     r"target_choice must be a 1-D tensor of length N\+1=4"),
    ("choice_2d", lambda: accept(GOOD_TREE, torch.zeros(1, 4, dtype=torch.long)), "target_choice"),
    ("choice_list", lambda: accept(GOOD_TREE, [0, 0, 0, 0]), "target_choice"),
    ("start_negative", lambda: position_ids(GOOD_TREE, -1), "start"),
    ("chain_tokens_2d", lambda: chain_tree(torch.zeros(2, 2, dtype=torch.long), 0), "draft_tokens"),
    ("chain_log_probs_len", lambda: chain_tree(torch.tensor([1, 2]), 0, torch.zeros(3)), "log_probs"),
]


@pytest.mark.parametrize("call, pattern", [case[1:] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_raises_value_error(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
