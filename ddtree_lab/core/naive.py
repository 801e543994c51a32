"""The plain twins: every fast function of ``core`` outside the recurrent families that has one,
written the slow, obviously correct way, in one module beside the fast ones (as
flash-linear-attention keeps ``naive.py`` beside ``chunk.py``). A recurrent family keeps its own
twins beside its fast form (``families/gdn/naive.py``).

A twin enumerates, loops per node, per tree or per sequence, or replays token by token; it is
the specification its fast function is tested against (each pair in ``core/tests``, bit for bit
or to a tolerance), and it is only usable on tiny cases where it enumerates. Its name is the
fast function's without a suffix; a method's twin is a plain function taking the object first.
This module imports the fast modules for their types and helpers; no fast module imports it
(``core/tests/test_naive.py``), so nothing here runs in the decoding loop.

=====================================  ==================================================
twin                                   fast function
=====================================  ==================================================
``build_tree`` (brute force)           ``tree.build_tree`` (best-first heap)
``ancestor_mask``                      ``tree.ancestor_mask``
``accept`` (every root path)           ``tree.accept``
``batch_buffers`` (per tree, padded)   ``verify.batch_buffers``
``tree_logits`` (a forward per node)   ``verify.tree_logits``
``commit`` (replay)                    ``verify.commit``
``allocate_budgets`` (every vector)    ``allocate.allocate_budgets``
``scores`` (one row at a time)         ``conditional.ConditionalDraft.scores``
``ranked_children`` (no table, memo)   ``conditional.ConditionalDraft.ranked_children``
``build_conditional_tree`` (all paths) ``conditional.build_conditional_tree``
``propose`` (a ``DynamicCache``)       ``drafter.DFlashDrafter.draft`` (its logits)
=====================================  ==================================================

One fast function needs its twin's work at run time, so that work stays in the fast module
(importing this one there would be a cycle): ``ConditionalDraft.scores_alone`` (the root's row
of scores, computed on its own), whose formula ``scores`` here writes out.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from .allocate import _check_allocation_args, _verify_tokens
from .conditional import ConditionalDraft, _check, _ranked, _tree, selector_scores
from .drafter import DFlashDrafter
from .families.gdn import wy
from .families.gdn.naive import replay_gdn
from .tree import DraftTree, _check_int, _check_logits, _log_normaliser, _pack, ancestor_windows
from .verify import BatchBuffers, TreeBuffers, TreeCache, _accept_rows, full_forward_logits, tree_buffers


# ----------------------------------------------------------------------------- tree

def build_tree(draft_logits: torch.Tensor, root_token: int, budget: int) -> DraftTree:
    """Brute-force twin of ``tree.build_tree``: score all sum_d V^d prefixes, sort, keep ``budget``.

    draft_logits [L, V]. Only usable for tiny L and V (it enumerates V^L paths). Sorting by
    (-log weight, rank path) is already topological (see ``tree``'s module docstring), so no
    reordering is needed.
    """
    logits = _check_logits(draft_logits)  # [L, V]
    root_token = _check_int("root_token", root_token, 0, logits.shape[1] - 1)
    budget = _check_int("budget", budget, 1)
    log_probs = (logits.double() - _log_normaliser(logits)).tolist()  # [L][V]
    ranked = [sorted(range(len(row)), key=lambda t, row=row: (-row[t], t)) for row in logits.tolist()]
    prefixes = []  # (-log weight, rank path)
    for depth in range(1, len(log_probs) + 1):
        for path in itertools.product(range(len(ranked[0])), repeat=depth):
            weight = 0.0
            for d, rank in enumerate(path):
                weight += log_probs[d][ranked[d][rank]]
            prefixes.append((-weight, path))
    best = sorted(prefixes)[:budget]
    index = {path: i for i, (_, path) in enumerate(best, start=1)}
    index[()] = 0
    return _pack(
        root_token,
        tokens=[ranked[len(path) - 1][path[-1]] for _, path in best],
        parents=[index[path[:-1]] for _, path in best],
        depths=[len(path) for _, path in best],
        weights=[-neg for neg, _ in best],
    )


def ancestor_mask(tree: DraftTree) -> torch.Tensor:
    """Plain twin of ``tree.ancestor_mask``: mark each node's root path, one node at a time
    -> BoolTensor[N+1, N+1]."""
    mask = torch.zeros(len(tree), len(tree), dtype=torch.bool)
    for node in range(len(tree)):
        mask[node, tree.path_to(node)] = True
    return mask


def accept(tree: DraftTree, target_choice: torch.Tensor) -> tuple[list[int], int]:
    """``tree.accept``'s plain twin: the longest root path on which every node's token is the
    target's choice at its parent, found among all root paths. target_choice LongTensor[N+1]
    -> (path, bonus)."""
    choice = target_choice.tolist()
    paths = [tree.path_to(i) for i in range(len(tree))]
    valid = [p for p in paths if all(int(tree.tokens[c]) == choice[a] for a, c in zip(p, p[1:]))]
    path = max(valid, key=len)
    return path, int(choice[path[-1]])


# ----------------------------------------------------------------------------- verify

def batch_buffers(trees: list[DraftTree], lengths: list[int], gdn_mode="wy",
                  conv_kernel: int | None = None, packed: bool = True) -> BatchBuffers:
    """``verify.batch_buffers``' plain twin: each tree's ``verify.tree_buffers``, padded into the
    batch (tokens, positions [B, T], allowed [B, T, Pmax + T], gdn_anc [B, T, T], windows
    [B, T, K]; rows [N] when packed and the sizes differ)."""
    per_tree = [tree_buffers(t, n, gdn_mode) for t, n in zip(trees, lengths)]
    sizes = [len(t) for t in trees]
    tokens, positions = _padded([t.tokens for t in trees]), _padded([buf.positions for buf in per_tree])
    gdn = conv_kernel is not None
    gdn_anc = _padded_masks([buf.gdn_anc for buf in per_tree], max(sizes)) if gdn else None
    windows = _conv_windows(per_tree, conv_kernel) if gdn else None
    T = max(sizes)
    rows = None if min(sizes) == T or not packed else torch.tensor([b * T + i for b, n in enumerate(sizes)
                                                                    for i in range(n)])
    return BatchBuffers(sizes, max(lengths), tokens, positions, _batch_allowed(per_tree, lengths),
                        gdn_anc, windows, per_tree, rows)


def _padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """1-D LongTensors of lengths n_b -> [B, max n_b], zeros after each row."""
    if len(rows) == 1:
        return rows[0][None]
    out = torch.zeros(len(rows), max(r.numel() for r in rows), dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, :r.numel()] = r
    return out


def _padded_masks(masks: list[torch.Tensor], T: int) -> torch.Tensor:
    """[n_b, n_b] bool masks -> [B, T, T]; padding rows see themselves only."""
    if len(masks) == 1:
        return masks[0][None]
    out = torch.eye(T, dtype=torch.bool).repeat(len(masks), 1, 1)
    for b, m in enumerate(masks):
        out[b, :m.shape[0], :m.shape[0]] = m
    return out


def _batch_allowed(per_tree: list[TreeBuffers], lengths: list[int]) -> torch.Tensor:
    """BoolTensor[B, T, Pmax + T], every sequence's rows left-aligned (``verify.TreeBatch``): row i
    of sequence b sees b's committed columns 0 .. lengths[b] - 1 and, at lengths[b] + j, its tree
    column j where j is i or an ancestor of i; a padding row sees only its own tree column."""
    T, P = max(buf.anc.shape[0] for buf in per_tree), max(lengths)
    allowed = torch.zeros(len(per_tree), T, P + T, dtype=torch.bool)
    for b, (buf, length) in enumerate(zip(per_tree, lengths)):
        n = buf.anc.shape[0]
        allowed[b, :n, :length] = True
        allowed[b, :n, length:length + n] = buf.anc
        allowed[b, range(n, T), range(length + n, length + T)] = True
    return allowed


def _conv_windows(per_tree: list[TreeBuffers], K: int) -> torch.Tensor:
    """LongTensor[B, T, K]: ``tree.ancestor_windows`` of every tree (over the GDN parents),
    padded; a padding node's window is itself K times."""
    T = max(buf.gdn_parents.numel() for buf in per_tree)
    out = (K + torch.arange(T))[None, :, None].repeat(len(per_tree), 1, K)
    for b, buf in enumerate(per_tree):
        out[b, :buf.gdn_parents.numel()] = ancestor_windows(buf.gdn_parents.cpu(), K)
    return out


def tree_logits(model, prefix_ids, tree: DraftTree) -> torch.Tensor:
    """``verify.tree_logits``' plain twin [N+1, V]: row i = a stock forward (no cache, no mask) of
    prefix + the tokens of root .. i, one forward per node."""
    prefix, tokens = [int(t) for t in prefix_ids], tree.tokens.tolist()
    return torch.stack([full_forward_logits(model, prefix + [tokens[j] for j in tree.path_to(i)])
                        for i in range(len(tree))])


# ----------------------------------------------------------------------------- verify (commit)

@torch.no_grad()
def commit(model, cache: TreeCache, pending, path) -> None:
    """``verify.commit``'s plain twin: each GDN layer's state replayed token by token along the
    path from the pre-verify state (``gdn.naive.replay_gdn``)."""
    idx, pending = _accept_rows(model, cache, pending, path)
    mods = wy.gdn_modules(model)
    for i, rec in pending.gdn.items():
        at = idx.to(rec.x.device)
        cache.conv[i], cache.rec[i] = replay_gdn(mods[i], rec.x[at], rec.a[at], rec.b[at],
                                                 cache.conv[i], cache.rec[i])
    cache.length += idx.numel()
    cache.serial += 1


# ----------------------------------------------------------------------------- allocate

def allocate_budgets(gains: list[torch.Tensor], seconds: torch.Tensor, padded: bool = True) -> list[int]:
    """``allocate.allocate_budgets``' plain twin: every budget vector (1..N_b each) scored as
    (B + sum of each sequence's first budget_b gains) / seconds[verify tokens - 1]; the best
    one (among equal rates the fewest verify tokens, then the first in product order).
    gains: B tensors [N_b]; seconds [>= v_max] -> B budgets. Tiny cases only."""
    _check_allocation_args(gains, seconds, padded)
    best, best_key = None, None
    for budgets in itertools.product(*(range(1, g.numel() + 1) for g in gains)):
        tokens = len(gains) + sum(math.fsum(g[:k].tolist()) for g, k in zip(gains, budgets))
        v = _verify_tokens(budgets, padded)
        key = (tokens / float(seconds[v - 1]), -v)
        if best_key is None or key > best_key:
            best, best_key = list(budgets), key
    return best


# ----------------------------------------------------------------------------- conditional

def scores(draft: ConditionalDraft, parent_token: int, depth: int) -> torch.Tensor:
    """[K] float64: s_d(candidates[depth - 1] | parent_token), the selector's scores, one
    (parent, depth) at a time (the plain twin of ``ConditionalDraft.scores``, which reads a
    row of its [K, K] tables)."""
    d = depth - 1
    return selector_scores(draft.unary[d].double(), draft.hidden[d].double(),
                           draft.predecessor[parent_token].double(), draft.successor[draft.candidates[d]].double())


def ranked_children(draft: ConditionalDraft, parent_token: int, depth: int) -> tuple[list[int], list[float]]:
    """``ConditionalDraft.ranked_children`` from ``scores`` (no table, no memo): (tokens, log q)
    of depth ``depth``'s K candidates given the parent, best first."""
    return _ranked(draft.candidates[depth - 1].tolist(),
                   torch.log_softmax(scores(draft, parent_token, depth), -1))


def build_conditional_tree(draft: ConditionalDraft, root_token: int, budget: int) -> DraftTree:
    """Brute-force twin of ``conditional.build_conditional_tree``: every path of up to L ranks
    (K^L of them), weighed by the product of its conditional q (each computed on its own,
    ``scores``), sorted by (-log weight, rank path), the first ``budget`` kept. Tiny K and L only."""
    _check(draft, root_token, budget)
    k = draft.candidates.shape[1]
    paths = {(): (root_token, 0.0)}  # rank path -> (token, log weight)
    for depth in range(1, draft.depth + 1):
        for path in itertools.product(range(k), repeat=depth):
            token, weight = paths[path[:-1]]
            tokens, logq = ranked_children(draft, token, depth)
            paths[path] = (tokens[path[-1]], weight + logq[path[-1]])
    best = sorted((-w, path) for path, (_, w) in paths.items() if path)[:budget]
    index = {(): 0} | {path: i for i, (_, path) in enumerate(best, start=1)}
    return _tree([root_token] + [paths[p][0] for _, p in best], [-1] + [index[p[:-1]] for _, p in best],
                 [0] + [len(p) for _, p in best], [0.0] + [-n for n, _ in best])


# ----------------------------------------------------------------------------- drafter

@torch.no_grad()
def propose(drafter: DFlashDrafter, cache, new_features: torch.Tensor, last_token: int,
            block_size: int) -> torch.Tensor:
    """Twin of ``DFlashDrafter.draft`` (its logits): ``dflash_generate``'s own drafting step. The
    published model runs on a transformers ``DynamicCache`` holding the context K/V (``cache``),
    which is cropped back to the context after the block. new_features [n, F]
    -> logits [block_size - 1, V]."""
    block_size = drafter._check_block_size(block_size)
    dev, past = drafter.device, cache.get_seq_length()
    context = past + new_features.shape[0]
    ids = drafter._block_ids(torch.tensor([last_token], device=dev), block_size)  # [1, bs]
    hidden = drafter.model(position_ids=torch.arange(past, context + block_size, device=dev)[None],
                           noise_embedding=drafter.embed(ids), past_key_values=cache, use_cache=True,
                           target_hidden=new_features.to(dev, drafter.model.fc.weight.dtype)[None])
    cache.crop(context - cache.get_seq_length())  # a negative crop, as dflash_generate's
    return drafter.logits(hidden[0, 1:])
