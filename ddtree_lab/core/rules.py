"""Tree rules and acceptance walks: the two plug-in points of a round (issue 59; DDTree, arXiv
2604.12989, sections 3-4; docs/background.md sections 3 and 9).
The sampling maths the walks run (``probs``, ``choose_tokens``, ``Marginal`` / ``Conditional`` /
``MarginalAnyTree``, ``accept_rejection``) is the section "sampling" at the end.

A tree rule turns one drafter block into the round's draft tree (step 2 of ``decode``):

    rule(draft, root_token, budget) -> DraftTree
        draft.logits       [block_size - 1, V], row d - 1 scores depth d (``drafter.Draft``)
        draft.conditional  DFlash 2's parent-conditioned view (``conditional.ConditionalDraft``), or None
        the tree           tokens[0] = root_token, at most ``budget`` draft nodes, parents before
                           children, depths <= block_size - 1, distinct tokens among siblings

An acceptance walk picks, at T > 0, the accepted root path of the verified tree (step 4):

    walk(tree, target_logits, proposal, temperature, generator) -> (path, bonus)
        target_logits [N + 1, V]; proposal: the drafter's q (``rule.proposal(draft)``,
        ``rules.Marginal`` / ``Conditional``); path: node indices from the root, 0 first (as
        ``tree.accept`` returns them); bonus: the token emitted after the path's last node.

The built-ins are rules and walks of exactly these shapes: ``best_first`` (DDTree over the
drafter's marginals, stored as "unary"), ``conditional`` (DFlash 2's selector), the linear
drafts ``dflash_chain`` and ``conditional_chain`` (what method "dflash" drafts: a rule's
``chain``), and the walks ``rejection`` and ``target_matching`` ("target"). Any callable of
the same shape is one more: ``as_rule`` / ``as_walk`` wrap it once, where a ``GenerationSpec``
is built (a built-in's name is looked up there), and the loop holds objects: it never compares
a rule's or a walk's name. A rule's tree is checked by ``check_tree`` every round, before its
verify (the built-ins' trees are valid by construction: ``checked``).

At T = 0 every walk is the argmax walk (``tree.accept``): the output equals AR whatever the rule.
At T > 0 ``target_matching`` samples the target at every node and follows the child holding the
sample: lossless for any tree, so every rule runs under it. A walk that needs the tree's tokens
drawn from the drafter's q (``draws_tree``: ``rejection``) gets them from
``rule.proposal(draft).sample_tree``. A rule provides that by a ``proposal(draft)`` method
returning an object with ``child_probs(parent_token, depth, temperature)`` [V] and
``sample_tree(tree, temperature, generator)`` whose every node's children, in index order, are
one sample without replacement from ``child_probs(the node's drawn token, its depth + 1)``
(``rules.draw_children``). A rule without one is drawn by ``rules.MarginalAnyTree``
(DFlash's marginals, node by node): lossless for any shape; the rule's shape is kept and its
tokens are drawn, as the built-ins' are.

A stored row names a rule or a walk by its name (a built-in, ``builtin``) or by its name plus
a hash of its ``definition`` (``experiments.plumbing.meaning.plugin_key``: the results layer),
so rows of one's own rule never mix with, or invalidate, the built-ins'.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .conditional import build_conditional_tree, conditional_chain as selector_chain
from .tree import DraftTree, accept, build_tree, build_trees, chain_of, truncate


# ----------------------------------------------------------------------------- tree rules

class TreeRule:
    """A tree rule: ``rule(draft, root_token, budget) -> DraftTree`` (module docstring), with
    what the loop asks of it: ``trees`` (a round's drafts at once), ``proposal`` (the drafter's
    q that a drawing walk samples the tree from), ``chain`` (the linear draft of method
    "dflash"; None: none), ``check_drafter`` and ``definition``. ``checked``: its trees are valid by
    construction and skip ``check_tree``. Subclass it, or pass any callable (``as_rule``)."""
    name = "rule"
    builtin = False
    checked = False
    chain = None

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        raise NotImplementedError

    def trees(self, drafts: list, roots: list[int], budgets: list[int]) -> list[DraftTree]:
        """One tree per draft of a round."""
        return [self(d, r, b) for d, r, b in zip(drafts, roots, budgets)]

    def proposal(self, draft):
        """The drafter's q for a drawing walk: DFlash's marginals drawn node by node (any shape)."""
        return MarginalAnyTree(draft.logits)

    def check_drafter(self, drafter) -> None:
        """ValueError when this rule cannot run with ``drafter`` (nothing by default)."""

    @property
    def definition(self):
        """What defines it, for the results layer's key (``experiments.plumbing.meaning``)."""
        return self


class _Builtin:
    """A built-in rule or walk: stored under its name alone (a plug-in's key adds a hash of its
    definition, ``experiments.plumbing.meaning.plugin_key``)."""
    kind = ""
    builtin = True

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class _BuiltinRule(_Builtin, TreeRule):
    """A built-in: valid trees by construction, stored under its name."""
    checked = True
    kind = "tree rule"


class DFlashChain(_BuiltinRule):
    """DFlash's linear draft: the argmax of each depth, the first ``budget`` depths."""
    name = "dflash_chain"

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        return chain_of(draft.logits[:budget].argmax(-1).cpu(), root_token)

    def proposal(self, draft):
        return Marginal(draft.logits)

    @property
    def chain(self):
        return self


class ConditionalChain(_BuiltinRule):
    """DFlash 2's linear draft: the selector's greedy path walk (``conditional.conditional_chain``),
    its first ``budget`` nodes."""
    name = "conditional_chain"

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        tree = selector_chain(draft.conditional, root_token)
        return truncate(tree, budget) if budget < tree.num_nodes else tree

    def proposal(self, draft):
        return Conditional(draft.conditional)

    def check_drafter(self, drafter) -> None:
        _needs_selector(self, drafter)

    @property
    def chain(self):
        return self


dflash_chain = DFlashChain()
conditional_chain = ConditionalChain()


class BestFirst(_BuiltinRule):
    """DDTree (Prop. 1): the ``budget`` most probable prefixes of the drafter's marginals,
    best first (``tree.build_tree``; a round's trees at once: ``tree.build_trees``)."""
    name = "unary"
    chain = dflash_chain

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        return build_tree(draft.logits, root_token, budget)

    def trees(self, drafts: list, roots: list[int], budgets: list[int]) -> list[DraftTree]:
        return build_trees(torch.stack([d.logits for d in drafts]), roots, budgets)

    def proposal(self, draft):
        return Marginal(draft.logits)


class ConditionalTree(_BuiltinRule):
    """DDTree over DFlash 2's selector: the ``budget`` heaviest paths of q(c | parent token, d)
    (``conditional.build_conditional_tree``)."""
    name = "conditional"
    chain = conditional_chain

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        return build_conditional_tree(draft.conditional, root_token, budget)

    def proposal(self, draft):
        return Conditional(draft.conditional)

    def check_drafter(self, drafter) -> None:
        _needs_selector(self, drafter)


def _needs_selector(rule: TreeRule, drafter) -> None:
    if getattr(drafter, "selector", None) is None:
        raise ValueError(f"tree={rule.name!r} needs a DFlash 2 drafter (a candidate selector); "
                         "this drafter has none: use tree='unary'")


best_first = BestFirst()
unary = best_first  # the stored label of DDTree over the marginals
conditional = ConditionalTree()
TREE_RULES = {r.name: r for r in (best_first, conditional)}  # the names a spec accepts (stored configs' labels)
TREES = tuple(TREE_RULES)


@dataclass(frozen=True)
class PluginRule(TreeRule):
    """A callable of one's own as a ``TreeRule``; its optional attributes ``name``, ``proposal``,
    ``chain`` and ``check_drafter`` are used where it has them."""
    fn: object

    def __call__(self, draft, root_token: int, budget: int) -> DraftTree:
        return self.fn(draft, root_token, budget)

    @property
    def name(self) -> str:
        return _name_of(self.fn)

    def proposal(self, draft):
        own = getattr(self.fn, "proposal", None)
        return own(draft) if own is not None else MarginalAnyTree(draft.logits)

    @property
    def chain(self):
        own = getattr(self.fn, "chain", None)
        return None if own is None else as_rule(own)

    def check_drafter(self, drafter) -> None:
        own = getattr(self.fn, "check_drafter", None)
        if own is not None:
            own(drafter)

    @property
    def definition(self):
        return self.fn


def as_rule(tree) -> TreeRule | None:
    """``tree`` as a ``TreeRule``: None (the drafter's own, ``drafters_own``) stays None, a
    built-in's name (``TREES``) is its object, a callable is wrapped (``PluginRule``)."""
    if tree is None:
        return None
    return _resolve(tree, TreeRule, TREE_RULES, PluginRule,
                    f"tree must be a rule (a callable rule(draft, root_token, budget) -> DraftTree), one of "
                    f"{TREES} or None (the drafter's own), got {tree!r}")


def _resolve(value, kind: type, builtins: dict, wrap, error: str):
    """``value`` as a ``kind``: itself, a built-in's object by name, or a callable wrapped;
    ValueError(``error``) otherwise (an unknown name included)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        if value in builtins:
            return builtins[value]
    elif callable(value):
        return wrap(value)
    raise ValueError(error)


def drafters_own(drafter) -> TreeRule:
    """The rule of ``tree=None``: ``conditional`` for a DFlash 2 drafter (it has a candidate
    selector), else ``best_first``."""
    return conditional if getattr(drafter, "selector", None) is not None else best_first


# ----------------------------------------------------------------------------- rules of one's own

def from_rank_paths(draft_logits: torch.Tensor, root_token: int, paths) -> DraftTree:
    """The tree of rank paths (a static shape, as Medusa's and EAGLE's trees are written): node
    i (i >= 1) holds, at depth len(paths[i - 1]), the token of rank paths[i - 1][-1] of that
    depth's row of draft_logits [L, V] (ranked as ``tree.build_tree`` ranks: logit descending,
    token id ascending); its parent is the node of the path without its last rank, listed
    before it; its log weight the sum of the marginals' log-probs along the path."""
    paths = [tuple(int(r) for r in p) for p in paths]
    logits = draft_logits.detach().double().cpu()  # [L, V]
    order = torch.sort(-logits, dim=-1, stable=True).indices  # [L, V]: the token of each rank
    log_q = logits - torch.logsumexp(logits, -1, keepdim=True)  # [L, V]: as build_tree rounds them
    index, tokens, parents, weights = {(): 0}, [root_token], [-1], [0.0]
    for path in paths:
        if not path or path[:-1] not in index or path in index:
            raise ValueError(f"rank path {path}: every path is new, non-empty and listed after its prefix {path[:-1]}")
        token = int(order[len(path) - 1, path[-1]])
        index[path] = len(tokens)
        tokens.append(token)
        parents.append(index[path[:-1]])
        weights.append(weights[parents[-1]] + float(log_q[len(path) - 1, token]))
    depths = [len(p) for p in [()] + paths]
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths),
                     torch.tensor(weights, dtype=torch.float64))


# ----------------------------------------------------------------------------- the check

def check_tree(tree, root_token: int, budget: int, max_depth: int, vocab_size: int | None = None,
               who: str = "tree") -> DraftTree:
    """``tree`` if a rule may return it for this round, else a ValueError, starting with ``who``
    (e.g. "tree rule 'mine'"), naming the node and the fault: not a DraftTree of 1-D fields of
    one length; no draft node; ``tokens[0]`` not ``root_token``; more than ``budget`` draft
    nodes; a parent at or after its child; a depth that does not match the parent's; two
    siblings with one token; a node deeper than ``max_depth`` (the block's draft positions,
    block_size - 1); a token outside the vocabulary."""
    try:
        return _check(tree, root_token, budget, max_depth, vocab_size)
    except ValueError as err:
        raise ValueError(f"{who}: {err}") from None


def _check(tree, root_token: int, budget: int, max_depth: int, vocab_size) -> DraftTree:
    _check_fields(tree)
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
    if tokens[0] != root_token:
        raise ValueError(f"node 0 holds token {tokens[0]}, not the root token {root_token}")
    if parents[0] != -1 or depths[0] != 0:
        raise ValueError(f"node 0 (the root) must have parent -1 and depth 0, got parent {parents[0]}, "
                         f"depth {depths[0]}")
    if len(tokens) - 1 > budget:
        raise ValueError(f"{len(tokens) - 1} draft nodes, more than the budget {budget}")
    siblings = {}
    for i in range(1, len(tokens)):
        _check_node(i, tokens, parents, depths, max_depth, vocab_size)
        j = siblings.setdefault((parents[i], tokens[i]), i)
        if j != i:
            raise ValueError(f"node {i} holds token {tokens[i]}, as its sibling node {j} does "
                             f"(the children of node {parents[i]} must hold distinct tokens)")
    return tree


def _check_fields(tree) -> None:
    if not isinstance(tree, DraftTree):
        raise ValueError(f"a tree rule must return a DraftTree, got {type(tree).__name__}")
    fields = {"tokens": tree.tokens, "parents": tree.parents, "depths": tree.depths, "log_weights": tree.log_weights}
    for name, x in fields.items():
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.shape[0] != tree.tokens.shape[0]:
            raise ValueError(f"{name} must be a 1-D tensor of the tree's N+1 = {tree.tokens.shape[0]} nodes, "
                             f"got {getattr(x, 'shape', type(x))}")
        if name != "log_weights" and x.is_floating_point():
            raise ValueError(f"{name} must hold integers, got {x.dtype}")
    if len(tree) < 2:
        raise ValueError("no draft node (a rule returns the root and at least one draft node)")


def _check_node(i: int, tokens: list, parents: list, depths: list, max_depth: int, vocab_size) -> None:
    """ValueError naming node ``i``'s fault: its parent, depth, or token."""
    p = parents[i]
    if p >= i:
        raise ValueError(f"node {i} has parent {p}, at or after it (a parent comes before its child: "
                         "0 <= parent < node)")
    if p < 0:
        raise ValueError(f"node {i} has parent {p} (only node 0, the root, has none)")
    if depths[i] != depths[p] + 1:
        raise ValueError(f"node {i} has depth {depths[i]}, but its parent node {p} has depth {depths[p]} "
                         f"(expected {depths[p] + 1})")
    if depths[i] > max_depth:
        raise ValueError(f"node {i} has depth {depths[i]}, deeper than the block ({max_depth} draft "
                         f"positions, block_size - 1)")
    if vocab_size is not None and not 0 <= tokens[i] < vocab_size:
        raise ValueError(f"node {i} holds token {tokens[i]}, outside the vocabulary [0, {vocab_size})")


# ----------------------------------------------------------------------------- walks

class Walk:
    """An acceptance walk at T > 0: ``walk(tree, target_logits, proposal, temperature,
    generator) -> (path, bonus)`` (module docstring). ``draws_tree``: it needs the tree's tokens
    drawn from the proposal (``proposal.sample_tree``) before the verify. Subclass it, or pass
    any callable (``as_walk``)."""
    name = "walk"
    builtin = False
    draws_tree = False

    def __call__(self, tree: DraftTree, target_logits: torch.Tensor, proposal, temperature: float,
                 generator) -> tuple[list[int], int]:
        raise NotImplementedError

    @property
    def definition(self):
        """What defines it, for the results layer's key (``experiments.plumbing.meaning``)."""
        return self


class _BuiltinWalk(_Builtin, Walk):
    kind = "walk"


class RejectionWalk(_BuiltinWalk):
    """DFlash's rule: the tree drawn from q, each child accepted with min(1, r / s), the
    residual on rejection (``rules.accept_rejection``). Lossless for a tree drawn from q."""
    name = "rejection"
    draws_tree = True

    def __call__(self, tree, target_logits, proposal, temperature, generator):
        return accept_rejection(tree, target_logits, proposal, temperature, generator)


class TargetMatchingWalk(_BuiltinWalk):
    """Target-only matching: the target samples at every node and the walk follows the child
    holding the sample (``tree.accept``). Lossless for any tree."""
    name = "target"

    def __call__(self, tree, target_logits, proposal, temperature, generator):
        return accept(tree, choose_tokens(target_logits, temperature, generator))


rejection = RejectionWalk()
target_matching = TargetMatchingWalk()
WALKS = {w.name: w for w in (rejection, target_matching)}  # the names a spec accepts: ``rules.ACCEPT_RULES``


@dataclass(frozen=True)
class PluginWalk(Walk):
    """A callable of one's own as a ``Walk``; its optional attributes ``name`` and
    ``draws_tree`` are used where it has them."""
    fn: object

    def __call__(self, tree, target_logits, proposal, temperature, generator):
        return self.fn(tree, target_logits, proposal, temperature, generator)

    @property
    def name(self) -> str:
        return _name_of(self.fn)

    @property
    def draws_tree(self) -> bool:
        return bool(getattr(self.fn, "draws_tree", False))

    @property
    def definition(self):
        return self.fn


def as_walk(walk) -> Walk:
    """``walk`` as a ``Walk``: a built-in's name (``ACCEPT_RULES``) is its object, a callable is
    wrapped (``PluginWalk``)."""
    return _resolve(walk, Walk, WALKS, PluginWalk,
                    f"accept_rule must be a walk (a callable walk(tree, target_logits, proposal, temperature, "
                    f"generator) -> (path, bonus)) or one of {ACCEPT_RULES}, got {walk!r}")


# ----------------------------------------------------------------------------- keys

def _name_of(fn) -> str:
    """A plug-in's own name: its ``name`` attribute, else its function or class name."""
    own = getattr(fn, "name", None)
    if isinstance(own, str) and own:
        return own
    if isinstance(fn, functools.partial):
        return _name_of(fn.func)
    return getattr(fn, "__name__", type(fn).__name__)


# ----------------------------------------------------------------------------- sampling
# Acceptance at T > 0 (what the walks above run): the official DFlash rule with the drafter's q,
# for chains and trees.
#
# Two walks, chosen once per generation (``ACCEPT_RULES``, their objects ``rules.rejection`` and
# ``rules.target_matching``; a walk of one's own: ``rules``); at T = 0 both are the argmax walk.
#
# - ``"target"``: target-only matching. The draft is deterministic (argmax chain, top-K tree);
#   the target samples at every node and the walk follows the child with that token
#   (ancestral sampling from the target: lossless). A draft token x is accepted with
#   probability p(x) only.
# - ``"rejection"`` (DFlash's ``dflash_generate``; speculative sampling, arXiv 2211.17192 /
#   2302.01318; for trees SpecInfer's multi-step speculative sampling, arXiv 2305.09781
#   section 4, without replacement as in recursive rejection sampling, arXiv 2402.14160):
#   draft tokens are SAMPLED from the drafter's marginal q_d = softmax(logits_d / T) at depth d.
#   The tree's shape is the best-first tree of the sorted marginals (fixed before sampling);
#   its rank-r nodes at depth d carry the r-th token of one sample without replacement from
#   q_d (``sample_draft``), so every node's children are the first m tokens of such a sample.
#   At a node with target distribution p, the children are tried in rank order:
#
#       r <- p, s <- q_d
#       child x: accept with probability min(1, r(x) / s(x)); on acceptance descend;
#       on rejection r <- max(0, r - s) / Z and s <- s without x, renormalised;
#       no child accepted: the bonus is a sample of r.
#
#   Each trial is one speculative-sampling step with proposal s and target r, so the output is
#   distributed as p whatever q is (lossless); a chain is the tree with one child per node.
#
# The proposal q is an object chosen once per generation (by the tree rule, ``rules``):
# ``Marginal`` (DFlash: q_d depends on the depth only) or ``Conditional`` (DFlash 2's selector:
# q(. | parent token, d) over the depth's K candidates, softmax(s / T), as SGLang's selector path
# walk). Under ``Conditional`` a node's children are drawn without replacement from q given the
# node's own (sampled) token, top-down (``draw_children``); the walk above is unchanged, with
# s = q(. | node token, depth + 1). ``MarginalAnyTree`` draws DFlash's marginals the same way, node
# by node, so a tree of any shape (a rule of one's own, ``rules``) is drawn from q: lossless
# whatever the shape. ``Marginal``'s one draw per depth needs best-first shapes (every node's
# children the ranks 0 .. m-1 of their depth, in order).

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
