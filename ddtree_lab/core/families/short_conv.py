"""Short convolution family (LFM2's gated short conv): exact one-pass tree verification.

Conventions of transformers' ``Lfm2ShortConv`` / ``Lfm2MoeShortConv`` (pinned by the tests), for
one token with hidden input h [D] and kernel K = ``config.conv_L_cache``:

    B, C, x = in_proj(h).chunk(3);   u = B * x                                   [D] each
    y = sum_j W[:, j] * u_{t-K+1+j} (+ conv bias);   out = out_proj(C * y)        (C)

a causal depthwise conv over u = B * x, with no activation. The stock cache layer
(``LinearAttentionLayer``) keeps ``conv_states[0]`` [D, K]: the last K inputs u, oldest first,
and no recurrent state (``recurrent_states[0]`` stays None, which the generic ``families.read_state``
leaves out: its state is {"conv": {0: [D, K]}, "rec": {}}).

On a tree, node i's conv window is the last K inputs along its own path, continuing into the
conv state above the root (``tree.ancestor_windows``); the state after an accepted path is
the window of its last node, so commit is a lookup. Everything is a pure function over one
sequence (no batch), computing in the dtype of its inputs.
"""
from __future__ import annotations

import torch

from ..tree import ancestor_windows

CLASS_NAMES = ("Lfm2ShortConv", "Lfm2MoeShortConv")


# ----------------------------------------------------------------------------- stock cache <-> state

# ----------------------------------------------------------------------------- the layer's pieces

def _inputs(m, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(u = B * x, C): h [..., D] -> two [..., D]."""
    B, C, x = m.in_proj(h).chunk(3, dim=-1)
    return B * x, C


def _conv(m, windows: torch.Tensor) -> torch.Tensor:
    """Depthwise conv (C) of windows [..., K, D] (oldest first) -> [..., D]."""
    W = m.conv.weight[:, 0, :]  # [D, K]
    y = (windows * W.T).sum(-2)  # [..., D]
    return y if m.conv.bias is None else y + m.conv.bias


def _state(window: torch.Tensor) -> dict:
    """The state whose conv columns are ``window`` [K, D] (oldest first)."""
    return {"conv": {0: window.T.contiguous()}, "rec": {}}  # [D, K], a fresh tensor


# ----------------------------------------------------------------------------- protocol

def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """One token: h [D], state {"conv": {0: [D, K]}} -> (out [D], new state)."""
    u, C = _inputs(m, h)  # [D], [D]
    window = torch.cat([state["conv"][0][:, 1:], u[:, None]], dim=1).T  # [K, D]: last K-1 inputs, then u
    return m.out_proj(C * _conv(m, window)), _state(window)


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Exact tree forward: h [n, D], parents [n] (``anc`` unused: windows follow parents)
    -> (out [n, D], record {"windows": [n, K, D]})."""
    conv = state["conv"][0]  # [D, K]
    u, C = _inputs(m, h)  # [n, D] each
    rows = torch.cat([conv.T, u])  # [K+n, D]: conv columns, then nodes
    windows = rows[ancestor_windows(parents.cpu(), conv.shape[1]).to(rows.device)]  # [n, K, D]
    return m.out_proj(C * _conv(m, windows)), {"windows": windows}


def commit(m, record: dict, path: list) -> dict:
    """State after the last node of ``path``: the last K inputs along it, i.e. its window."""
    return _state(record["windows"][path[-1]])
