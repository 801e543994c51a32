"""Gated DeltaNet (GDN) on draft trees, the fast form: the one-pass tree WY, the layer over a
batch of trees, and the commit (issue 65: one family, one place; its plain twin is ``naive.py``
beside it, as flash-linear-attention keeps ``ops/<op>/naive.py`` beside ``chunk.py``).

Gated DeltaNet: arXiv 2412.06464 (the gated delta rule); tree verification: TreeWY (vLLM RFC
54080, arXiv 2608.20961; docs/background.md section 4). Conventions are transformers'
``Qwen3_5GatedDeltaNet`` (pinned by the tests):

* causal depthwise conv (kernel K), eq. (C):  y_t = silu(sum_j W[:, j] * x_{t-K+1+j}); the
  state ``conv_state`` [C, K] holds the last K pre-conv inputs, oldest first;
* gated delta rule per head, state S [dk, dv], eq. (R):
  S_t = exp(g_t) S_{t-1};  delta_t = beta_t (v_t - S_t^T k_t);  S_t += k_t delta_t^T;  o_t = S_t^T q_t.

On a tree (nodes 0..N in topological order, ``parents[0] = -1``) node i must see exactly what a
sequential run over its path root..i sees. Unrolling (R) along that path with the path-summed
log gate G_i = sum_{j in path(i)} g_j gives the tree WY form (``gated_delta_wy``):

    S_i = e^{G_i} S0 + sum_{j in path(i)} e^{G_i - G_j} k_j u_j^T,                       (W1)
    u_j + beta_j sum_{m strict anc of j} e^{G_j - G_m} (k_j . k_m) u_m
        = beta_j v_j - beta_j e^{G_j} S0^T k_j,                                          (W2)
    o_i = e^{G_i} S0^T q_i + sum_{j in path(i)} e^{G_i - G_j} (q_i . k_j) u_j,           (W3)

the chunked (WY/UT) delta rule with the causal mask replaced by the ancestor mask: (W2) is one
unit-lower-triangular solve. ``gated_delta_fork`` (each node's state from its parent's by one step of
(R), ``delta_step``, depth levels batched) is the fork mode's form. The verification mode
(``spec.GdnMode``: naive / fork / wy) picks the parents the layer sees and, here, the maths
(``core``, ``core_batch``, ``state``).

The stock classes differ only in where the projections, gates and output norm live
(``LAYOUTS``): Qwen3.5 / Qwen3.5-MoE (fused q|k|v, ``in_proj_z``, ``in_proj_a`` / ``in_proj_b``,
``norm``, ``out_proj``), Qwen3-Next (q|k|v|z and b|a fused per key-head group, unfused by its
own ``fix_query_key_value_ordering``) and OLMo-hybrid (separate q/k/v/a/b/g projections, the
gated norm ``o_norm``; beta = 2 sigmoid(b) with ``linear_allow_neg_eigval``). Every class keeps
ONE conv state and ONE recurrent state per layer (index 0 of the stock ``LinearAttentionLayer``).
The batched layer (``tree_layer_batch``, what the decoding loop runs) covers ``BATCHED_CLASSES``;
OLMo-hybrid's layers run the protocol's per-sequence ``tree`` / ``commit``.

Precision: the stock kernels compute the conv output's q/k/v, the gates and the recurrence in
float32 even in a float64 model; ``gdn_qkv`` / ``gdn_gates`` mirror that through
``kernel_dtype`` (swapped for the identity by ``harness.float64_harness``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as qwen35moe
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3next

from ...tree import ancestor_mask_from_parents, ancestor_windows, pack, unpack

# the stock Gated DeltaNet layer classes the tree paths run (``models.layer_kinds`` reads
# their names); Qwen3.5-MoE's is Qwen3.5's code under another name, Qwen3-Next's differs only
# in its fused input projections (``gdn_project``)
GDN_CLASSES = (qwen35.Qwen3_5GatedDeltaNet, qwen35moe.Qwen3_5MoeGatedDeltaNet, qwen3next.Qwen3NextGatedDeltaNet)


def gdn_project(m, h: torch.Tensor):
    """h [T, D] -> x [T, C] (pre-conv q|k|v), z [T, H, dv], a [T, H], b [T, H].

    Qwen3-Next fuses q|k|v|z and b|a per key-head group (``in_proj_qkvz``, ``in_proj_ba``):
    its own ``fix_query_key_value_ordering`` unfuses them, and q|k|v are concatenated as its
    forward does before the conv."""
    if hasattr(m, "in_proj_qkvz"):
        q, k, v, z, b, a = m.fix_query_key_value_ordering(m.in_proj_qkvz(h)[None], m.in_proj_ba(h)[None])
        x = torch.cat([t[0].reshape(h.shape[0], -1) for t in (q, k, v)], dim=-1)
        return x, z[0], a[0], b[0]
    return (m.in_proj_qkv(h), m.in_proj_z(h).reshape(h.shape[0], -1, m.head_v_dim),
            m.in_proj_a(h), m.in_proj_b(h))


def gdn_conv_weight(m) -> torch.Tensor:
    """[C, K] depthwise causal conv weight (no bias in Qwen3.5)."""
    return m.conv1d.weight.squeeze(1)


def gdn_qkv(m, y: torch.Tensor):
    """Post-conv y [T, C] -> q, k [T, H, dk] (l2-normalised, q scaled, expanded to H value
    heads) and v [T, H, dv], as transformers' kernels see them."""
    T = y.shape[0]
    y = y.to(kernel_dtype(y.dtype))  # as the stock kernels see it
    q, k, v = torch.split(y, [m.key_dim, m.key_dim, m.value_dim], dim=-1)
    q, k = normalize_qk(q.reshape(T, m.num_k_heads, m.head_k_dim),
                                 k.reshape(T, m.num_k_heads, m.head_k_dim), m.num_v_heads)
    return q, k, v.reshape(T, m.num_v_heads, m.head_v_dim)


def gdn_gates(m, a: torch.Tensor, b: torch.Tensor):
    """a, b [T, H] -> log decay g [T, H] and beta [T, H], computed as transformers does.

    g is float32 even in a float64 model (the stock layer casts ``a``); the harness keeps that
    cast, since the stock full forward it is compared with keeps it too.
    """
    g = -m.A_log.float().exp() * F.softplus(a.float() + m.dt_bias)
    dtype = kernel_dtype(a.dtype)
    return g.to(dtype), b.sigmoid().to(dtype)


def gdn_output(m, o: torch.Tensor, z: torch.Tensor, dtype) -> torch.Tensor:
    """o [T, H, dv], z [T, H, dv] -> the layer output [T, D]."""
    o = m.norm(o.to(dtype).reshape(-1, m.head_v_dim), z.reshape(-1, m.head_v_dim))
    return m.out_proj(o.reshape(z.shape[0], -1))


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype transformers' GDN kernels compute in for a model of ``dtype``: float32 always
    (the stock layer casts). ``harness.float64_harness`` swaps this for the identity, with the
    kernels themselves."""
    return torch.float32


CLASS_NAMES = ("Qwen3_5GatedDeltaNet", "Qwen3_5MoeGatedDeltaNet", "Qwen3NextGatedDeltaNet",
               "OlmoHybridGatedDeltaNet")


IDX = 0  # every GDN class keeps its one conv / recurrent state at index 0 of the stock cache layer


@dataclass(frozen=True)
class Layout:
    """Where one GDN class keeps its pieces (all take m, the stock mixer):
    project(m, h [T, D]) -> x [T, C] pre-conv q|k|v, z [T, H, dv] output gate, a, b [T, H];
    gates(m, a, b) -> g [T, H] log decay, beta [T, H];
    output(m, o [T, H, dv], z [T, H, dv], dtype) -> [T, D]."""
    project: Callable
    gates: Callable
    output: Callable


def _olmo_project(m, h: torch.Tensor):
    """OLMo-hybrid: h [T, D] -> x [T, C] (q|k|v concatenated as its forward does), z [T, H, dv]
    (``g_proj``, the output gate), a [T, H], b [T, H]."""
    x = torch.cat([m.q_proj(h), m.k_proj(h), m.v_proj(h)], dim=-1)
    return x, m.g_proj(h).reshape(h.shape[0], -1, m.head_v_dim), m.a_proj(h), m.b_proj(h)


def _olmo_gates(m, a: torch.Tensor, b: torch.Tensor):
    """OLMo-hybrid: Qwen3.5's g, and beta doubled where negative eigenvalues are allowed."""
    g, beta = gdn_gates(m, a, b)  # g = -e^{A_log} softplus(a + dt_bias), as Qwen3.5's
    return g, (2.0 * beta if m.allow_neg_eigval else beta)


def _olmo_output(m, o: torch.Tensor, z: torch.Tensor, dtype) -> torch.Tensor:
    """OLMo-hybrid: ``gdn_output`` under its own names (``o_norm``, ``o_proj``)."""
    names = SimpleNamespace(norm=m.o_norm, out_proj=m.o_proj, head_v_dim=m.head_v_dim)
    return gdn_output(names, o, z, dtype)


QWEN = Layout(gdn_project, gdn_gates, gdn_output)


LAYOUTS = {"Qwen3_5GatedDeltaNet": QWEN, "Qwen3_5MoeGatedDeltaNet": QWEN, "Qwen3NextGatedDeltaNet": QWEN,
           "OlmoHybridGatedDeltaNet": Layout(_olmo_project, _olmo_gates, _olmo_output)}


def layout(m) -> Layout:
    """The ``Layout`` of stock mixer m (its class or a base class), after checking what the lab's
    conv assumes: silu activation, no conv bias."""
    if m.activation not in ("silu", "swish") or m.conv1d.bias is not None:
        raise NotImplementedError(f"{type(m).__name__}: conv activation {m.activation!r} / conv bias")
    for cls in type(m).__mro__:
        if cls.__name__ in LAYOUTS:
            return LAYOUTS[cls.__name__]
    raise TypeError(f"not a Gated DeltaNet mixer: {type(m).__name__}")


def _inputs(m, h: torch.Tensor, conv_state: torch.Tensor, parents: torch.Tensor):
    """Everything before the recurrence, on a tree (a chain of one for ``step``): h [n, D] ->
    x [n, C] pre-conv, q, k [n, H, dk], v [n, H, dv], g, beta [n, H], z [n, H, dv]."""
    lay = layout(m)
    x, z, a, b = lay.project(m, h)
    y = tree_conv(x, conv_state, gdn_conv_weight(m), parents)  # [n, C], silu'd
    q, k, v = gdn_qkv(m, y)
    g, beta = lay.gates(m, a, b)
    return x, q, k, v, g, beta, z


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The one-pass tree forward: ancestor-window conv + tree WY. h [n, D], parents [n],
    anc [n, n] -> (out [n, D], record for ``commit``)."""
    conv, S0 = state["conv"][IDX], state["rec"][IDX]
    x, q, k, v, g, beta, z = _inputs(m, h, conv, parents)
    S0k = S0.to(v.dtype)  # [H, dk, dv] in the kernel dtype
    o, aux = gated_delta_wy(q, k, v, g, beta, parents, S0=S0k, anc=anc, return_aux=True)  # [n, H, dv]
    out = layout(m).output(m, o, z, h.dtype)  # [n, D]
    return out, {"x": x, "conv": conv, "S0": S0k, "rec_dtype": S0.dtype, "aux": aux}


def commit(m, record: dict, path: list) -> dict:
    """The state after the last node of ``path`` (root..node): conv from the path's pre-conv
    inputs, recurrent state by (W1) from the WY pass (``wy_state``)."""
    x = record["x"][torch.as_tensor(path, device=record["x"].device)]  # [L, C]
    S = wy_state(record["aux"], record["S0"], list(path))  # [H, dk, dv]
    return {"conv": {IDX: commit_conv_state(record["conv"], x)}, "rec": {IDX: S.to(record["rec_dtype"])}}


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

    Shapes as ``gdn.naive.gated_delta``; anc [N+1, N+1] bool from ``ancestor_mask`` (computed if
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


def gated_delta_wy_batch(q, k, v, g, beta, S0, *, anc):
    """The tree WY pass (W1-W3) of ``gated_delta_wy`` over leading batch dims ``...``.

    q, k [..., T, H, dk], v [..., T, H, dv], g, beta [..., T, H], S0 [..., H, dk, dv],
    anc [..., T, T] bool -> (o [..., T, H, dv], aux {"U": [..., H, T, dv], "G": [..., T, H]
    float64, "k": [..., H, T, dk]}), as ``gated_delta_wy(..., return_aux=True)`` returns them per tree.
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


def tree_conv_batch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                    windows: torch.Tensor) -> torch.Tensor:
    """``tree_conv`` of B trees through one ``index_select`` over the flattened rows:
    x [B, T, C], conv_state [B, C, K], weight [C, K], windows [B, T, K] -> silu(conv) [B, T, C]."""
    B, T, C = x.shape
    K = weight.shape[1]
    rows = torch.cat([conv_state.transpose(1, 2), x], dim=1).reshape(B * (K + T), C)
    flat = (windows.to(x.device) + (K + T) * torch.arange(B, device=x.device)[:, None, None]).reshape(-1)
    picked = rows.index_select(0, flat).view(B, T, K, C)
    return F.silu((picked * weight.T).sum(2))


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
    e^{G_b[i] - G_b[j]} k_b[j] u_b[j]^T, i = path_b[-1] (twin: ``wy_state`` per sequence).

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
    x[path_b]^T] (twin: ``commit_conv_state`` per sequence)."""
    B, C, K = conv_state.shape
    xp = x.gather(1, rows.idx[:, :, None].expand(-1, -1, C))  # [B, L, C]
    cols = torch.cat([conv_state, xp.transpose(1, 2)], dim=2)  # [B, C, K + L]
    tail = rows.lens[:, None] + torch.arange(K, device=conv_state.device)  # [B, K]: the K columns before each path's end
    return cols.gather(2, tail[:, None, :].expand(-1, C, -1))


@dataclass(frozen=True, eq=False)
class GdnRecord:
    """What one GDN layer's tree forward leaves for the commit: pre-conv inputs x [N+1, C] and
    raw gates a, b [N+1, H] (enough to replay any path, ``gdn.naive.replay_gdn``), plus either the
    per-node states [N+1, H, dk, dv] (fork) or the WY pass's {U, G, k} and S0 (wy / naive).
    batch: (the batch's record, i) when this is row i of one batched WY pass (``row``), whose
    fields hold every sequence's at once (x [B, T, C], U [B, H, T, dv], ..., S0 [B, H, dk, dv]):
    ``commit_layers`` (via ``commit_batch_layers``) reads the batch's tensors, with no stacking."""
    x: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    states: torch.Tensor | None = None
    wy: dict | None = None
    S0: torch.Tensor | None = None
    batch: tuple | None = None

    def row(self, i: int, n: int) -> "GdnRow":
        """Sequence i's record (its first n rows) of this batch record of a WY pass."""
        return GdnRow(self, i, n)


@dataclass(frozen=True, eq=False)
class GdnRow:
    """Sequence i's ``GdnRecord`` (its first n rows) of a batch record ``whole`` of one WY pass:
    the same fields, each cut from the batch's tensors when first read (a batched commit reads
    none of them: ``commit_layers`` takes the batch's tensors, ``batch``)."""
    whole: GdnRecord
    i: int
    n: int
    states: None = None

    @property
    def batch(self) -> tuple:
        return self.whole, self.i

    @functools.cached_property
    def x(self) -> torch.Tensor:
        return self.whole.x[self.i, :self.n]

    @functools.cached_property
    def a(self) -> torch.Tensor:
        return self.whole.a[self.i, :self.n]

    @functools.cached_property
    def b(self) -> torch.Tensor:
        return self.whole.b[self.i, :self.n]

    @functools.cached_property
    def wy(self) -> dict:
        return {name: t[self.i] for name, t in self.whole.wy.items()}

    @functools.cached_property
    def S0(self) -> torch.Tensor:
        return self.whole.S0[self.i]


def tree_layer(m, h, conv_state, S0, buf, mode) -> tuple[torch.Tensor, GdnRecord]:
    """One GDN layer on one tree. h [N+1, D], conv_state [C, K], S0 [H, dk, dv], buf: the tree's
    ``verify.TreeBuffers`` -> (out [N+1, D], its ``GdnRecord``)."""
    x, z, a, b = gdn_project(m, h)
    y = tree_conv(x, conv_state, gdn_conv_weight(m), buf.gdn_parents)
    q, k, v = gdn_qkv(m, y)
    g, beta = gdn_gates(m, a, b)
    o, fields = core(mode, q, k, v, g, beta, buf.gdn_parents, depths=buf.tree.depths, S0=S0.to(v.dtype), anc=buf.gdn_anc)
    return gdn_output(m, o, z, h.dtype), GdnRecord(x, a, b, **fields)


def tree_layer_batch(m, h, conv_state, S0, bufs, mode) -> tuple[torch.Tensor, list[GdnRecord]]:
    """One GDN layer on B trees. h [B, T, D] padded, or [1, N, D] packed (``bufs.rows``),
    conv_state [B, C, K], S0 [B, H, dk, dv], bufs: ``verify.BatchBuffers`` -> (out shaped as h
    (padding rows: never read), a record per sequence, as ``tree_layer`` makes it).
    Projections, gates and the output norm over all rows of h at once; the conv and the
    recurrence over the padded [B, T] (``unpack``). A mode without a batched form (fork:
    ``GdnMode.batched``) runs ``tree_layer`` per sequence (``tree_layer_per_tree``) before any batched work."""
    if not mode.batched:
        return tree_layer_per_tree(m, h, conv_state, S0, bufs, mode)
    B, T, D = len(bufs.sizes), max(bufs.sizes), h.shape[-1]
    padded = (lambda t: t) if bufs.rows is None else (
        lambda t: unpack(t[None], bufs.rows, B, T, 1).reshape(B * T, *t.shape[1:]))
    x, z, a, b = gdn_project(m, h.reshape(-1, D))  # [rows, C], [rows, H, dv], [rows, H] x2
    x, a, b = padded(x), padded(a), padded(b)  # [B*T, ...]; z stays on h's rows, for the output
    y = tree_conv_batch(x.view(B, T, -1), conv_state, gdn_conv_weight(m), bufs.windows)
    q, k, v = gdn_qkv(m, y.reshape(B * T, -1))
    g, beta = gdn_gates(m, a, b)
    o, fields = core_batch(mode, *(t.view(B, T, *t.shape[1:]) for t in (q, k, v, g, beta)),
                                S0.to(v.dtype), anc=bufs.gdn_anc.to(h.device))
    o = o.reshape(B * T, *o.shape[2:]) if bufs.rows is None else pack(o, bufs.rows, 1)[0]
    out = gdn_output(m, o, z, h.dtype).view(h.shape)
    whole = GdnRecord(*(t.view(B, T, -1) for t in (x, a, b)), **fields)
    return out, [whole.row(i, n) for i, n in enumerate(bufs.sizes)]


def tree_layer_per_tree(m, h, conv_state, S0, bufs, mode):
    """``tree_layer_batch`` by ``tree_layer`` per sequence (h packed: unpacked first, the output
    packed back): the fast layer's path for a mode with no batched form (fork), and the body of
    its plain twin ``naive.tree_layer_batch`` (kept here: ``naive`` imports this module)."""
    if bufs.rows is not None:
        B, T = len(bufs.sizes), max(bufs.sizes)
        out, records = tree_layer_per_tree(m, unpack(h, bufs.rows, B, T, 1), conv_state, S0,
                                           dataclasses.replace(bufs, rows=None), mode)
        return pack(out, bufs.rows, 1), records
    out, records = torch.zeros_like(h), []
    for i, n in enumerate(bufs.sizes):
        out[i, :n], rec = tree_layer(m, h[i, :n], conv_state[i], S0[i], bufs.per_tree[i], mode)
        records.append(rec)
    return out, records


def commit_layers(caches: list, layers: list[int], wholes: list, idxs: list[torch.Tensor]) -> None:
    """Every GDN layer's new conv and recurrent states for the whole batch in one pass: the
    layers' batch records (``wholes``, one WY pass each) side by side [layers x B, ...], the
    paths' one index (``path_rows``) repeated per layer; each cache keeps its rows."""
    B = len(caches)
    rows = path_rows(idxs, wholes[0].x.device).repeat(len(layers))

    def side_by_side(get) -> torch.Tensor:
        return torch.cat([get(w) for w in wholes])

    convs = conv_states_at(torch.stack([c.conv[i] for i in layers for c in caches]),
                                   side_by_side(lambda w: w.x), rows)
    states = wy_states_at(side_by_side(lambda w: w.wy["U"]), side_by_side(lambda w: w.wy["G"]),
                                  side_by_side(lambda w: w.wy["k"]), side_by_side(lambda w: w.S0), rows)
    states = states.to(caches[0].rec[layers[0]].dtype)
    for i, layer_convs, layer_states in zip(layers, convs.split(B), states.split(B)):
        for c, conv, state in zip(caches, layer_convs, layer_states):
            c.conv[i], c.rec[i] = conv, state  # rows of the batch's tensors: no one writes a state in place


def one_pass(records: list):
    """The batch record (``wy.GdnRecord.batch``) whose row b is ``records[b]`` for every b
    of a batch of two or more (one WY pass over them all, in this order); else None (a batch of
    one, fork, a re-scored chain, or records of separate verifies)."""
    whole = records[0].batch[0] if records[0].batch is not None else None
    if len(records) < 2 or whole is None or whole.x.shape[0] != len(records):
        return None
    if any(r.batch is None or r.batch[0] is not whole or r.batch[1] != b for b, r in enumerate(records)):
        return None
    return whole


def commit_layer_each(caches: list, i: int, records: list, idxs: list[torch.Tensor], mode) -> None:
    """GDN layer i's new conv and recurrent states per sequence (``state``)."""
    for c, rec, idx in zip(caches, records, idxs):
        c.conv[i] = commit_conv_state(c.conv[i], rec.x[idx.to(rec.x.device)])
        c.rec[i] = state(mode, rec, idx.tolist()).to(c.rec[i].dtype).clone()


# ----------------------------------------------------------------------------- the mode's maths

def core(mode, q, k, v, g, beta, parents, *, depths, S0, anc) -> tuple[torch.Tensor, dict]:
    """The recurrence of one tree under ``mode`` (``spec.GdnMode``): q, k [N+1, H, dk], v
    [N+1, H, dv], g, beta [N+1, H], S0 [H, dk, dv], anc [N+1, N+1] -> (o [N+1, H, dv], the
    record's mode fields): fork, per-node states from the parent's; else the tree WY pass."""
    if mode.forks:
        o, states = gated_delta_fork(q, k, v, g, beta, parents, depths=depths, S0=S0)
        return o, {"states": states}
    o, aux = gated_delta_wy(q, k, v, g, beta, parents, S0=S0, anc=anc, return_aux=True)
    return o, {"wy": aux, "S0": S0}


def core_batch(mode, q, k, v, g, beta, S0, *, anc):
    """``core`` over B padded trees (q [B, T, H, dk] ..., S0 [B, H, dk, dv], anc [B, T, T]) ->
    (o [B, T, H, dv], the batch's mode fields: ``GdnRecord.row`` cuts each sequence's); only
    for a ``batched`` mode."""
    o, aux = gated_delta_wy_batch(q, k, v, g, beta, S0, anc=anc)
    return o, {"wy": aux, "S0": S0}


def state(mode, rec, path: list) -> torch.Tensor:
    """The recurrent state [H, dk, dv] after the last node of the accepted ``path``: fork, the
    node's stored state; else (W1) from the WY pass (``wy_state``)."""
    return rec.states[path[-1]] if mode.forks else wy_state(rec.wy, rec.S0, path)


BATCHED_CLASSES = GDN_CLASSES  # the classes ``tree_layer_batch`` runs (the decoding loop's fast layer)


def gdn_modules(model) -> dict[int, torch.nn.Module]:
    """{layer index: its Gated DeltaNet layer of ``GDN_CLASSES``} (empty for attention-only
    models; OLMo-Hybrid's GDN, whose projections differ, runs through the protocol's ``tree``)."""
    return {i: layer.linear_attn for i, layer in enumerate(model.model.layers)
            if isinstance(getattr(layer, "linear_attn", None), GDN_CLASSES)}


def zero_state(m, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batched layer's empty state: conv [C, K] zeros (``like``'s dtype and device), recurrent
    [H, dk, dv] zeros in ``kernel_dtype`` (the stock kernels keep their states in it)."""
    return (like.new_zeros(m.conv_dim, m.conv_kernel_size),
            torch.zeros(m.num_v_heads, m.head_k_dim, m.head_v_dim, dtype=kernel_dtype(like.dtype), device=like.device))


def commit_batch_layers(caches: list, records: list[dict], idxs: list[torch.Tensor], mode) -> None:
    """The commit of every batched GDN layer of one round (``verify.commit_batch``): records[b]
    {layer: sequence b's ``GdnRecord``}, idxs[b] its accepted nodes. Every layer and sequence at
    once (``commit_layers``) when the records are the rows of one WY pass each; else per
    sequence (``commit_layer_each``: a batch of one, fork, a re-scored chain)."""
    layers = list(records[0])
    wholes = [one_pass([r[i] for r in records]) for i in layers]
    if layers and all(w is not None for w in wholes):
        commit_layers(caches, layers, wholes, idxs)
        return
    for i in layers:
        commit_layer_each(caches, i, [r[i] for r in records], idxs, mode)
