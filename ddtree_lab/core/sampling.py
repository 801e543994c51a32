"""Acceptance at T > 0: the official DFlash rule with the drafter's q, for chains and trees.

Two walks, chosen once per generation (``ACCEPT_RULES``, their objects ``rules.rejection`` and
``rules.target_matching``; a walk of one's own: ``rules``); at T = 0 both are the argmax walk.

- ``"target"``: target-only matching. The draft is deterministic (argmax chain, top-K tree);
  the target samples at every node and the walk follows the child with that token
  (ancestral sampling from the target: lossless). A draft token x is accepted with
  probability p(x) only.
- ``"rejection"`` (DFlash's ``dflash_generate``; speculative sampling, arXiv 2211.17192 /
  2302.01318; for trees SpecInfer's multi-step speculative sampling, arXiv 2305.09781
  section 4, without replacement as in recursive rejection sampling, arXiv 2402.14160):
  draft tokens are SAMPLED from the drafter's marginal q_d = softmax(logits_d / T) at depth d.
  The tree's shape is the best-first tree of the sorted marginals (fixed before sampling);
  its rank-r nodes at depth d carry the r-th token of one sample without replacement from
  q_d (``sample_draft``), so every node's children are the first m tokens of such a sample.
  At a node with target distribution p, the children are tried in rank order:

      r <- p, s <- q_d
      child x: accept with probability min(1, r(x) / s(x)); on acceptance descend;
      on rejection r <- max(0, r - s) / Z and s <- s without x, renormalised;
      no child accepted: the bonus is a sample of r.

  Each trial is one speculative-sampling step with proposal s and target r, so the output is
  distributed as p whatever q is (lossless); a chain is the tree with one child per node.

The proposal q is an object chosen once per generation (by the tree rule, ``rules``):
``Marginal`` (DFlash: q_d depends on the depth only) or ``Conditional`` (DFlash 2's selector:
q(. | parent token, d) over the depth's K candidates, softmax(s / T), as SGLang's selector path
walk). Under ``Conditional`` a node's children are drawn without replacement from q given the
node's own (sampled) token, top-down (``draw_children``); the walk above is unchanged, with
s = q(. | node token, depth + 1). ``MarginalAnyTree`` draws DFlash's marginals the same way, node
by node, so a tree of any shape (a rule of one's own, ``rules``) is drawn from q: lossless
whatever the shape. ``Marginal``'s one draw per depth needs best-first shapes (every node's
children the ranks 0 .. m-1 of their depth, in order).
"""
from __future__ import annotations

import torch

from .tree import DraftTree

ACCEPT_RULES = ("rejection", "target")


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float64 on the host: [..., V]."""
    return torch.softmax(logits.double().cpu() / temperature, dim=-1)


def choose_tokens(logits: torch.Tensor, temperature: float, rng: torch.Generator | None) -> torch.Tensor:
    """The target's token at every row of logits [n, V]: argmax (T=0) or a sample."""
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial(probs(logits, temperature), 1, generator=rng).squeeze(-1)  # the seeded generator is on the host


def canonical_ranks(draft_logits: torch.Tensor) -> torch.Tensor:
    """[L, V] rank of every token per row, ordered as ``build_tree`` ranks (logit descending,
    token id ascending)."""
    order = torch.sort(-draft_logits.double().cpu(), dim=-1, stable=True).indices  # [L, V]
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1]).expand_as(order).contiguous())
    return ranks


class Marginal:
    """DFlash's proposal: q_d = softmax(draft_logits[d - 1] / T) whatever the parent (logits [L, V])."""

    def __init__(self, draft_logits: torch.Tensor):
        self.logits = draft_logits

    def child_probs(self, parent_token: int, depth: int, temperature: float) -> torch.Tensor:
        """[V] float64: q of a depth-``depth`` child."""
        return probs(self.logits[depth - 1], temperature)

    def sample_tree(self, tree: DraftTree, temperature: float, rng) -> DraftTree:
        return sample_draft(tree, self.logits, temperature, rng)

    def node_log_q(self, tree: DraftTree) -> list[float]:
        """Per node, log q of its token at its depth (T = 1; the root 0)."""
        log_q = torch.log_softmax(self.logits.double().cpu(), -1)  # [L, V]
        return [0.0] + log_q[tree.depths[1:] - 1, tree.tokens[1:]].tolist()


class Conditional:
    """DFlash 2's proposal: q(c | parent token, d) = softmax(s_d(c | t) / T) over depth d's K
    candidates (``conditional.ConditionalDraft``), zero elsewhere."""

    def __init__(self, draft):
        self.draft = draft
        self.vocab = draft.predecessor.shape[0]

    def child_probs(self, parent_token: int, depth: int, temperature: float) -> torch.Tensor:
        q = torch.zeros(self.vocab, dtype=torch.float64)
        q[self.draft.candidates[depth - 1].cpu()] = torch.softmax(
            self.draft.scores(parent_token, depth).cpu() / temperature, -1)
        return q

    def node_log_q(self, tree: DraftTree) -> list[float]:
        """Per node, log q(its token | its parent's token, its depth) (T = 1; the root 0;
        -inf for a token outside its depth's candidates)."""
        tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
        out = [0.0]
        for i in range(1, len(tokens)):
            cands = self.draft.candidates[depths[i] - 1].tolist()
            lq = self.draft.child_log_probs(tokens[parents[i]], depths[i])
            out.append(float(lq[cands.index(tokens[i])]) if tokens[i] in cands else float("-inf"))
        return out

    def sample_tree(self, tree: DraftTree, temperature: float, rng) -> DraftTree:
        return draw_children(tree, self, temperature, rng)


class MarginalAnyTree(Marginal):
    """DFlash's marginals q_d for a tree of any shape: each node's children drawn on their own
    (``draw_children``), where ``Marginal`` shares one draw per depth among best-first shapes."""

    def sample_tree(self, tree: DraftTree, temperature: float, rng) -> DraftTree:
        return draw_children(tree, self, temperature, rng)


def draw_children(tree: DraftTree, proposal, temperature: float, rng) -> DraftTree:
    """The tree's shape with its tokens drawn top-down: the m children of a node, in index
    order, are one sample without replacement of m tokens from ``proposal.child_probs``(the
    node's drawn token, depth + 1). Lossless under the rejection walk for any shape."""
    tokens, depths = tree.tokens.clone(), tree.depths.tolist()
    for u, kids in enumerate(tree.children):  # topological: a parent before its children
        if kids:
            q = proposal.child_probs(int(tokens[u]), depths[u] + 1, temperature)
            tokens[kids] = torch.multinomial(q, len(kids), replacement=False, generator=rng)
    return DraftTree(tokens, tree.parents, tree.depths, tree.log_weights)


def sample_draft(tree: DraftTree, draft_logits: torch.Tensor, temperature: float,
                 rng: torch.Generator | None) -> DraftTree:
    """The tree with its tokens drawn from q: node of rank r at depth d gets the r-th token of
    one sample without replacement from q_d = softmax(draft_logits[d - 1] / T) (same shape,
    parents, depths; log weights kept from the shape)."""
    depths = tree.depths.tolist()
    ranks = canonical_ranks(draft_logits)  # [L, V]
    need = {}
    for i in range(1, len(tree)):
        d, r = depths[i], int(ranks[depths[i] - 1, int(tree.tokens[i])])
        need[d] = max(need.get(d, 0), r + 1)
    q = probs(draft_logits, temperature)  # [L, V]
    drawn = {d: torch.multinomial(q[d - 1], m, replacement=False, generator=rng) for d, m in need.items()}
    tokens = tree.tokens.clone()
    for i in range(1, len(tree)):
        tokens[i] = drawn[depths[i]][int(ranks[depths[i] - 1, int(tree.tokens[i])])]
    return DraftTree(tokens, tree.parents, tree.depths, tree.log_weights)


def accept_rejection(tree: DraftTree, target_logits: torch.Tensor, proposal,
                     temperature: float, rng: torch.Generator | None) -> tuple[list[int], int]:
    """The rejection walk (module docstring) over a tree drawn by ``proposal.sample_tree``
    (``Marginal`` or ``Conditional``): target logits [N+1, V] at every node. -> (path, bonus)."""
    children = tree.children  # per node, in pop order = rank order
    depths = tree.depths.tolist()
    path = [0]
    while True:
        u = path[-1]
        r = probs(target_logits[u], temperature)  # [V]
        nxt = None
        if children[u]:
            s = proposal.child_probs(int(tree.tokens[u]), depths[u] + 1, temperature)  # q of u's children
            for c in children[u]:
                x = int(tree.tokens[c])
                if torch.rand((), generator=rng, dtype=torch.float64) * s[x] < r[x]:
                    nxt = c
                    break
                r = _renormalised((r - s).clamp_min(0), fallback=r)
                s = s.clone()
                s[x] = 0.0
                s = _renormalised(s, fallback=s)
        if nxt is None:
            return path, int(torch.multinomial(r, 1, generator=rng))
        path.append(nxt)


def _renormalised(x: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = x.sum()
    return x / total if total > 0 else fallback
