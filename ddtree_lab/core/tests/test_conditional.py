"""Conditional (DFlash 2) draft trees: best-first equals brute force, children follow the parent."""
import pytest
import torch

from ddtree_lab.core import naive
from ddtree_lab.core import rules
from ddtree_lab.core.conditional import ConditionalDraft, build_conditional_tree, from_selector


def random_draft(seed: int, depth: int = 3, k: int = 3, vocab: int = 12, rank: int = 4, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    cands = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(depth)])
    return ConditionalDraft(cands, torch.randn(depth, k, generator=gen), torch.randn(depth, rank, generator=gen),
                            torch.randn(vocab, rank, generator=gen) * scale, torch.randn(vocab, rank, generator=gen))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [1, 2, 5, 13, 39, 60])
def test_best_first_equals_brute_force(seed, budget):
    draft = random_draft(seed)
    fast, ref = build_conditional_tree(draft, 7, budget), naive.build_conditional_tree(draft, 7, budget)
    for field in ("tokens", "parents", "depths"):
        assert torch.equal(getattr(fast, field), getattr(ref, field)), field
    assert torch.allclose(fast.log_weights, ref.log_weights, rtol=0, atol=1e-12)
    assert fast.num_nodes == min(budget, 3 + 9 + 27)


@pytest.mark.parametrize("seed", range(4))
def test_transition_table_equals_the_scores_one_parent_at_a_time(seed):
    """Every row of the vectorised [K, K] table of every depth == ``naive.scores`` of that
    (parent candidate, depth); a parent outside the candidates falls back to the row computed
    on its own (``scores_alone``)."""
    draft = random_draft(seed, depth=4, k=5, vocab=20, rank=6)
    for depth in range(2, 5):
        for parent in draft.candidates[depth - 2].tolist():
            assert torch.allclose(draft.scores(parent, depth), naive.scores(draft, parent, depth),
                                  rtol=1e-13, atol=1e-13)
    outside = next(t for t in range(20) if t not in draft.candidates[0].tolist())
    assert torch.equal(draft.scores(outside, 2), naive.scores(draft, outside, 2))


@pytest.mark.parametrize("seed", range(4))
def test_ranked_children_read_from_the_table_equal_the_reference(seed):
    """``ranked_children`` (log q of the whole table in one pass, ``_log_q``) == the twin
    ``naive.ranked_children``, ranked from ``naive.scores`` one (parent, depth) at a time: the
    same order, log q to float64 rounding; the root and a parent outside the candidates too."""
    draft = random_draft(seed, depth=4, k=5, vocab=20, rank=6)
    outside = next(t for t in range(20) if t not in draft.candidates[0].tolist())
    cases = [(7, 1), (outside, 2)] + [(p, d) for d in range(2, 5) for p in draft.candidates[d - 2].tolist()]
    for parent, depth in cases:
        (tokens, logq), (ref_tokens, ref_logq) = (draft.ranked_children(parent, depth),
                                                  naive.ranked_children(draft, parent, depth))
        assert tokens == ref_tokens, (parent, depth)
        assert logq == pytest.approx(ref_logq, rel=1e-13, abs=1e-13)


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


# ----------------------------------------------------------------------------- DFlash 2 in the loop

def _toy_dflash2(preset: str = "gdn-toy"):
    from helpers import toy_dflash2
    return toy_dflash2(preset)


def test_dflash2_from_starts_as_the_dflash_drafter():
    from ddtree_lab.train.drafters import dflash2_from
    from helpers import assert_close, toy_pair
    target, drafter = toy_pair()
    d2 = dflash2_from(drafter, target, selector_rank=8, selector_top_k=4)
    feats = torch.randn(9, drafter.cfg.feature_size, generator=torch.Generator().manual_seed(0))
    assert_close("DFlash 2 at init == DFlash", drafter.draft(drafter.new_state(), feats, 3, 8).logits,
                 d2.draft(d2.new_state(), feats, 3, 8).logits, 1e-6)
    draft = d2.draft(d2.new_state(), feats, 3, 8).conditional
    assert torch.equal(draft.scores(5, 1), draft.unary[0].double())  # zero successor codebook: unary only


def test_conditional_chain_is_dflash_selector_path_walk():
    """Peer test: the lab's DFlash 2 chain equals ``CandidateSelector.select`` at T = 0 (the
    path ``dflash_generate`` drafts with a DFlash2DraftModel)."""
    from ddtree_lab.core.conditional import conditional_chain
    target, d2 = _toy_dflash2()
    feats = torch.randn(11, d2.cfg.feature_size, generator=torch.Generator().manual_seed(2))
    for root in (0, 7, 33):
        hidden = d2._block_hidden_batch([d2.new_state()], [feats], [root], 8)  # [1, 7, H]
        path, _, _ = d2.selector.select(hidden, d2.logits(hidden), torch.tensor([root]), 0.0)
        chain = conditional_chain(d2.draft(d2.new_state(), feats, root, 8).conditional, root)
        assert chain.tokens[1:].tolist() == path[0].tolist()


@pytest.mark.parametrize("method,budget", [("dflash", 8), ("ddtree", 1), ("ddtree", 16), ("ddtree", 64)])
@pytest.mark.parametrize("tree", [None, "unary"])
@pytest.mark.parametrize("arch", ["gdn", "mla"])
def test_dflash2_generation_equals_ar(arch, method, budget, tree):
    """T = 0: conditional trees (the DFlash 2 default) and unary trees from the same drafter are
    both lossless."""
    from ddtree_lab.core.decode import generate
    target, d2 = _toy_dflash2(f"{arch}-toy")
    prompt = torch.randint(2, 60, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    ar = generate(target, None, prompt, method="ar", max_new_tokens=24).tokens
    out = generate(target, d2, prompt, method=method, budget=budget, max_new_tokens=24, tree=tree)
    assert out.tokens == ar


def test_tree_choice_is_checked():
    from ddtree_lab.core.decode import generate
    from helpers import toy_pair
    target, drafter = toy_pair()
    with pytest.raises(ValueError, match="tree='conditional' needs a DFlash 2 drafter"):
        generate(target, drafter, [3, 4, 5], method="ddtree", tree="conditional", max_new_tokens=4)
    with pytest.raises(ValueError, match=r"tree must be a rule .* one of \('unary', 'conditional'\)"):
        generate(target, drafter, [3, 4, 5], method="ddtree", tree="marginal", max_new_tokens=4)


def test_conditional_trees_differ_from_unary_trees():
    """The default tree of a DFlash 2 drafter really is conditional: on a random selector it
    differs from the unary tree of the same block."""
    from ddtree_lab.core.decode import tree_rule
    from ddtree_lab.core.tree import build_tree
    target, d2 = _toy_dflash2()
    draft = d2.draft(d2.new_state(), torch.randn(5, d2.cfg.feature_size), 3, 8)
    cond = tree_rule(d2, None)(draft, 3, 32)
    assert tree_rule(d2, None).name == "conditional"
    assert cond.tokens.tolist() != build_tree(draft.logits, 3, 32).tokens.tolist()


def _two_token_counts(draft, table, budget, T, trials, seed, walk_proposal=None, sampler=None):
    """One rejection round over a conditional tree with root token 2, the target's logits at a
    node = table[node token] ([V, V]). -> (counts of the first emitted token [V], counts [V, V]
    of the second emitted token after an ACCEPTED first token a: row a)."""
    proposal = rules.Conditional(draft)
    walker = walk_proposal(proposal) if walk_proposal else proposal
    draw = sampler(proposal) if sampler else proposal.sample_tree
    tree = build_conditional_tree(draft, 2, budget)
    first, second = torch.zeros(table.shape[0]), torch.zeros(table.shape)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(trials):
        drawn = draw(tree, T, gen)
        path, bonus = rules.accept_rejection(drawn, table[drawn.tokens], walker, T, gen)
        emitted = drawn.tokens[path[1:]].tolist() + [bonus]
        first[emitted[0]] += 1
        if len(path) > 1:
            second[emitted[0], emitted[1]] += 1
    return first, second


def _chi2_p(counts, p):
    from scipy.stats import chisquare
    keep = p > 0
    return chisquare(counts[keep].numpy(), (p[keep] * counts.sum()).numpy()).pvalue


def _second_token_p(second, table, T):
    """The smallest chi-square p-value over the first tokens accepted >= 200 times: the second
    token after an accepted a must be ~ softmax(table[a] / T)."""
    rows = [a for a in range(len(second)) if second[a].sum() >= 200]
    assert rows, "no first token accepted often enough"
    return min(_chi2_p(second[a], torch.softmax(table[a].double() / T, -1)) for a in rows)


@pytest.mark.slow
@pytest.mark.parametrize("T", [0.8, 1.0])
def test_conditional_rejection_round_is_distributed_as_the_target(T):
    """q(. | parent) over K candidates, children sampled without replacement, the recursive
    rejection walk: the first emitted token ~ p(. | root) and, after an accepted draft token a,
    the next ~ p(. | a) (chi-square); a walk that scores every node's children with q given
    the ROOT's token (the parent ignored) fails the second test."""
    vocab = 6
    draft = random_draft(5, depth=2, k=3, vocab=vocab, scale=2.0)
    table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(9)) * 1.5
    first, second = _two_token_counts(draft, table, 12, T, 8000, 0)
    assert _chi2_p(first, torch.softmax(table[2].double() / T, -1)) > 1e-3
    assert _second_token_p(second, table, T) > 1e-3

    def parent_ignored(proposal):
        class Walk:
            def child_probs(self, token, depth, temp):
                return proposal.child_probs(2, depth, temp)
        return Walk()
    _, biased = _two_token_counts(draft, table, 12, T, 8000, 0, walk_proposal=parent_ignored)
    assert _second_token_p(biased, table, T) < 1e-6

    def with_replacement(proposal):  # siblings drawn WITH replacement: a repeated token is accepted for free
        from ddtree_lab.core.tree import DraftTree

        def draw(tree, temp, gen):
            tokens, depths = tree.tokens.clone(), tree.depths.tolist()
            for u, kids in enumerate(tree.children):
                if kids:
                    q = proposal.child_probs(int(tokens[u]), depths[u] + 1, temp)
                    tokens[kids] = torch.multinomial(q, len(kids), replacement=True, generator=gen)
            return DraftTree(tokens, tree.parents, tree.depths, tree.log_weights)
        return draw
    first_biased, _ = _two_token_counts(draft, table, 12, T, 8000, 0, sampler=with_replacement)
    assert _chi2_p(first_biased, torch.softmax(table[2].double() / T, -1)) < 1e-6
