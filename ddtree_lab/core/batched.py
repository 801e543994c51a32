"""The batched round's pieces in one pass over the batch (issue 29).

Under load a round verifies B trees at once (``verify.verify_batch``). Each function here
computes one piece of that round for the whole batch at once, with no Python loop over the
sequences and no ``torch.vmap``; its plain twin, named in its docstring, does it per tree
(core/tests/test_batched.py tests each pair equal):

- ``batch_masks``: the tokens, positions, attention and GDN ancestor masks and conv windows of
  B trees (``verify.batch_buffers`` wraps it; twin: ``naive.batch_buffers``);
- ``gated_delta_wy``: the tree WY pass (W1-W3) over any leading batch dims
  (``gdn_layer.gated_delta_wy_batch``; twin: ``gdn_tree.gated_delta_wy`` per tree);
- ``tree_conv``: the tree conv of B trees through one ``index_select`` over the flattened rows
  (``gdn_layer.tree_conv_batch``; twin: ``naive.tree_conv_batch``);
- ``wy_states``: the accepted nodes' recurrent states (W1) of every sequence of one layer in
  one matmul, and ``conv_states_at`` their conv windows, from one ``path_rows`` index
  (``cache.commit_batch`` runs them once over every layer of the batch; twins:
  ``gdn_tree.wy_state`` and ``gdn_tree.commit_conv_state`` per sequence);
- ``packed_rows``, ``pack``, ``unpack``: the packed layout of a verify of trees of different
  sizes (issue 29 item 4): the trees' rows side by side, no padding, for every row-wise piece
  of the forward (embeddings, projections, MLP and experts, the head); attention and the GDN
  layers unpack them to [B, T] per sequence and pack their output back (twin: the padded
  layout itself, ``verify.verify_batch`` against per-sequence ``verify``).

It imports only ``torch``: the modules that build the loop's types (``verify``, ``cache``,
``gdn_layer``) import it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .tree import DraftTree


# ----------------------------------------------------------------------------- buffers

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
    (``gdn_tree.ancestor_windows`` of every tree at once). ``up`` as ``ancestor_masks`` takes it,
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


# ----------------------------------------------------------------------------- the GDN layer

def gated_delta_wy(q, k, v, g, beta, S0, *, anc):
    """The tree WY pass (W1-W3) of ``gdn_tree.gated_delta_wy`` over leading batch dims ``...``.

    q, k [..., T, H, dk], v [..., T, H, dv], g, beta [..., T, H], S0 [..., H, dk, dv],
    anc [..., T, T] bool -> (o [..., T, H, dv], aux {"U": [..., H, T, dv], "G": [..., T, H]
    float64, "k": [..., H, T, dk]}), as ``gdn_tree.gated_delta_wy(..., return_aux=True)`` returns them per tree.
    """
    q, k, v = (x.transpose(-3, -2) for x in (q, k, v))  # [..., H, T, d]
    beta = beta.transpose(-1, -2)  # [..., H, T]
    G = anc.to(g.device).double() @ g.double()  # [..., T, H]: path sums of the log gates
    Gt = G.transpose(-1, -2)  # [..., H, T]
    eG = Gt.exp().to(v.dtype)
    D = (Gt[..., :, None] - Gt[..., None, :]).masked_fill(~anc.to(g.device)[..., None, :, :], float("-inf"))
    D = D.exp().to(v.dtype)  # [..., H, T, T], differences in float64, non-ancestors -inf before exp
    A = beta[..., None] * (k @ k.transpose(-1, -2)) * D  # strictly lower part read by the solve
    rhs = beta[..., None] * (v - eG[..., None] * (k @ S0))
    U = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # (I + A) U = rhs
    o = eG[..., None] * (q @ S0) + ((q @ k.transpose(-1, -2)) * D) @ U  # [..., H, T, dv]
    return o.transpose(-3, -2), {"U": U, "G": G, "k": k}


def tree_conv(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
              windows: torch.Tensor) -> torch.Tensor:
    """``gdn_tree.tree_conv`` of B trees through one ``index_select`` over the flattened rows:
    x [B, T, C], conv_state [B, C, K], weight [C, K], windows [B, T, K] -> silu(conv) [B, T, C]."""
    B, T, C = x.shape
    K = weight.shape[1]
    rows = torch.cat([conv_state.transpose(1, 2), x], dim=1).reshape(B * (K + T), C)
    flat = (windows.to(x.device) + (K + T) * torch.arange(B, device=x.device)[:, None, None]).reshape(-1)
    picked = rows.index_select(0, flat).view(B, T, K, C)
    return F.silu((picked * weight.T).sum(2))


# ----------------------------------------------------------------------------- the commit

@dataclass(frozen=True, eq=False)
class PathRows:
    """B accepted paths as one index, shared by every GDN layer of a commit (``path_rows``):
    idx [B, L] node ids, a shorter path padded by its own last node; lens [B] path lengths;
    pad [B, L] bool, true on the padding (None when every path has length L)."""
    idx: torch.Tensor
    lens: torch.Tensor
    pad: torch.Tensor | None

    def repeat(self, n: int) -> "PathRows":
        """The same B paths n times over ([n x B, L]: the layers of a commit side by side)."""
        return PathRows(self.idx.repeat(n, 1), self.lens.repeat(n), None if self.pad is None else self.pad.repeat(n, 1))


def path_rows(paths: list[torch.Tensor], device=None) -> PathRows:
    """``PathRows`` of B LongTensor paths (root .. accepted node), on ``device``."""
    lens = [p.numel() for p in paths]
    L = max(lens)
    idx = torch.stack([p if n == L else torch.cat([p, p[-1:].expand(L - n)]) for p, n in zip(paths, lens)])
    lens_t = torch.tensor(lens)
    pad = (torch.arange(L)[None, :] >= lens_t[:, None]).to(device) if min(lens) < L else None
    return PathRows(idx.to(device), lens_t.to(device), pad)


def wy_states(U, G, k, S0, paths: list[torch.Tensor]) -> torch.Tensor:
    """The recurrent state after the last node of each sequence's accepted path, by (W1),
    for B sequences of one layer at once: S_b = e^{G_b[i]} S0_b + sum over j in path_b of
    e^{G_b[i] - G_b[j]} k_b[j] u_b[j]^T, i = path_b[-1] (twin: ``gdn_tree.wy_state`` per sequence).

    U [B, H, T, dv], G [B, T, H] float64, k [B, H, T, dk] (``gated_delta_wy``'s aux),
    S0 [B, H, dk, dv], paths: B LongTensors (root .. accepted node) -> [B, H, dk, dv].
    ``wy_states_at`` with the paths' ``path_rows``."""
    return wy_states_at(U, G, k, S0, path_rows(paths, U.device))


def wy_states_at(U, G, k, S0, rows: PathRows) -> torch.Tensor:
    """``wy_states`` of the paths ``rows`` (``path_rows``, made once per commit): only the
    paths' rows are read (one gather each of G, k and U); a padding node is weighted 0."""
    B, H, _, dv = U.shape
    Gp = G.gather(1, rows.idx[:, :, None].expand(-1, -1, H))  # [B, L, H]
    last = Gp[:, -1]  # [B, H]: every row ends on its path's last node
    diff = last[:, None, :] - Gp  # [B, L, H], in float64
    if rows.pad is not None:
        diff = diff.masked_fill(rows.pad[:, :, None], float("-inf"))
    at = rows.idx[:, None, :, None]  # [B, 1, L, 1]
    kp = k.gather(2, at.expand(-1, H, -1, k.shape[-1]))  # [B, H, L, dk]
    Up = U.gather(2, at.expand(-1, H, -1, dv))  # [B, H, L, dv]
    weighted = kp * diff.exp().to(U.dtype).transpose(1, 2)[..., None]  # [B, H, L, dk]
    return last.exp().to(U.dtype)[:, :, None, None] * S0 + weighted.transpose(-1, -2) @ Up


def conv_states_at(conv_state: torch.Tensor, x: torch.Tensor, rows: PathRows) -> torch.Tensor:
    """Every sequence's conv state after its accepted path, at once: conv_state [B, C, K],
    x [B, T, C] the tree's pre-conv inputs -> [B, C, K], the last K columns of [conv_state,
    x[path_b]^T] (twin: ``gdn_tree.commit_conv_state`` per sequence)."""
    B, C, K = conv_state.shape
    xp = x.gather(1, rows.idx[:, :, None].expand(-1, -1, C))  # [B, L, C]
    cols = torch.cat([conv_state, xp.transpose(1, 2)], dim=2)  # [B, C, K + L]
    tail = rows.lens[:, None] + torch.arange(K, device=conv_state.device)  # [B, K]: the K columns before each path's end
    return cols.gather(2, tail[:, None, :].expand(-1, C, -1))
