"""The T > 0 acceptance rules (``core.rules``): draft sampling keeps the tree's shape, and
one rejection step reproduces the target's distribution exactly."""
import torch

from ddtree_lab.core import rules
from ddtree_lab.core.tree import build_tree, chain_tree
from helpers import assert_close


def test_sample_draft_keeps_the_shape_and_draws_distinct_siblings():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 40, generator=gen) * 2
    tree = build_tree(logits, 3, 24)
    drawn = rules.sample_draft(tree, logits, 0.8, torch.Generator().manual_seed(1))
    assert torch.equal(drawn.parents, tree.parents) and torch.equal(drawn.depths, tree.depths)
    assert drawn.tokens[0] == 3
    for kids in drawn.children:
        assert len({int(drawn.tokens[c]) for c in kids}) == len(kids)  # a sample without replacement
    # one sample per depth: nodes of one depth and rank (same token in the built tree) share a token
    by_rank = {}
    for i in range(1, len(tree)):
        key = (int(tree.depths[i]), int(tree.tokens[i]))
        assert by_rank.setdefault(key, int(drawn.tokens[i])) == int(drawn.tokens[i])


def test_the_first_sampled_token_follows_q():
    """Rank 0 at depth d is a draw from q_d = softmax(logits_d / T)."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    q = torch.softmax(logits[0] / 0.7, -1)
    counts = torch.zeros(4)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4000):
        counts[int(rules.sample_draft(chain_tree(torch.tensor([0]), 3), logits, 0.7, gen).tokens[1])] += 1
    assert_close("empirical q", q, counts / counts.sum(), 0.03)


def test_one_rejection_round_is_distributed_as_the_target():
    """A root with three sampled children (leaves): the emitted token (accepted child or the
    residual's sample) has exactly the target's distribution, computed by enumeration."""
    V, T = 4, 1.0
    target_logits = torch.tensor([[0.5, -1.0, 1.5, 0.0]] + [[0.0] * V] * 3)
    draft_logits = torch.tensor([[2.0, 0.5, -0.5, 0.0]])
    tree = build_tree(draft_logits, 0, 3)  # root + 3 siblings at depth 1
    counts = torch.zeros(V)
    gen = torch.Generator().manual_seed(3)
    for _ in range(6000):
        drawn = rules.sample_draft(tree, draft_logits, T, gen)
        path, bonus = rules.accept_rejection(drawn, target_logits, rules.Marginal(draft_logits), T, gen)
        counts[int(drawn.tokens[path[1]]) if len(path) > 1 else bonus] += 1
    p = torch.softmax(target_logits[0] / T, -1)
    assert_close("emitted first token ~ p", p, counts / counts.sum(), 0.03)
