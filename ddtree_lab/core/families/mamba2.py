"""Mamba2 (SSD) mixers: the plain step and the exact one-pass tree form (the family protocol,
``families/__init__.py``), for one sequence, from the stock layer's own weights.

Mamba-2's state space duality (arXiv 2405.21060): per head h (state [P, N], P = head_dim,
N = d_state), with x [H, P], B, C [G, N] (group g serves heads g*H/G .. (g+1)*H/G - 1),
dt [H], A = -exp(A_log) [H]:

    dt_t = clamp(softplus(dt_t + dt_bias), *time_step_limit)                        (D)
    S_t  = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D x_t,              (S)

inside in_proj -> (z, xBC, dt), a causal depthwise conv + silu (``m.act``) over xBC (the conv
state [C, K] holds the last K pre-conv inputs, oldest first), a gated RMSNorm with z, out_proj.
Unrolled along a path (a_t = dt_t A, Acum_i = sum of a over the path root..i):

    S_i = exp(Acum_i) S0 + sum_{j in path(i)} exp(Acum_i - Acum_j) dt_j x_j B_j^T,           (W)
    y_i = sum_{j in path(i)} (C_i . B_j) exp(Acum_i - Acum_j) dt_j x_j + exp(Acum_i) S0 C_i + D x_i,

SSD's quadratic (masked attention) form with the causal mask replaced by the ancestor mask, as
in STree (arXiv 2505.14969, the brief's citation); the conv reads ancestor windows
(``tree.ancestor_windows``). ``tree`` evaluates (W) for all nodes in one pass, ``commit``
forms S_i of the accepted node from the same record.

Per class (transformers 5.23.0), read from the stock mixer's attributes:
- FalconH1Mixer: input times ``ssm_in_multiplier`` and the projection times ``mup_vector``
  (both inside the mixer; ``ssm_out_multiplier`` is applied by the decoder layer, outside);
  the gated norm is optional (``mamba_rms_norm``; else y * silu(z)), grouped by ``n_groups``,
  gate before or after the norm (``norm_before_gate``);
- the others' ``*RMSNormGated``: y * silu(z) first, then an RMSNorm per ``group_size``;
- (D)'s clamp is the stock full forward's (``mamba2_chunk_scan``); the stock one-token decode
  (``mamba2_selective_state_update``) skips it, so NemotronH / Zamba2 (whose mixers set
  ``time_step_limit = (time_step_min, inf)``) decode differently where softplus < time_step_min.
  The step here follows the full forward.

Precision: the SSM and the norm run in ``promote_types(dtype, float32)`` (the stock code casts
to float32 there, so a bf16 model's SSM runs in float32 as stock; float64 stays float64); the
state keeps its dtype (the stock cache's SSM state is float32 whatever the model's dtype).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..tree import ancestor_windows
from .gdn.wy import commit_conv_state, pairwise_decay

CLASS_NAMES = ("NemotronHMamba2Mixer", "FalconH1Mixer", "GraniteMoeHybridMambaLayer", "BambaMixer",
               "Zamba2MambaMixer")


# ----------------------------------------------------------------------------- shared pieces

def _project(m, h: torch.Tensor):
    """in_proj and its split: h [..., D] -> z [..., I], xBC [..., C], dt [..., H]."""
    h = h * getattr(m, "ssm_in_multiplier", 1.0)  # FalconH1
    p = m.in_proj(h)
    if hasattr(m, "mup_vector"):  # FalconH1: [1, 1, I + C + H]
        p = p * m.mup_vector.reshape(-1).to(p.dtype)
    return p.split([m.intermediate_size, m.conv_dim, m.num_heads], dim=-1)


def _conv_out(m, windows: torch.Tensor) -> torch.Tensor:
    """The depthwise conv over windows [..., C, K] (oldest first), then the mixer's activation
    (``m.act``: silu in every shipped config) -> [..., C]."""
    out = (windows * m.conv1d.weight[:, 0]).sum(-1)  # weight [C, 1, K]
    if m.conv1d.bias is not None:
        out = out + m.conv1d.bias
    return m.act(out)


def _split_xbc(m, xbc: torch.Tensor, dtype: torch.dtype):
    """xBC [..., C] -> x [..., H, P], B, C [..., H, N] (groups expanded to heads), in ``dtype``."""
    GN = m.n_groups * m.ssm_state_size
    x, B, C = xbc.to(dtype).split([m.intermediate_size, GN, GN], dim=-1)
    rep = m.num_heads // m.n_groups
    B, C = (t.unflatten(-1, (m.n_groups, m.ssm_state_size)).repeat_interleave(rep, dim=-2) for t in (B, C))
    return x.unflatten(-1, (m.num_heads, m.head_dim)), B, C


def _dt(m, dt: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(D): dt [..., H] -> clamp(softplus(dt + dt_bias), *time_step_limit) [..., H]."""
    dt = F.softplus(dt.to(dtype) + m.dt_bias.to(dtype))
    limit = m.time_step_limit
    return dt if limit is None else dt.clamp(min=limit[0], max=limit[1])


def _A(m, dtype: torch.dtype) -> torch.Tensor:
    """A = -exp(A_log) [H]."""
    return -torch.exp(m.A_log.to(dtype))


def _gated_norm(m, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The stock gated RMSNorm: y, z [..., I] -> [..., I] (in y's dtype)."""
    norm, gate = m.norm, F.silu(z.to(y.dtype))
    if not getattr(m, "mamba_rms_norm", True):  # FalconH1 without the norm
        return y * gate
    before = getattr(norm, "norm_before_gate", False)
    groups = getattr(norm, "n_groups", None) or y.shape[-1] // norm.group_size
    if not before:
        y = y * gate
    g = y.unflatten(-1, (groups, -1))  # [..., G, I/G]
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    y = g.flatten(-2) * norm.weight.to(y.dtype)
    return y * gate if before else y


def _output(m, y: torch.Tensor, z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """y [..., I] (SSM output), z [..., I] -> out_proj(gated norm) [..., D] in ``dtype``."""
    return m.out_proj(_gated_norm(m, y, z).to(dtype))


def _ssm_dtype(h: torch.Tensor, S: torch.Tensor) -> torch.dtype:
    """Where the SSM runs: at least float32 (the stock casts), float64 for float64 inputs."""
    return torch.promote_types(torch.promote_types(h.dtype, S.dtype), torch.float32)


# ----------------------------------------------------------------------------- plain step

def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """One token: h [D], state {"conv": {0: [C, K]}, "rec": {0: [H, P, N]}} -> (out [D], state)."""
    conv, S = state["conv"][0], state["rec"][0]
    cd = _ssm_dtype(h, S)
    z, xbc, dt = _project(m, h)  # [I], [C], [H]
    conv_new = torch.cat([conv[:, 1:], xbc.to(conv.dtype)[:, None]], dim=1)  # [C, K]
    x, B, C = _split_xbc(m, _conv_out(m, conv_new.to(h.dtype)), cd)  # [H, P], [H, N], [H, N]
    dt = _dt(m, dt, cd)  # [H]
    dA = torch.exp(dt * _A(m, cd))  # [H]
    S_new = dA[:, None, None] * S.to(cd) + (dt[:, None] * x)[:, :, None] * B[:, None, :]  # [H, P, N]
    y = (S_new @ C[:, :, None])[..., 0] + m.D.to(cd)[:, None] * x  # [H, P]
    out = _output(m, y.flatten(), z, h.dtype)
    return out, {"conv": {0: conv_new}, "rec": {0: S_new.to(S.dtype)}}


# ----------------------------------------------------------------------------- tree

def _tree_conv(m, xbc: torch.Tensor, conv: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """Conv over ancestor windows: xBC [n, C], conv state [C, K] -> act(conv) [n, C]."""
    rows = torch.cat([conv.T.to(xbc.dtype), xbc])  # [K+n, C]
    idx = ancestor_windows(parents.cpu(), conv.shape[1]).to(xbc.device)  # [n, K]
    return _conv_out(m, rows[idx].transpose(1, 2))  # windows [n, C, K]


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """All nodes of a tree in one pass by (W): h [n, D], parents [n], anc [n, n] bool
    -> (out [n, D], record for ``commit``)."""
    conv, S0 = state["conv"][0], state["rec"][0]
    cd = _ssm_dtype(h, S0)
    z, xbc, dt = _project(m, h)  # [n, I], [n, C], [n, H]
    x, B, C = _split_xbc(m, _tree_conv(m, xbc, conv, parents), cd)  # [n, H, P], [n, H, N], [n, H, N]
    dt = _dt(m, dt, cd)  # [n, H]
    anc = anc.to(h.device)
    Acum = anc.double() @ (dt * _A(m, cd)).double()  # [n, H] float64 path sums of dt * A
    decay = pairwise_decay(Acum, anc, cd)  # [H, n, n]: exp(Acum_i - Acum_j) on ancestors, else 0
    scores = torch.einsum("ihs,jhs->hij", C, B) * decay * dt.T[:, None, :]  # [H, n, n]
    S0c = S0.to(cd)
    y = torch.einsum("hij,jhp->ihp", scores, x)  # [n, H, P]
    y = y + Acum.exp().to(cd)[..., None] * torch.einsum("ihs,hps->ihp", C, S0c) + m.D.to(cd)[:, None] * x
    out = _output(m, y.flatten(1), z, h.dtype)
    record = {"conv": conv, "xbc": xbc, "S0": S0, "Acum": Acum, "dtx": dt[..., None] * x, "B": B}
    return out, record


def commit(m, record: dict, path: list) -> dict:
    """The state after the last node of ``path`` (root..i) by (W): {"conv": {0: [C, K]}, "rec": {0: [H, P, N]}}."""
    Acum, S0 = record["Acum"], record["S0"]
    i = path[-1]
    dtx, B = record["dtx"][path], record["B"][path]  # [L, H, P], [L, H, N]
    w = (Acum[i] - Acum[path]).exp().to(dtx.dtype)  # [L, H], differences in float64
    S = Acum[i].exp().to(dtx.dtype)[:, None, None] * S0.to(dtx.dtype) + torch.einsum("lh,lhp,lhs->hps", w, dtx, B)
    conv = record["conv"]
    return {"conv": {0: commit_conv_state(conv, record["xbc"][path].to(conv.dtype))}, "rec": {0: S.to(S0.dtype)}}
