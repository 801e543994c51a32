"""Mamba1 (selective scan, arXiv 2312.00752 section 3) as a ``families`` module: Jamba's
``JambaMambaMixer`` (arXiv 2403.19887), for one sequence, from the stock layer's weights.

Per token, with Di = expand * hidden channels, N = d_state, K = d_conv, R = dt_rank:

    x, z = in_proj(h)                                   # [Di], [Di]
    u = silu(conv_bias + sum_k W[:, k] * x_{t-K+1+k})   # causal depthwise conv, [Di]
    dt, B, C = rms(.), rms(.), rms(.) of x_proj(u)      # [R], [N], [N] (Jamba's extra norms)
    dt = softplus(dt_proj.weight @ dt + dt_proj.bias)   # [Di]
    S = exp(dt A) * S + (dt B^T) * u                    # [Di, N], A = -exp(A_log) [Di, N]
    y = out_proj((S C + D * u) * silu(z))

The conv state [Di, K] holds the last K pre-conv inputs, oldest first; the recurrent state is S.

Tree form: Mamba1's decay exp(dt A) is per channel AND per state entry and input dependent, so a
one-pass (masked, WY-like) form would need per-pair decay products [n, n, Di, N]; ``tree`` is
instead the fork batched by depth level: everything but the recurrence (projections, the conv
over ancestor windows, dt / B / C, the discretisation) is computed once for all nodes, then one
multiply-add per depth level steps all its nodes from their parents' states (one gather).

Precision: the stock torch path (``mamba_selective_scan``) computes A = -exp(A_log) in float32,
rounds B and u to float32 inside dB u (but keeps float64 arithmetic in a float64 run), and its
RMS norms run in float32; all of it is mirrored here, since it moves outputs by ~4e-8 relative.
The stock one-token decode kernel (``mamba_selective_state_update``) instead does the whole state
update in float32; that one is NOT mirrored (it departs from the stock full forward by ~1e-8).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..tree import ancestor_windows
from ..tree import tree_depths

CLASS_NAMES = ("JambaMambaMixer",)


def _pre_scan(m, u: torch.Tensor):
    """Everything but the recurrence, for any leading shape [...]: u post-conv [..., Di] ->
    (dA [..., Di, N], dBu [..., Di, N], C [..., N], skip [..., Di]) with S_new = dA * S + dBu
    and the mixer's output out_proj((S C + skip) * silu(z))."""
    R, N = m.time_step_rank, m.ssm_state_size
    dt, B, C = torch.split(m.x_proj(u), [R, N, N], dim=-1)  # [..., R], [..., N], [..., N]
    dt, B, C = m.dt_layernorm(dt), m.b_layernorm(B), m.c_layernorm(C)  # stock: float32 inside
    dt = dt @ m.dt_proj.weight.T  # [..., Di], no bias (the stock adds it in the scan)
    dt = F.softplus(dt + m.dt_proj.bias.float().to(dt.dtype))  # stock: bias.float()
    A = -torch.exp(m.A_log.float())  # [Di, N]; stock: float32
    dA = torch.exp(A * dt[..., None])  # [..., Di, N]
    dBu = dt[..., None] * B.float()[..., None, :] * u.float()[..., None]  # stock: B, u .float()
    return dA, dBu, C, u * m.D.float()


def _finish(m, y: torch.Tensor, skip: torch.Tensor, z: torch.Tensor, dtype) -> torch.Tensor:
    """out_proj((y + skip) * silu(z)): y, skip, z [..., Di] -> [..., D] in ``dtype``."""
    return m.out_proj(((y + skip) * F.silu(z)).to(dtype))


def _conv(m, windows: torch.Tensor) -> torch.Tensor:
    """silu(bias + depthwise conv) of pre-conv windows [..., Di, K] -> [..., Di]."""
    out = (windows * m.conv1d.weight[:, 0]).sum(-1)  # weight [Di, 1, K]
    if m.conv1d.bias is not None:
        out = out + m.conv1d.bias
    return F.silu(out)


def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """One token: h [D], state {"conv": {0: [Di, K]}, "rec": {0: [Di, N]}} -> (out [D], new state)."""
    x, z = m.in_proj(h).chunk(2, dim=-1)  # [Di], [Di]
    conv = state["conv"][0]
    window = torch.cat([conv[:, 1:], x[:, None].to(conv.dtype)], dim=1)  # [Di, K]
    u = _conv(m, window.to(h.dtype))  # [Di]
    dA, dBu, C, skip = _pre_scan(m, u)
    S = dA * state["rec"][0] + dBu  # [Di, N]
    y = S.to(h.dtype) @ C  # [Di]
    return _finish(m, y, skip, z, h.dtype), {"conv": {0: window}, "rec": {0: S.to(state["rec"][0].dtype)}}


def _levels(parents: torch.Tensor) -> list[torch.Tensor]:
    """Node indices of each depth level, root level first: parents [n] -> list of LongTensor."""
    depths = tree_depths(parents.cpu())
    order = torch.argsort(depths, stable=True)
    return list(order.split(torch.bincount(depths).tolist()))


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The exact tree forward (a fork batched by depth level): h [n, D], parents [n] -> (out [n, D],
    record {"states": [n, Di, N] each node's S, "rows": [K+n, Di], "windows": [n, K]}). ``anc``
    is unused: the levels walk ``parents``."""
    conv, S0 = state["conv"][0], state["rec"][0]  # [Di, K], [Di, N]
    x, z = m.in_proj(h).chunk(2, dim=-1)  # [n, Di] each
    rows = torch.cat([conv.T, x.to(conv.dtype)])  # [K+n, Di]: conv columns, then nodes
    windows = ancestor_windows(parents.cpu(), conv.shape[1]).to(h.device)  # [n, K] rows
    u = _conv(m, rows[windows].transpose(1, 2).to(h.dtype))  # [n, Di]
    dA, dBu, C, skip = _pre_scan(m, u)  # [n, Di, N] x2, [n, N], [n, Di]
    states = S0.new_empty((h.shape[0] + 1, *S0.shape), dtype=dBu.dtype)  # slot 0 = S0, node i = i+1
    states[0] = S0
    slot_of_parent = parents.to(h.device) + 1  # [n], 0 = S0
    for idx in _levels(parents):
        idx = idx.to(h.device)
        par = states.index_select(0, slot_of_parent[idx])  # [l, Di, N]: the level's parents' states
        states.index_copy_(0, idx + 1, dA[idx] * par + dBu[idx])
    y = (states[1:].to(h.dtype) @ C[..., None])[..., 0]  # [n, Di]
    record = {"states": states[1:].to(S0.dtype), "rows": rows, "windows": windows}
    return _finish(m, y, skip, z, h.dtype), record


def commit(m, record: dict, path: list[int]) -> dict:
    """The state after the last node of ``path``: its S and its conv window (the last K pre-conv
    inputs along root..node, continued into the prefix's conv state) -> {"conv", "rec"}."""
    node = path[-1]
    return {"conv": {0: record["rows"][record["windows"][node]].T.clone()},  # [Di, K]
            "rec": {0: record["states"][node].clone()}}  # [Di, N]
