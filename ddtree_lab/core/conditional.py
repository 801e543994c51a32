"""Conditional draft trees over DFlash 2 (``dflash.DFlash2DraftModel``'s candidate selector).

A DFlash 2 drafter keeps, at every depth d, the unary top-K candidates c of its logits and
scores them given the predecessor token t (the parent's token in a tree):

    s_d(c | t) = unary_d(c) + < P[t] * h_d , S[c] >        (P, S: the selector's codebooks,
                                                             h_d: its projected hidden state)
    q(c | t, d) = softmax over the K candidates of s_d(. | t)

so a node's children depend on its own token. Under this surrogate the expected number of
accepted draft tokens of a tree is still the sum over its nodes of the product of q along the
node's path; every q <= 1, so a path weighs no more than its prefix and the best tree of B
nodes is again the B heaviest paths. ``build_conditional_tree`` finds them best-first, each
node's children ranked by its own q. Every q the search (and the T > 0 proposal,
``rules.Conditional``) reads comes from one table per block, built in one vectorised pass:
a node of depth d >= 1 holds one of depth d's K candidates, so its children's scores are a
row of the [K, K] transition table of depth d + 1 (``ConditionalDraft.transitions``; only
the root's row is computed on its own); each (parent, depth) is ranked once;
``naive.build_conditional_tree`` enumerates every path (tiny K and L only). Both share
the tie rule of ``tree``: children by (log q descending, token id ascending), paths by (log
weight descending, rank path ascending).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property

import torch

from .tree import DraftTree


@dataclass(frozen=True)
class ConditionalDraft:
    """One DFlash 2 block as a parent-conditioned surrogate.

    candidates [L, K] long: depth d+1's candidate tokens (the unary top-K);
    unary [L, K]: their unary logits; hidden [L, R]: the selector's projected hidden state;
    predecessor [V, R], successor [V, R]: the selector's codebooks."""
    candidates: torch.Tensor
    unary: torch.Tensor
    hidden: torch.Tensor
    predecessor: torch.Tensor
    successor: torch.Tensor
    _ranked: dict = field(default_factory=dict, compare=False, repr=False)  # (parent, depth) -> ranked children

    @property
    def depth(self) -> int:
        return self.candidates.shape[0]

    def scores_alone(self, parent_token: int, depth: int) -> torch.Tensor:
        """[K] float64: s_d(candidates[depth - 1] | parent_token), the selector's scores, one
        (parent, depth) computed on its own, no table: the root's row (or a parent outside depth
        d - 1's candidates), which ``scores`` falls back to; its plain twin ``naive.scores``
        computes every row this way."""
        d = depth - 1
        return selector_scores(self.unary[d].double(), self.hidden[d].double(),
                               self.predecessor[parent_token].double(), self.successor[self.candidates[d]].double())

    @cached_property
    def transitions(self) -> tuple[torch.Tensor, list[dict]]:
        """(table [L-1, K, K] float64, where): table[d - 1, i, j] = s_{d+1}(candidates[d][j] |
        candidates[d - 1][i]), every depth >= 2 in one vectorised pass; where[d - 1]: {token:
        i} of depth d's candidates."""
        parents = self.predecessor[self.candidates[:-1]].double()  # [L-1, K, R]
        table = selector_scores(self.unary[1:, None, :].double(), self.hidden[1:, None, :].double(), parents,
                                self.successor[self.candidates[1:]].double()[:, None])  # [L-1, K, K]
        return table, [{t: i for i, t in enumerate(row)} for row in self.candidates[:-1].tolist()]

    def scores(self, parent_token: int, depth: int) -> torch.Tensor:
        """[K] float64: s_d(candidates[depth - 1] | parent_token): a row of ``transitions`` when
        the parent is one of depth d - 1's candidates, else (the root) ``scores_alone``."""
        if depth >= 2:
            i = self.transitions[1][depth - 2].get(parent_token)
            if i is not None:
                return self.transitions[0][depth - 2, i]
        return self.scores_alone(parent_token, depth)

    def child_log_probs(self, parent_token: int, depth: int) -> torch.Tensor:
        """[K] float64: log q(candidates[depth - 1] | parent_token, depth) at T = 1."""
        return torch.log_softmax(self.scores(parent_token, depth), -1)

    @cached_property
    def _log_q(self) -> tuple[list, list]:
        """(candidates as lists [L][K], log q at T = 1 of every row of ``transitions`` as lists
        [L-1][K][K]): one log_softmax and one host copy per block, which the walks read."""
        return self.candidates.tolist(), torch.log_softmax(self.transitions[0], -1).tolist()

    def ranked_children(self, parent_token: int, depth: int) -> tuple[list[int], list[float]]:
        """(tokens, log q) of depth ``depth``'s candidates given the parent, best first
        (ties: lower token id first); each (parent, depth) ranked once, from a row of
        ``_log_q`` when the parent is one of depth d - 1's candidates."""
        key = (parent_token, depth)
        if key not in self._ranked:
            i = self.transitions[1][depth - 2].get(parent_token) if depth >= 2 else None
            logq = self.child_log_probs(parent_token, depth).tolist() if i is None else self._log_q[1][depth - 2][i]
            self._ranked[key] = _ranked(self._log_q[0][depth - 1], logq)
        return self._ranked[key]


def _ranked(tokens: list[int], logq) -> tuple[list[int], list[float]]:
    """(tokens, log q (a list, or a tensor [K])) best first; ties: lower token id first."""
    logq = logq.tolist() if isinstance(logq, torch.Tensor) else logq
    order = sorted(range(len(tokens)), key=lambda i: (-logq[i], tokens[i]))
    return [tokens[i] for i in order], [logq[i] for i in order]


def selector_scores(unary: torch.Tensor, hidden: torch.Tensor, predecessor: torch.Tensor,
                    successor: torch.Tensor) -> torch.Tensor:
    """s(c | t) = unary(c) + < P[t] * h , S[c] > for every candidate: unary [..., K], hidden
    [..., R] (projected), predecessor [..., R] (P[t]), successor [..., K, R] (S[c]) -> [..., K]."""
    return unary + (successor * (predecessor * hidden)[..., None, :]).sum(-1)


def from_selector(selector, hidden: torch.Tensor, logits: torch.Tensor) -> ConditionalDraft:
    """A ``ConditionalDraft`` from ``dflash``'s ``CandidateSelector`` (``model.candidate_selector``),
    the drafter's block hidden states [L, H] and logits [L, V] of depths 1..L."""
    with torch.no_grad():
        unary, candidates = torch.topk(logits.float(), selector.top_k, dim=-1)  # sorted, [L, K]
        return ConditionalDraft(candidates, unary, selector.hidden_projection(hidden.to(
            selector.hidden_projection.weight.dtype)), selector.predecessor_codebook.weight,
            selector.successor_codebook.weight)


def _check(draft: ConditionalDraft, root_token: int, budget: int) -> None:
    vocab = draft.predecessor.shape[0]
    if isinstance(root_token, bool) or not isinstance(root_token, int) or not 0 <= root_token < vocab:
        raise ValueError(f"root_token must be an int in [0, {vocab - 1}], got {root_token!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")


def build_conditional_tree(draft: ConditionalDraft, root_token: int, budget: int) -> DraftTree:
    """The ``budget`` heaviest paths of the conditional surrogate, in pop order (topological)."""
    _check(draft, root_token, budget)
    node_tokens, parents, depths, weights = [root_token], [-1], [0], [0.0]
    ranked = {0: draft.ranked_children(root_token, 1)}  # node -> its children, best first
    k = draft.candidates.shape[1]
    heap = [(-ranked[0][1][0], (0,), 0, 1, 0)]  # (-log weight, rank path, parent, depth, rank)
    while heap and len(node_tokens) <= budget:
        neg, path, parent, depth, rank = heapq.heappop(heap)
        node = len(node_tokens)
        node_tokens.append(ranked[parent][0][rank])
        parents.append(parent)
        depths.append(depth)
        weights.append(-neg)
        if rank + 1 < k:  # next sibling, ranked by the same parent
            heapq.heappush(heap, (-(weights[parent] + ranked[parent][1][rank + 1]), path[:-1] + (rank + 1,),
                                  parent, depth, rank + 1))
        if depth < draft.depth:  # first child, ranked by this node's own token
            ranked[node] = draft.ranked_children(node_tokens[node], depth + 1)
            heapq.heappush(heap, (-(weights[node] + ranked[node][1][0]), path + (0,), node, depth + 1, 0))
    return _tree(node_tokens, parents, depths, weights)


def conditional_chain(draft: ConditionalDraft, root_token: int) -> DraftTree:
    """DFlash 2's linear draft: the selector's greedy path walk, each depth's best candidate
    given the previous pick (``CandidateSelector.select`` at T = 0)."""
    _check(draft, root_token, 1)
    tokens, weights = [root_token], [0.0]
    for depth in range(1, draft.depth + 1):
        best, logq = draft.ranked_children(tokens[-1], depth)
        tokens.append(best[0])
        weights.append(weights[-1] + logq[0])
    n = len(tokens)
    return _tree(tokens, list(range(-1, n - 1)), list(range(n)), weights)


def _tree(tokens, parents, depths, weights) -> DraftTree:
    return DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long),
                     torch.tensor(depths, dtype=torch.long), torch.tensor(weights, dtype=torch.float64))
