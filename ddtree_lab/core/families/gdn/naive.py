"""Gated DeltaNet's plain twins, beside the fast form they mirror (issue 65, as
flash-linear-attention's ``ops/<op>/naive.py`` beside ``chunk.py``; each pair tested equal in
``core/tests``). Maths and conventions: ``wy.py``'s docstring, eq. (C) and (R).

- ``step``: the family protocol's plain one-token step (``families/__init__.py``), from which
  ``families.fork`` builds the exact tree forward the fast ``wy.tree`` is tested against;
  ``gated_delta_chain``: (R) over a chain; ``replay_gdn``: a layer's state along a committed
  path token by token (``core/naive.py``'s commit);
- the fast form's twins, named as the fast function without its module: ``tree_conv`` (per
  node) for ``wy.tree_conv``, ``gated_delta`` (per path) for ``wy.gated_delta_fork`` /
  ``wy.gated_delta_wy``, ``tree_layer_batch`` (per tree) for ``wy.tree_layer_batch``,
  ``tree_conv_batch`` for ``wy.tree_conv_batch``, ``gated_delta_wy_batch`` (per tree) for
  ``wy.gated_delta_wy_batch``. Nothing on the decoding path uses this module but ``step``
  (re-exported by ``families/gdn/__init__.py``, the protocol's plain step).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...tree import chain_parents, tree_path
from .wy import (IDX, _inputs, commit_conv_state, delta_step, gated_delta_wy, gdn_conv_weight, gdn_gates, gdn_qkv, layout,
                 tree_conv as tree_conv_fast, tree_layer_per_tree)


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


def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """The plain one-token step: h [D] -> (out [D], the state after it), state not modified."""
    conv, S0 = state["conv"][IDX], state["rec"][IDX]  # [C, K], [H, dk, dv]
    x, q, k, v, g, beta, z = _inputs(m, h[None], conv, torch.tensor([-1]))
    o, S = delta_step(S0.to(v.dtype), q[0], k[0], v[0], g[0], beta[0])  # [H, dv], [H, dk, dv]
    out = layout(m).output(m, o[None], z, h.dtype)[0]  # [D]
    return out, {"conv": {IDX: commit_conv_state(conv, x)}, "rec": {IDX: S.to(S0.dtype)}}


def replay_gdn(m, x_path, a_path, b_path, conv_state, S0):
    """Run a GDN layer's state along a committed chain: -> (conv_state [C, K], S [H, dk, dv]).

    x_path [P, C] pre-conv inputs, a_path / b_path [P, H] raw gates of the path's nodes.
    """
    y = tree_conv_fast(x_path, conv_state, gdn_conv_weight(m), chain_parents(x_path.shape[0] - 1))
    q, k, v = gdn_qkv(m, y)
    g, beta = gdn_gates(m, a_path, b_path)
    _, S = gated_delta_chain(q, k, v, g, beta, S0.to(v.dtype))
    return commit_conv_state(conv_state, x_path), S.to(S0.dtype)


# ----------------------------------------------------------------------------- the fast form's twins

def tree_conv(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
              parents: torch.Tensor) -> torch.Tensor:
    """Plain twin of ``families.gdn.wy.tree_conv``: per node, walk the parents and fill the window by hand.

    x [N+1, C] pre-conv inputs, conv_state [C, K], weight [C, K], parents [N+1] -> [N+1, C].
    """
    K = weight.shape[1]
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        window, node, state_col = [], i, K - 1
        for _ in range(K):  # newest first: self, parent, grandparent, ... then conv state
            if node >= 0:
                window.append(x[node])
                node = int(parents[node])
            else:
                window.append(conv_state[:, state_col])
                state_col -= 1
        out[i] = F.silu(sum(weight[:, K - 1 - j] * window[j] for j in range(K)))
    return out


def gated_delta(q, k, v, g, beta, parents, *, S0):
    """Oracle of ``wy.gated_delta_fork`` and ``gated_delta_wy``: for each node run
    ``gated_delta_chain`` over its path root..i from S0.

    Shapes as ``gated_delta_chain`` with L = N+1 (q, k [N+1, H, dk], v [N+1, H, dv], g, beta
    [N+1, H], S0 [H, dk, dv]), plus parents [N+1]; -> o [N+1, H, dv]. O(N * depth) steps.
    """
    outs = []
    for i in range(q.shape[0]):
        path = tree_path(parents, i)
        o_path, _ = gated_delta_chain(q[path], k[path], v[path], g[path], beta[path], S0)
        outs.append(o_path[-1])
    return torch.stack(outs)


def tree_layer_batch(m, h, conv_state, S0, bufs, mode):
    """Plain twin of ``wy.tree_layer_batch``: ``wy.tree_layer`` per sequence (h
    packed: unpacked first, the output packed back). h [B, T, D] or [1, N, D], conv_state
    [B, C, K], S0 [B, H, dk, dv] -> (out shaped as h, a ``GdnRecord`` per sequence).

    Its body is ``wy.tree_layer_per_tree``: the fast layer runs it for a mode with no
    batched form (fork), so it stays there (this module imports ``wy``)."""
    return tree_layer_per_tree(m, h, conv_state, S0, bufs, mode)


def tree_conv_batch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                    windows: torch.Tensor) -> torch.Tensor:
    """``wy.tree_conv_batch``'s plain twin, a broadcast advanced
    index: x [B, T, C], conv_state [B, C, K], weight [C, K], windows [B, T, K]
    (``verify.BatchBuffers``) -> silu(conv) [B, T, C]."""
    rows = torch.cat([conv_state.transpose(1, 2), x], dim=1)  # [B, K+T, C]
    batch_idx = torch.arange(x.shape[0], device=x.device)[:, None, None]
    picked = rows[batch_idx, windows.to(x.device)]  # [B, T, K, C]
    return F.silu((picked * weight.T).sum(2))  # a multiply-sum: einsum's bmm is ~5x slower at this shape


def gated_delta_wy_batch(q, k, v, g, beta, S0, *, anc):
    """``wy.gated_delta_wy_batch``'s plain twin:
    ``wy.gated_delta_wy`` per tree. q, k [B, T, H, dk], v [B, T, H, dv], g, beta
    [B, T, H], S0 [B, H, dk, dv], anc [B, T, T] -> (o [B, T, H, dv], aux {"U": [B, H, T, dv],
    "G": [B, T, H], "k": [B, H, T, dk]})."""
    outs = [gated_delta_wy(q[b], k[b], v[b], g[b], beta[b], None, S0=S0[b], anc=anc[b], return_aux=True)
            for b in range(q.shape[0])]
    return torch.stack([o for o, _ in outs]), {name: torch.stack([aux[name] for _, aux in outs]) for name in ("U", "G", "k")}
