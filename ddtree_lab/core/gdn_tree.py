"""Exact tree verification for one Gated DeltaNet (GDN) layer (TreeWY: vLLM RFC
54080, arXiv 2608.20961; docs/background.md section 4).

A draft tree has nodes 0..N in topological order: ``parents`` LongTensor[N+1] with
``parents[0] = -1`` and ``parents[i] < i``; ``depths`` LongTensor[N+1] with ``depths[0] = 0``.
Node i must see exactly what a sequential run over its path root..i would see, starting from
the prefix's cache. Everything here is a pure tensor function over one sequence (no batch),
all heads at once, computing in the dtype of its inputs (float32 or float64).

Conventions are those of transformers' Qwen3.5 ``Qwen3_5GatedDeltaNet`` (pinned by the tests):

* causal depthwise conv (kernel K), eq. (C):  y_t = silu(sum_j W[:, j] * x_{t-K+1+j}),
  the cache ``conv_state`` [C, K] holds the last K pre-conv inputs, oldest first;
* gated delta rule per head, state S [dk, dv], eq. (R):
  S_t = exp(g_t) S_{t-1};  delta_t = beta_t (v_t - S_t^T k_t);  S_t += k_t delta_t^T;
  o_t = S_t^T q_t.

Three exact ways to evaluate (R) on a tree, each with the plain per-path recurrence
``naive.gated_delta`` (``core/naive.py``, the plain twins; not the naive GDN mode) as its oracle:

* fork (``gated_delta_fork``): each node's state is its parent's state after one step of (R);
  depth levels are batched. Memory O(N * H * dk * dv).
* tree WY (``gated_delta_wy``): unrolling (R) along the path of node i, with the path-summed log
  gate G_i = sum_{j in path(i)} g_j, gives
      S_i = e^{G_i} S0 + sum_{j in path(i)} e^{G_i - G_j} k_j u_j^T,                       (W1)
      u_j + beta_j sum_{m strict anc of j} e^{G_j - G_m} (k_j . k_m) u_m
          = beta_j v_j - beta_j e^{G_j} S0^T k_j,                                          (W2)
      o_i = e^{G_i} S0^T q_i + sum_{j in path(i)} e^{G_i - G_j} (q_i . k_j) u_j,           (W3)
  i.e. the chunked (WY/UT) delta rule with the causal mask replaced by the ancestor mask:
  (W2) is one unit-lower-triangular solve (I + A) U = diag(beta) V - diag(beta e^G) K S0.
* naive (the flattened tree read as a chain, the "state leakage" of section 4): any exact mode
  called with ``chain_parents(N)``; it is wrong for every node after the first branch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .tree import ancestor_mask_from_parents


# ----------------------------------------------------------------------------- tree buffers

def chain_parents(n: int) -> torch.Tensor:
    """Parents of a chain with nodes 0..n: [-1, 0, 1, ..., n-1], LongTensor[n+1].

    The naive mode of section 4 is an exact mode called with ``chain_parents(N)`` on a tree of
    N+1 nodes: each node then follows the previous node in sequence order, siblings included.
    """
    return torch.arange(-1, n)


# ----------------------------------------------------------------------------- conv (C)

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


def tree_conv(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
              parents: torch.Tensor) -> torch.Tensor:
    """silu of the depthwise conv (C) over ancestor windows.

    x [N+1, C] pre-conv inputs, conv_state [C, K], weight [C, K] -> [N+1, C].
    """
    K = weight.shape[1]
    rows = torch.cat([conv_state.T, x])  # [K+N+1, C]
    windows = rows[ancestor_windows(parents.cpu(), K).to(rows.device)]  # [N+1, K, C]
    return F.silu((windows * weight.T).sum(1))  # K is 4: a multiply-sum beats einsum's bmm


def commit_conv_state(conv_state: torch.Tensor, x_path: torch.Tensor) -> torch.Tensor:
    """Conv state after accepting a path: conv_state [C, K], x_path [L, C] -> [C, K]."""
    K = conv_state.shape[1]
    return torch.cat([conv_state, x_path.T], dim=1)[:, -K:]


# ----------------------------------------------------------------------------- recurrence (R)

def normalize_qk(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3.5 q/k preprocessing: l2-normalise per head, scale q by dk**-0.5, expand heads.

    q, k [L, nk, dk] (post-conv) -> [L, H, dk] with H = num_heads (repeat_interleave nk -> H).
    """
    def l2norm(x):
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    rep = num_heads // k.shape[1]
    q = l2norm(q) * q.shape[-1] ** -0.5
    return q.repeat_interleave(rep, dim=1), l2norm(k).repeat_interleave(rep, dim=1)


def delta_step(S, q, k, v, g, beta):
    """One step of (R) for any leading batch: S [..., H, dk, dv], q, k [..., H, dk],
    v [..., H, dv], g, beta [..., H] -> (o [..., H, dv], S_new [..., H, dk, dv])."""
    S = S * g.exp()[..., None, None]  # a fresh tensor: the caller's S is never modified
    delta = beta[..., None] * (v - (k[..., None, :] @ S).squeeze(-2))  # [..., H, dv]; S^T k as a matmul
    dk, dv = S.shape[-2:]
    S.view(-1, dk, dv).baddbmm_(k.reshape(-1, dk, 1), delta.reshape(-1, 1, dv))  # S += k delta^T, in place
    return (q[..., None, :] @ S).squeeze(-2), S


def gated_delta_chain(q, k, v, g, beta, S0):
    """Sequential (R) over a chain of L tokens.

    q, k [L, H, dk], v [L, H, dv], g, beta [L, H], S0 [H, dk, dv]
    -> (o [L, H, dv], S_final [H, dk, dv]).
    """
    S, outs = S0, []
    for t in range(q.shape[0]):
        o_t, S = delta_step(S, q[t], k[t], v[t], g[t], beta[t])
        outs.append(o_t)
    return torch.stack(outs) if outs else v.new_zeros(v.shape), S


def gated_delta_fork(q, k, v, g, beta, parents, *, depths, S0):
    """Per-node state fork: node i steps (R) from its parent's state (root from S0).

    One batched ``delta_step`` per depth level; nodes are laid out level by level once
    (a stable sort by depth), so each level reads its parents' states with one gather and
    writes its own as one contiguous slice. Returns o [N+1, H, dv] and states
    [N+1, H, dk, dv] (each node's state after its own update), in node order.
    """
    n, H, dk = k.shape
    parents, depths = parents.cpu(), depths.cpu()  # tree structure on the host, one copy below
    order = torch.argsort(depths, stable=True)  # [N+1] slot -> node, level by level
    slot = torch.empty_like(order)
    slot[order] = torch.arange(n)  # node -> slot
    par = parents[order]
    par_slot = torch.where(par >= 0, slot[par.clamp(min=0)] + 1, torch.zeros_like(par))  # 0 = S0
    states = S0.new_empty(n + 1, H, dk, v.shape[-1])  # [N+2 slots]: 0 = S0, s+1 = slot s
    states[0] = S0
    o = v.new_empty(v.shape)  # [N+1, H, dv] in slot order
    counts = torch.bincount(depths).tolist()
    order, slot, par_slot = (t.to(q.device) for t in (order, slot, par_slot))
    lo = 0
    for count in counts:
        hi, nodes = lo + count, order[lo:lo + count]
        o[lo:hi], states[lo + 1:hi + 1] = delta_step(states.index_select(0, par_slot[lo:hi]), q[nodes],
                                                     k[nodes], v[nodes], g[nodes], beta[nodes])
        lo = hi
    return o.index_select(0, slot), states[1:].index_select(0, slot)


def path_log_gates(g: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """G [N+1, H] float64: G_i = sum of g over path root..i (g [N+1, H], anc [N+1, N+1])."""
    return anc.double() @ g.double()


def pairwise_decay(G: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """D [H, N+1, N+1] = e^{G_i - G_j} where mask[i, j], else 0.

    The difference stays in float64 (cancellation on deep paths); masked entries become -inf
    before exp so that e^{G_i - G_j} of non-ancestors (possibly > 0) cannot overflow.
    """
    diff = G.T[:, :, None] - G.T[:, None, :]  # [H, N+1, N+1] float64
    return diff.masked_fill(~mask, float("-inf")).exp().to(dtype)


def gated_delta_wy(q, k, v, g, beta, parents, *, S0, anc=None, return_aux=False):
    """Tree WY form (W1-W3): all node outputs in one parallel pass, one triangular solve.

    Shapes as ``naive.gated_delta``; anc [N+1, N+1] bool from ``ancestor_mask`` (computed if
    None). Returns o [N+1, H, dv]. No per-node state is formed: commit by replaying the
    accepted path with ``gated_delta_chain``.
    """
    anc = (ancestor_mask_from_parents(parents.cpu()) if anc is None else anc).to(q.device)
    q, k, v = (x.transpose(0, 1) for x in (q, k, v))  # [H, N+1, dk|dv]
    beta, G = beta.T, path_log_gates(g, anc)  # [H, N+1], [N+1, H] float64
    eG = G.T.exp().to(v.dtype)  # [H, N+1]
    D = pairwise_decay(G, anc, v.dtype)  # [H, N+1, N+1], one for both products
    # A is strictly lower: the solve below reads neither its diagonal (unitriangular) nor
    # above it, so D's ones on the diagonal (i == j is its own ancestor) never enter it
    A = beta[..., None] * (k @ k.transpose(1, 2)) * D  # [H, N+1, N+1]
    rhs = beta[..., None] * (v - eG[..., None] * (k @ S0))  # [H, N+1, dv]
    U = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # (I + A) U = rhs
    attn = (q @ k.transpose(1, 2)) * D  # [H, N+1, N+1]
    o = eG[..., None] * (q @ S0) + attn @ U  # [H, N+1, dv]
    if return_aux:  # what ``wy_state`` needs to form any node's state (W1) after the fact
        return o.transpose(0, 1), {"U": U, "G": G, "k": k}
    return o.transpose(0, 1)


def wy_state(aux: dict, S0: torch.Tensor, path: list) -> torch.Tensor:
    """State after the last node of ``path`` (root..i) from the WY pass, by (W1):
    S_i = e^{G_i} S0 + sum_{j in path} e^{G_i - G_j} k_j u_j^T. -> [H, dk, dv].

    aux: U [H, N+1, dv], G [N+1, H] float64, k [H, N+1, dk] from ``gated_delta_wy``.
    """
    U, G, k = aux["U"], aux["G"], aux["k"]
    i = path[-1]
    w = (G[i] - G[path]).exp().to(U.dtype)  # [L, H], differences in float64
    update = torch.einsum("lh,hlk,hlv->hkv", w, k[:, path], U[:, path])
    return G[i].exp().to(U.dtype)[:, None, None] * S0 + update
