"""Conditional (DFlash 2) draft trees: best-first equals brute force, children follow the parent."""
import pytest
import torch

from ddtree_lab.core.conditional import (ConditionalDraft, build_conditional_tree, build_conditional_tree_reference,
                                         from_selector)


def random_draft(seed: int, depth: int = 3, k: int = 3, vocab: int = 12, rank: int = 4, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    cands = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(depth)])
    return ConditionalDraft(cands, torch.randn(depth, k, generator=gen), torch.randn(depth, rank, generator=gen),
                            torch.randn(vocab, rank, generator=gen) * scale, torch.randn(vocab, rank, generator=gen))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [1, 2, 5, 13, 39, 60])
def test_best_first_equals_brute_force(seed, budget):
    draft = random_draft(seed)
    fast, ref = build_conditional_tree(draft, 7, budget), build_conditional_tree_reference(draft, 7, budget)
    for field in ("tokens", "parents", "depths"):
        assert torch.equal(getattr(fast, field), getattr(ref, field)), field
    assert torch.allclose(fast.log_weights, ref.log_weights, rtol=0, atol=1e-12)
    assert fast.num_nodes == min(budget, 3 + 9 + 27)


def test_children_depend_on_the_parent_token_and_not_without_the_bilinear_term():
    draft = random_draft(1, scale=3.0)
    tree = build_conditional_tree(draft, 2, 39)  # every path: each node has all K children
    orders = {}
    for node, kids in enumerate(tree.children):
        if kids and int(tree.depths[node]) == 1:
            orders[int(tree.tokens[node])] = [int(tree.tokens[c]) for c in kids]
    assert len({tuple(v) for v in orders.values()}) > 1, "siblings' children were ranked alike"
    flat = ConditionalDraft(draft.candidates, draft.unary, draft.hidden, draft.predecessor * 0, draft.successor)
    tree = build_conditional_tree(flat, 2, 39)
    orders = {tuple(int(tree.tokens[c]) for c in kids) for node, kids in enumerate(tree.children)
              if kids and int(tree.depths[node]) == 1}
    assert len(orders) == 1, "with the bilinear term at 0 every node ranks its children alike"


def test_weights_are_path_products_of_q():
    draft = random_draft(3)
    tree = build_conditional_tree(draft, 4, 20)
    for node in range(1, len(tree)):
        parent = int(tree.parents[node])
        logq = draft.child_log_probs(int(tree.tokens[parent]), int(tree.depths[node]))
        i = draft.candidates[int(tree.depths[node]) - 1].tolist().index(int(tree.tokens[node]))
        assert abs(float(tree.log_weights[node]) - float(tree.log_weights[parent]) - float(logq[i])) < 1e-12


def test_from_selector_reads_dflash_candidate_selector():
    from dflash.model import CandidateSelector
    from transformers import Qwen3Config
    cfg = Qwen3Config(vocab_size=50, hidden_size=16, dflash_config={"selector_rank": 4, "selector_top_k": 5})
    torch.manual_seed(0)
    sel = CandidateSelector(cfg)
    hidden, logits = torch.randn(3, 16), torch.randn(3, 50)
    draft = from_selector(sel, hidden, logits)
    assert draft.candidates.shape == (3, 5) and torch.equal(draft.candidates[:, 0], logits.argmax(-1))
    # the selector's own score for the first position, recomputed
    anchor = torch.tensor([7])
    unary, cands = torch.topk(logits, 5, dim=-1)
    h = sel.hidden_projection(hidden)
    want = unary[0] + torch.einsum("br,kr->bk", sel.predecessor_codebook(anchor) * h[0], sel.successor_codebook(cands[0]))[0]
    got = draft.child_log_probs(7, 1)
    assert torch.allclose(got, torch.log_softmax(want.double(), -1), atol=1e-6)
    with pytest.raises(ValueError, match="budget"):
        build_conditional_tree(draft, 7, 0)
