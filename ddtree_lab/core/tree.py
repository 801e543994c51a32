"""DDTree draft trees: build, flatten, accept (DDTree, arXiv 2604.12989, sections 3-4).

One drafter pass gives per-depth logits ``[L, V]``; their softmaxes q_1..q_L define a
factorised surrogate under which the expected number of accepted draft tokens of a tree is
the sum over its draft nodes u of q(u), the product of the marginals along u's path
(Prop. 1). The best tree of B draft nodes is therefore the B most probable prefixes, which
is prefix-closed; ``build_tree`` finds it by best-first search over the top-K ranks of each
row (K = min(B, V)) in O(B log B), and ``naive.build_tree`` is its brute-force twin.

Tie rule (shared by both builders, so they agree exactly even with tied probabilities):

* within a row, tokens are ranked by (logit descending, token id ascending);
* prefixes are ordered by (log weight descending, rank path ascending), where the rank path
  is the tuple of ranks along the path, compared lexicographically (a path sorts before its
  extensions). Log weights are float64 sums of log-probabilities, accumulated root first.

Nodes are stored in that order, which is the heap's pop order and is topological: a parent
never weighs less than its child and its rank path is a prefix of the child's. The budget
counts draft nodes, not the root: a tree of budget B has B + 1 nodes, node 0 the root (the
last committed token). Tree buffers (``ancestor_mask``, ``position_ids``) are pure
functions of the tree.
"""
from __future__ import annotations

import functools
import heapq
import math
import operator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A draft tree of N draft nodes plus the root, nodes in topological order.

    tokens:      LongTensor[N+1]     token of each node; tokens[0] = last committed token
    parents:     LongTensor[N+1]     parent index, parents[0] == -1, parents[i] < i
    depths:      LongTensor[N+1]     depths[0] == 0, depths[i] == depths[parents[i]] + 1
    log_weights: DoubleTensor[N+1]   sum of drafter log-probs along the path, 0 at the root

    ``eq=False``: compare trees field by field with ``torch.equal``.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    log_weights: torch.Tensor

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_nodes(self) -> int:
        """N, the number of draft nodes (the root excluded)."""
        return len(self) - 1

    budget = num_nodes

    @cached_property
    def children(self) -> list[list[int]]:
        """children[i]: indices of node i's children, ascending."""
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for node, parent in enumerate(self.parents.tolist()[1:], start=1):
            kids[parent].append(node)
        return kids

    @cached_property
    def child_by_token(self) -> list[dict[int, int]]:
        """child_by_token[i][t]: the first child of node i whose token is t."""
        tokens = self.tokens.tolist()
        return [{tokens[c]: c for c in reversed(kids)} for kids in self.children]

    @cached_property
    def is_chain(self) -> bool:
        """Whether node i's parent is i - 1 for every node (read from the last node's depth:
        parents precede children, so only a chain's last node has depth N)."""
        return int(self.depths[-1]) == len(self) - 1

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root (0) down to ``node``."""
        return tree_path(self.parents, node)


# ----------------------------------------------------------------------------- checks

def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high] (high None: unbounded), else ValueError naming it."""
    allowed = f"[{low}, inf)" if high is None else f"[{low}, {high}]"
    try:
        as_int = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        as_int = None
    if as_int is None or as_int < low or (high is not None and as_int > high):
        raise ValueError(f"{name} must be an int in {allowed}, got {value!r}")
    return as_int


def _shaped_logits(draft_logits, batched: bool = False) -> torch.Tensor:
    """Float logits [L, V] ([B, L, V] if ``batched``) on the host, every size >= 1 (values unchecked)."""
    dims = 3 if batched else 2
    if not isinstance(draft_logits, torch.Tensor) or draft_logits.dim() != dims \
            or min(draft_logits.shape) < 1:
        shape = tuple(draft_logits.shape) if isinstance(draft_logits, torch.Tensor) else type(draft_logits)
        want = "[B, L, V] with B, L, V" if batched else "[L, V] with L, V"
        raise ValueError(f"draft_logits must be a {dims}-D tensor {want} >= 1, got {shape}")
    logits = draft_logits if draft_logits.is_floating_point() else draft_logits.double()
    return logits.detach().cpu()


def _check_finite(finite: bool) -> None:
    if not finite:
        raise ValueError("draft_logits must hold finite values in (-inf, inf), got NaN or inf")


def _check_logits(draft_logits) -> torch.Tensor:
    """Validated float logits [L, V] with L, V >= 1 and only finite values."""
    logits = _shaped_logits(draft_logits)
    _check_finite(bool(torch.isfinite(logits).all()))
    return logits


# ----------------------------------------------------------------------------- building

def _log_normaliser(logits: torch.Tensor) -> torch.Tensor:
    """[L, V] logits -> [L, 1] float64 logsumexp per row (shared by both builders).

    A log-prob is then one exactly rounded subtraction, logit - logsumexp, so it is
    monotone in the logit and bit-identical however many entries a builder gathers.
    """
    return torch.logsumexp(logits.double(), dim=-1, keepdim=True)  # [L, 1]


def _top_ranks(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids [L, k] of each row's k best tokens, ordered (logit desc, token id asc),
    their float64 log-probs [L, k]). A NaN or an infinity anywhere in a row, or -inf among its
    k best, is a ValueError (a -inf below them never enters a tree).

    One ``topk`` call of k + 1: a tie at the cut is the (k+1)-th value equal to the k-th.
    torch's order among equal values is unspecified, so tied rows are re-canonicalised (a rare
    path; random float logits almost never tie).
    """
    values, ids = logits.topk(min(k + 1, logits.shape[1]), dim=-1)  # [L, k (+1)]
    normaliser = _log_normaliser(logits)  # [L, 1]: NaN or inf if any entry is NaN or +inf
    _check_finite(bool(torch.isfinite(normaliser).all() and torch.isfinite(values[:, :k]).all()))
    ties_at_cut = values.shape[1] > k and bool((values[:, k] == values[:, k - 1]).any())
    values, ids = values[:, :k], ids[:, :k]
    equal_pairs = values[:, 1:] == values[:, :-1]  # [L, k-1]
    ties_inside = bool((equal_pairs & (ids[:, 1:] < ids[:, :-1])).any())
    if ties_inside or ties_at_cut:
        ids = _canonical_top_ranks(logits, values[:, -1:], k)
    return ids, logits.gather(1, ids).double() - normaliser


def _canonical_top_ranks(logits: torch.Tensor, kth: torch.Tensor, k: int) -> torch.Tensor:
    """Tie-exact top-k ids [L, k]: keep the lowest ids among values equal to the k-th."""
    above = logits > kth  # [L, V]
    at_cut = logits == kth  # [L, V]
    room = k - above.sum(-1, keepdim=True)  # [L, 1] slots left for tokens tied at the cut
    keep = above | (at_cut & (at_cut.cumsum(-1) <= room))  # [L, V], k per row
    ids = keep.nonzero()[:, 1].view(-1, k)  # [L, k], ascending token id
    order = logits.gather(1, ids).sort(dim=-1, descending=True, stable=True).indices
    return ids.gather(1, order)  # [L, k]


def _best_first(log_probs: list[list[float]], num_ranks: int, budget: int) -> list[tuple]:
    """Pop order of the best ``budget`` prefixes: [(parent, depth, rank, log weight)].

    ``log_probs[d][r]``: log-prob of the rank-r token of row d (non-increasing in r).
    Heap entries are (-log weight, rank path, parent, depth, rank); the rank path breaks
    ties and is unique, so the later fields are never compared.
    """
    depth_max = len(log_probs)
    weights = [0.0]  # log weight of each popped node, the root first
    nodes: list[tuple] = []
    heap = [(-log_probs[0][0], (0,), 0, 1, 0)]
    while heap and len(nodes) < budget:
        neg_weight, path, parent, depth, rank = heapq.heappop(heap)
        nodes.append((parent, depth, rank, -neg_weight))
        weights.append(-neg_weight)
        if rank + 1 < num_ranks:  # next sibling
            weight = weights[parent] + log_probs[depth - 1][rank + 1]
            heapq.heappush(heap, (-weight, path[:-1] + (rank + 1,), parent, depth, rank + 1))
        if depth < depth_max:  # first child
            weight = -neg_weight + log_probs[depth][0]
            heapq.heappush(heap, (-weight, path + (0,), len(nodes), depth + 1, 0))
    return nodes


def _pack(root_token: int, tokens: list[int], parents: list[int], depths: list[int],
          weights: list[float]) -> DraftTree:
    """Python lists over the draft nodes (root excluded) -> DraftTree tensors."""
    return DraftTree(
        tokens=torch.tensor([root_token] + tokens, dtype=torch.long),
        parents=torch.tensor([-1] + parents, dtype=torch.long),
        depths=torch.tensor([0] + depths, dtype=torch.long),
        log_weights=torch.tensor([0.0] + weights, dtype=torch.float64),
    )


def build_tree(draft_logits: torch.Tensor, root_token: int, budget: int) -> DraftTree:
    """The ``budget`` most probable prefixes of the factorised surrogate, in pop order.

    draft_logits: [L, V], row d-1 scores depth d. Returns min(budget, sum_d V^d) draft
    nodes plus the root (``root_token``). Best-first search, O(B log B) after one topk and
    one logsumexp on the whole [L, V] tensor; tie rule in the module docstring. The tree of
    one: ``build_trees``.
    """
    return build_trees(_shaped_logits(draft_logits)[None], [root_token], [budget])[0]


def build_trees(draft_logits: torch.Tensor, root_tokens: list[int], budgets: list[int]) -> list[DraftTree]:
    """``build_tree`` of B drafts at once: draft_logits [B, L, V], one root token and one budget
    per draft -> B trees, each equal to ``build_tree(draft_logits[b], root_tokens[b],
    budgets[b])``. The checks, the top-K ranks (K = min(max budget, V): a tree of a smaller
    budget reads the first of them, the same ranks by the tie rule) and the logsumexps run
    once over the batch, on the first min(L, max budget) rows (the depths a tree can reach;
    the rows below are only checked for NaN and +inf); only the best-first searches run per tree."""
    logits = _shaped_logits(draft_logits, batched=True)  # [B, L, V], values checked by _top_ranks
    B, L, V = logits.shape
    if len(root_tokens) != B or len(budgets) != B:
        raise ValueError(f"root_tokens and budgets must have one entry per draft ({B}), "
                         f"got {len(root_tokens)} and {len(budgets)}")
    roots = [_check_int("root_token", r, 0, V - 1) for r in root_tokens]
    budgets = [_check_int("budget", b, 1) for b in budgets]
    D = min(L, max(budgets))  # a tree of budget b reaches depth b at most: deeper rows never enter one
    if D < L:  # NaN or +inf below, as the normaliser of a row would find (amax propagates NaN)
        _check_finite(bool(torch.isfinite(logits[:, D:].amax())))
    rows = logits[:, :D].reshape(B * D, V)
    ids, top_log_probs = _top_ranks(rows, min(max(budgets), V))  # [B * D, K] each
    ids, top_log_probs = ids.view(B, D, -1).tolist(), top_log_probs.view(B, D, -1).tolist()
    return [_tree(ids[b], top_log_probs[b], roots[b], budgets[b]) for b in range(B)]


def _tree(ids: list[list[int]], top_log_probs: list[list[float]], root_token: int, budget: int) -> DraftTree:
    """One tree from its rows' top ranks ids [L][K] and their log-probs (K >= its own ranks)."""
    nodes = _best_first(top_log_probs, min(budget, len(top_log_probs[0])), budget)
    parents, depths, ranks, weights = (list(col) for col in zip(*nodes))
    tokens = [ids[d - 1][r] for d, r in zip(depths, ranks)]  # [N]
    return _pack(root_token, tokens, parents, depths, weights)


def chain_tree(draft_tokens: torch.Tensor, root_token: int,
               log_probs: torch.Tensor | None = None) -> DraftTree:
    """A linear (DFlash) draft of L tokens as a degenerate tree: node i has parent i-1.

    draft_tokens: LongTensor[L]; log_probs: optional Tensor[L], the drafter's log-prob of
    each draft token (log weights are their running sums; zeros when omitted).
    """
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 1:
        raise ValueError(f"draft_tokens must be a 1-D tensor [L] with L >= 0, "
                         f"got {getattr(draft_tokens, 'shape', type(draft_tokens))}")
    root_token = _check_int("root_token", root_token, 0)
    length = draft_tokens.shape[0]
    if log_probs is not None and (not isinstance(log_probs, torch.Tensor) or tuple(log_probs.shape) != (length,)):
        raise ValueError(f"log_probs must be a 1-D tensor of length L={length}, "
                         f"got {getattr(log_probs, 'shape', type(log_probs))}")
    return chain_of(draft_tokens.long().cpu(), root_token,
                    None if log_probs is None else log_probs.double().cpu())


def chain_of(draft_tokens: torch.Tensor, root_token: int, log_probs: torch.Tensor | None = None) -> DraftTree:
    """``chain_tree`` without its checks, for the decoding loop (its spec and drafter fix the
    shapes): draft_tokens LongTensor[L] and log_probs DoubleTensor[L] or None on the CPU. The
    parents, depths and zero log weights of a chain of L tokens are built once per L and shared
    by every chain of that length (no one writes a tree's tensors)."""
    steps, zeros = _chain_frame(draft_tokens.shape[0])
    weights = zeros if log_probs is None else F.pad(torch.cumsum(log_probs, 0), (1, 0))
    return DraftTree(tokens=F.pad(draft_tokens, (1, 0), value=root_token), parents=steps[0],
                     depths=steps[1], log_weights=weights)


@functools.lru_cache(maxsize=None)
def _chain_frame(length: int) -> tuple:
    """((parents, depths) LongTensor[L+1] each, zero log weights DoubleTensor[L+1]) of a chain
    of ``length`` draft tokens."""
    steps = torch.arange(length + 1)
    return (steps - 1, steps), torch.zeros(length + 1, dtype=torch.float64)


# ----------------------------------------------------------------------------- buffers

def ancestor_mask(tree: DraftTree) -> torch.Tensor:
    """BoolTensor[N+1, N+1]: [i, j] true iff j == i or j is an ancestor of i (a chain: the
    lower triangle, built at once)."""
    size = tree.parents.numel()
    if int(tree.depths[-1]) == size - 1:  # parents precede children: the last node at depth N is a chain's
        return torch.ones(size, size, dtype=torch.bool).tril_()
    return ancestor_mask_from_parents(tree.parents)


def ancestor_mask_from_parents(parents: torch.Tensor) -> torch.Tensor:
    """``ancestor_mask`` from parents [N+1] alone (also for non-DDTree parent lists).

    Vectorised: walk every node up one level per step until all sit at the root (max-depth
    steps); the root is its own parent here, which only re-marks the root column.
    """
    size = parents.numel()
    rows = torch.arange(size)  # [N+1]
    up = parents.clamp(min=0)  # [N+1], root -> itself
    mask = torch.zeros(size, size, dtype=torch.bool)
    mask[rows, rows] = True
    node = rows
    while bool((node > 0).any()):
        node = up[node]  # [N+1] ancestor one level higher
        mask[rows, node] = True
    return mask


def tree_depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of every node (root 0) from ``parents`` [N+1] -> LongTensor[N+1]."""
    depths = torch.zeros_like(parents)
    for i in range(1, parents.numel()):  # parents[i] < i, so the parent's depth is known
        depths[i] = depths[parents[i]] + 1
    return depths


def tree_path(parents: torch.Tensor, node: int) -> list[int]:
    """Node indices of the path root..node (both included), walking ``parents``."""
    up = parents.tolist()
    path = [node]
    while up[path[-1]] >= 0:
        path.append(up[path[-1]])
    return path[::-1]


def position_ids(tree: DraftTree, start: int) -> torch.Tensor:
    """LongTensor[N+1]: start + depth, start = the root's position in the sequence."""
    start = _check_int("start", start, 0)
    return tree.depths + start


# ----------------------------------------------------------------------------- acceptance

def accept(tree: DraftTree, target_choice: torch.Tensor) -> tuple[list[int], int]:
    """Greedy walk from the root along children whose token is the target's choice.

    target_choice: LongTensor[N+1], the target's token at each node (argmax at T=0, a
    sample at T>0). Returns (path, bonus): node indices 0 .. deepest accepted node, and
    the target's choice there. Siblings in a built tree have distinct tokens.
    """
    if not isinstance(target_choice, torch.Tensor) or target_choice.dim() != 1 \
            or target_choice.shape[0] != len(tree):
        raise ValueError(f"target_choice must be a 1-D tensor of length N+1={len(tree)}, "
                         f"got {getattr(target_choice, 'shape', type(target_choice))}")
    choice = target_choice.tolist()
    if tree.is_chain:  # the longest prefix whose every token is the target's choice before it
        tokens, k = tree.tokens.tolist(), 0
        while k + 1 < len(tokens) and tokens[k + 1] == choice[k]:
            k += 1
        return list(range(k + 1)), int(choice[k])
    child_by_token = tree.child_by_token
    path = [0]
    while (child := child_by_token[path[-1]].get(choice[path[-1]])) is not None:
        path.append(child)
    return path, int(choice[path[-1]])


def leading_rows(path: list[int]) -> bool:
    """Whether a root path (ascending node indices, as ``accept`` returns) is the first
    len(path) nodes 0 .. len - 1: a chain's path, or a tree's main path. Its rows of a
    per-node tensor are then a slice, not a gather."""
    return path[-1] == len(path) - 1


def truncate(tree: DraftTree, budget: int) -> DraftTree:
    """The first ``budget`` draft nodes of a built tree: pop order makes every prefix the
    best tree of its size, so auto-budget builds once at the largest budget and slices."""
    n = _check_int("budget", budget, 1, tree.num_nodes) + 1
    return DraftTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.log_weights[:n])


def expected_acceptance(tree: DraftTree) -> float:
    """Surrogate expected number of accepted draft tokens: sum of q(u) over draft nodes."""
    return math.fsum(tree.log_weights[1:].exp().tolist())


def expected_acceptance_prefixes(tree: DraftTree) -> torch.Tensor:
    """Tensor[N] float64: entry b-1 = expected acceptance of the first b draft nodes.

    Nodes are in pop order, so each prefix of a built tree is the best tree of its size.
    """
    return tree.log_weights[1:].exp().cumsum(0)  # [N]


# ----------------------------------------------------------------------------- batches of trees
# The trees of one verify as batch tensors, in one pass over the batch (issue 29): tokens,
# positions, attention and recurrent ancestor masks and conv windows (``batch_masks``; plain
# twin ``naive.batch_buffers``), and the packed layout of trees of different sizes (``packed_rows``,
# ``pack``, ``unpack``; issue 29 item 4): the trees' rows side by side, no padding, for every
# row-wise piece of the forward; attention and the recurrent layers unpack them to [B, T].

def chain_parents(n: int) -> torch.Tensor:
    """Parents of a chain with nodes 0..n: [-1, 0, 1, ..., n-1], LongTensor[n+1].

    The naive mode of section 4 is an exact mode called with ``chain_parents(N)`` on a tree of
    N+1 nodes: each node then follows the previous node in sequence order, siblings included.
    """
    return torch.arange(-1, n)


def ancestor_windows(parents: torch.Tensor, K: int) -> torch.Tensor:
    """Conv window of every node, as rows into ``torch.cat([conv_state.T, x])`` [K+N+1, C].

    Row c < K is conv state column c, row K+i is node i. Window of node i:
    [a_{K-1}, ..., a_1, i] with a_j its j-th ancestor; above the root the chain continues into
    the conv state (the root's predecessors are columns K-1, K-2, ...). Returns LongTensor[N+1, K].
    """
    n = parents.numel()
    # predecessor of every row of the concatenation: conv column c -> c-1, node i -> its parent
    node_pred = torch.where(parents >= 0, parents + K, torch.full_like(parents, K - 1))
    pred = torch.cat([(torch.arange(K) - 1).clamp(min=0), node_pred])  # [K+N+1]
    windows = torch.empty(n, K, dtype=torch.long)
    windows[:, K - 1] = torch.arange(n) + K
    for j in range(K - 2, -1, -1):
        windows[:, j] = pred[windows[:, j + 1]]
    return windows


def _padded_rows(rows: list[torch.Tensor], T: int, fill: torch.Tensor | None = None) -> torch.Tensor:
    """1-D LongTensors of lengths n_b -> [B, T]: row b's entries, then ``fill[b, n_b:]`` (zeros)."""
    if min(r.numel() for r in rows) == T:
        return torch.stack(rows)
    out = torch.zeros(len(rows), T, dtype=torch.long) if fill is None else fill
    for b, r in enumerate(rows):
        out[b, :r.numel()] = r
    return out


def ancestor_masks(up: torch.Tensor) -> torch.Tensor:
    """BoolTensor[B, T, T] from ``up`` LongTensor[B, T] (each row's parent; the root and every
    padding row point at themselves): [b, i, j] true iff j == i or j is an ancestor of i.

    Walks every row of every tree up one level per step (max-depth steps, all trees at once)."""
    B, T = up.shape
    mask = torch.eye(T, dtype=torch.bool).repeat(B, 1, 1)
    node = torch.arange(T).expand(B, T)
    rows = mask.new_ones(B, T, 1)
    while True:
        nxt = up.gather(1, node)
        if torch.equal(nxt, node):
            return mask
        mask.scatter_(2, nxt[..., None], rows)
        node = nxt


def _real_rows(sizes: list[int], T: int) -> torch.Tensor:
    """BoolTensor[B, T]: row i of tree b is a node (i < sizes[b]), not padding."""
    return torch.arange(T)[None, :] < torch.tensor(sizes)[:, None]


def packed_rows(sizes: list[int], T: int) -> torch.Tensor | None:
    """LongTensor[N], N = sum(sizes): for node i of tree b in the packed layout (the trees side
    by side, no padding), its row b * T + i of the padded layout [B * T]; None when no tree is
    padded (the two layouts are one)."""
    if min(sizes) == T:
        return None
    return _real_rows(sizes, T).reshape(-1).nonzero().squeeze(1)


def unpack(x: torch.Tensor, rows: torch.Tensor, B: int, T: int, dim: int) -> torch.Tensor:
    """x [1, ..., N, ...] (the N packed rows along ``dim`` >= 1) -> [B, ..., T, ...]: every row
    at its padded place ``rows`` (``packed_rows``), zeros on the padding rows."""
    flat = x[0].movedim(dim - 1, 0)  # [N, ...]
    out = flat.new_zeros(B * T, *flat.shape[1:])
    out[rows.to(x.device)] = flat
    return out.view(B, T, *flat.shape[1:]).movedim(1, dim)


def pack(x: torch.Tensor, rows: torch.Tensor, dim: int) -> torch.Tensor:
    """``unpack``'s inverse: x [B, ..., T, ...] (T along ``dim`` >= 1) -> [1, ..., N, ...], the
    padded rows ``rows`` in packed order (padding rows dropped)."""
    flat = x.movedim(dim, 1)
    flat = flat.reshape(-1, *flat.shape[2:])  # [B * T, ...]
    return flat.index_select(0, rows.to(x.device)).movedim(0, dim - 1)[None]


@functools.lru_cache(maxsize=None)
def _lower_triangle(T: int) -> torch.Tensor:
    """BoolTensor[T, T]: [i, j] true iff j <= i."""
    return torch.ones(T, T, dtype=torch.bool).tril_()


def chain_masks(sizes: list[int], T: int) -> torch.Tensor:
    """``ancestor_masks`` of B chains of ``sizes`` nodes, padded to T: lower triangles (with
    no padding, views of one triangle per T, built once and never written)."""
    tril = _lower_triangle(T)
    if min(sizes) == T:  # no padding: one triangle for every tree
        return tril.expand(len(sizes), T, T)
    return tril[None] & _real_rows(sizes, T)[:, :, None] | torch.eye(T, dtype=torch.bool)


def chain_windows(sizes: list[int], T: int, K: int) -> torch.Tensor:
    """``conv_windows`` of B chains: node i's window is rows i + 1 .. i + K of [conv_state.T ; x]
    (K - 1 predecessors, then itself); a padding row's, itself K times."""
    windows = torch.arange(T)[:, None] + torch.arange(1, K + 1)  # [T, K]
    if min(sizes) == T:
        return windows.expand(len(sizes), T, K)
    own = (torch.arange(T) + K)[:, None].expand(T, K)
    return torch.where(_real_rows(sizes, T)[:, :, None], windows, own)


def conv_windows(up: torch.Tensor, K: int) -> torch.Tensor:
    """LongTensor[B, T, K]: every node's conv window as rows into [conv_state.T ; x_b] [K + T, C]
    (``tree.ancestor_windows`` of every tree at once). ``up`` as ``ancestor_masks`` takes it,
    with the root at -1; a padding row's window is itself K times."""
    B, T = up.shape
    own = torch.arange(T) + K
    node_pred = torch.where(up >= 0, up + K, torch.full_like(up, K - 1))  # [B, T]
    padding = up == torch.arange(T)
    node_pred = torch.where(padding, own, node_pred)
    pred = torch.cat([(torch.arange(K) - 1).clamp(min=0).expand(B, K), node_pred], dim=1)  # [B, K + T]
    windows = torch.empty(B, T, K, dtype=torch.long)
    windows[:, :, K - 1] = own
    for j in range(K - 2, -1, -1):
        windows[:, :, j] = pred.gather(1, windows[:, :, j + 1])
    return windows


def _parents_up(parents: list[torch.Tensor], T: int, root: int) -> torch.Tensor:
    """[B, T]: each tree's parents (the root's set to ``root``), padding rows pointing at themselves."""
    if min(p.numel() for p in parents) == T:
        up = torch.stack(parents)
    else:
        up = _padded_rows(parents, T, torch.arange(T).repeat(len(parents), 1))
    up[:, 0] = root
    return up


def _masks(parents: list[torch.Tensor], sizes: list[int], T: int, chains: bool) -> torch.Tensor:
    """The ancestor masks [B, T, T] of B parent lists (``chains``: all are chains)."""
    return chain_masks(sizes, T) if chains else ancestor_masks(_parents_up(parents, T, 0))


def _allowed(anc: torch.Tensor, sizes: list[int], lengths: list[int], P: int) -> torch.Tensor:
    """BoolTensor[B, T, P + T], the batch's attention mask with every sequence's rows
    left-aligned (``verify.TreeBatch``'s layout): a node of sequence b sees b's committed
    columns 0 .. lengths[b] - 1, then its tree column j at lengths[b] + j where ``anc``
    [B, T, T] allows it; a padding row sees only its own tree column."""
    B, T = anc.shape[:2]
    if min(lengths) == P:  # every prefix P long: committed columns, then the trees
        return torch.cat([_real_rows(sizes, T)[:, :, None].expand(B, T, P), anc], dim=2)
    seen = torch.arange(P + T)[None, :] < torch.tensor(lengths)[:, None]  # [B, P + T]
    allowed = seen[:, None, :] & _real_rows(sizes, T)[:, :, None]
    cols = (torch.tensor(lengths)[:, None] + torch.arange(T))[:, None, :].expand(B, T, T)
    return allowed.scatter_(2, cols, anc)


def _is_chain_parents(parents: torch.Tensor) -> bool:
    return bool((parents[1:] == torch.arange(parents.numel() - 1)).all())


def batch_masks(trees: list[DraftTree], lengths: list[int], gdn_parents: list[torch.Tensor],
                conv_kernel: int | None = None) -> dict:
    """Every tensor a verify of B trees needs, built for the batch at once: tokens, positions
    LongTensor[B, T] (padding: 0), allowed BoolTensor[B, T, P + T] (``_allowed``: each
    sequence's committed columns, then its tree's), anc, gdn_anc BoolTensor[B, T, T]
    (over the trees' and ``gdn_parents``' ancestors; padding rows see themselves) and windows
    LongTensor[B, T, K] (None without a ``conv_kernel``). T = the largest tree, P = max(lengths)."""
    sizes = [len(t) for t in trees]
    T, P = max(sizes), max(lengths)
    chains = all(t.is_chain for t in trees)
    anc = _masks([t.parents for t in trees], sizes, T, chains)  # [B, T, T]
    if not all(p is t.parents for p, t in zip(gdn_parents, trees)):  # naive: the flattened trees as chains
        chains = all(map(_is_chain_parents, gdn_parents))
        gdn_anc = _masks(gdn_parents, sizes, T, chains)
    else:
        gdn_anc = anc
    windows = None
    if conv_kernel is not None:
        windows = (chain_windows(sizes, T, conv_kernel) if chains
                   else conv_windows(_parents_up(gdn_parents, T, -1), conv_kernel))
    return {"tokens": _padded_rows([t.tokens for t in trees], T),
            "positions": _padded_rows([t.depths + length for t, length in zip(trees, lengths)], T),
            "allowed": _allowed(anc, sizes, lengths, P), "anc": anc,
            "gdn_anc": gdn_anc, "windows": windows}
