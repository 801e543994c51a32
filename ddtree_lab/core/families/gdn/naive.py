"""Gated DeltaNet's plain twin: the one-token step and the chain, the obvious way (issue 65:
the plain form beside the fast one, as flash-linear-attention's ``ops/<op>/naive.py`` beside
``chunk.py``). ``step`` is the family protocol's plain step (``families/__init__.py``), from
which ``families.fork`` builds the exact tree forward the fast ``wy.tree`` is tested against;
``replay_gdn`` runs a layer's state along a committed path token by token (``core/naive.py``'s
commit). Maths and conventions: ``wy.py``'s docstring, eq. (C) and (R).
"""
from __future__ import annotations

import torch

from ...tree import chain_parents
from .wy import IDX, _inputs, commit_conv_state, delta_step, gdn_conv_weight, gdn_gates, gdn_qkv, layout, tree_conv


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
    y = tree_conv(x_path, conv_state, gdn_conv_weight(m), chain_parents(x_path.shape[0] - 1))
    q, k, v = gdn_qkv(m, y)
    g, beta = gdn_gates(m, a_path, b_path)
    _, S = gated_delta_chain(q, k, v, g, beta, S0.to(v.dtype))
    return commit_conv_state(conv_state, x_path), S.to(S0.dtype)


