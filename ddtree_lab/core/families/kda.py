"""Kimi Delta Attention (KDA, Kimi-Linear: arXiv 2510.26692): exact tree verification of one layer.

KDA is Gated DeltaNet's delta rule (``core/wy.py``) with a per-CHANNEL forget gate. The
conventions are those of transformers' ``KimiLinearDeltaAttention`` (5.23.0), for one sequence:

* one causal depthwise conv (kernel K, activation ``config.hidden_act``) over the concatenation
  x = [q_proj h, k_proj h, v_proj h] [3C] (C = H * d, one conv for all three, so the cache keeps
  ONE conv state, index 0: [3C, K], the last K pre-conv inputs, oldest first);
* q, k l2-normalised per head as x / sqrt(|x|^2 + 1e-6), q scaled by d**-0.5;
* log gate g [H, d] = -exp(A_log) * softplus(f_b(f_a h) + dt_bias), beta = sigmoid(b_proj h) [H];
* per head, state S [dk, dv] (the cache's recurrent state 0: [H, dk, dv]):
      S_t = diag(exp g_t) S_{t-1};  u_t = beta_t (v_t - S_t^T k_t);  S_t += k_t u_t^T;  o_t = S_t^T q_t;
* output o_proj(rmsnorm(o) * w * sigmoid(g_b(g_a h))), the norm per head.

Tree WY form (``tree``): ``wy.gated_delta_wy``'s (W1-W3) with the per-head scalar decay
e^{G_i - G_j} replaced by a per-channel one inside each key product. With G_i = sum over
path(i) of g [H, d] (float64):
      S_i = diag(e^{G_i}) S0 + sum_{j in path(i)} diag(e^{G_i - G_j}) k_j u_j^T,                  (K1)
      u_j + beta_j sum_{m strict anc of j} [sum_c k_jc k_mc e^{G_jc - G_mc}] u_m
          = beta_j v_j - beta_j S0^T (e^{G_j} * k_j),                                             (K2)
      o_i = S0^T (e^{G_i} * q_i) + sum_{j in path(i)} [sum_c q_ic k_jc e^{G_ic - G_jc}] u_j,      (K3)
(K2) is one unit-lower-triangular solve; (K1) is ``commit``. The conv reads ancestor windows
(``tree.ancestor_windows``).

Precision: the stock kernels, forget gate and gated norm compute in float32 whatever the model
dtype, and its cache keeps the recurrent state in float32. Here the recurrence computes in
``_acc(dtype)`` = the wider of the input dtype and float32: the stock arithmetic for bf16 and
float32 models, float64 end to end for float64 ones (the tests' harness makes the stock float64
too).
"""
from __future__ import annotations

import torch
from transformers.activations import ACT2FN

from ..tree import ancestor_windows
from .gdn.wy import commit_conv_state

CLASS_NAMES = ("KimiLinearDeltaAttention",)


def _acc(dtype: torch.dtype) -> torch.dtype:
    """The recurrence's dtype: at least float32, as the stock kernels (see the module docstring)."""
    return torch.promote_types(dtype, torch.float32)


# ----------------------------------------------------------------------------- per-token parts

def _inputs(m, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pre-conv x [n, 3C], log gate g [n, H, d] and beta [n, H] (both in ``_acc``) of h [n, D]."""
    x = torch.cat([m.q_proj(h), m.k_proj(h), m.v_proj(h)], dim=-1)  # [n, 3C]
    fg, acc = m.forget_gate, _acc(h.dtype)
    raw = fg.f_b_proj(fg.f_a_proj(h)).to(acc) + fg.dt_bias.to(acc)  # [n, H*d]
    raw = raw.view(h.shape[0], m.num_heads, m.head_dim)  # [n, H, d]
    soft = torch.where(raw > 20.0, raw, torch.log(1.0 + torch.exp(raw)))  # the stock softplus
    g = -fg.A_log.to(acc).exp().view(m.num_heads, 1) * soft  # [n, H, d]
    return x, g, torch.sigmoid(m.b_proj(h)).to(acc)


def _conv(m, windows: torch.Tensor) -> torch.Tensor:
    """The activated depthwise conv of windows [n, K, 3C] (oldest first) -> [n, 3C]."""
    w = m.conv1d.weight[:, 0]  # [3C, K]
    y = (windows * w.T).sum(1)  # [n, 3C]
    if m.conv1d.bias is not None:
        y = y + m.conv1d.bias
    return ACT2FN[m.activation](y)


def _qkv(m, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Post-conv y [n, 3C] -> q, k, v [n, H, d] in ``_acc``; q, k l2-normalised, q scaled."""
    acc, d = _acc(y.dtype), m.head_dim
    q, k, v = (t.reshape(y.shape[0], m.num_heads, d).to(acc) for t in y.split(m.qkv_dim, dim=-1))

    def l2norm(t):
        return t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)

    return l2norm(q) * (1 / d ** 0.5), l2norm(k), v  # the stock scale, 1 / sqrt(d)


def _output(m, h: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """Gated norm and o_proj: h [n, D] (for the output gate), o [n, H, d] -> [n, D]."""
    gate = m.g_b_proj(m.g_a_proj(h)).view(h.shape[0], m.num_heads, m.head_dim)  # [n, H, d]
    acc, norm = _acc(h.dtype), m.o_norm
    o = o.to(h.dtype).to(acc)  # the stock kernel returns its output in the input dtype
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    o = norm.weight.to(acc) * o * ACT2FN[norm.activation](gate.to(acc))  # [n, H, d]
    return m.o_proj(o.to(h.dtype).reshape(h.shape[0], -1))


# ----------------------------------------------------------------------------- protocol

def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """One token: h [D], state {"conv": {0: [3C, K]}, "rec": {0: [H, d, d]}} -> (out [D], state)."""
    x, g, beta = _inputs(m, h[None])  # [1, 3C], [1, H, d], [1, H]
    conv = torch.cat([state["conv"][0], x.T.to(state["conv"][0].dtype)], dim=1)[:, 1:]  # [3C, K]
    q, k, v = (t[0] for t in _qkv(m, _conv(m, conv.T[None])))  # [H, d] each
    S = state["rec"][0].to(q.dtype) * g[0].exp()[..., None]  # [H, dk, dv], decay per key channel
    u = beta[0, :, None] * (v - (k[:, None, :] @ S)[:, 0])  # [H, dv]
    S = S + k[..., None] * u[:, None, :]  # S += k u^T
    o = (q[:, None, :] @ S)[:, 0]  # [H, dv]
    return _output(m, h[None], o[None])[0], {"conv": {0: conv}, "rec": {0: S}}


def _path_gates(g: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """G [n, H, d] float64: G_i = sum of g [n, H, d] over path root..i (anc [n, n])."""
    return (anc.double() @ g.double().flatten(1)).view(g.shape)


def _decay(G: torch.Tensor, anc: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """D [H, n, n, d] = e^{G_i - G_j} per channel where anc[i, j], else 0. The differences stay
    in float64; non-ancestors become -inf before exp (their difference may be > 0)."""
    diff = G.permute(1, 0, 2)[:, :, None] - G.permute(1, 0, 2)[:, None]  # [H, n, n, d] float64
    return diff.masked_fill(~anc[None, :, :, None], float("-inf")).exp().to(dtype)


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Exact one-pass tree forward: h [n, D], parents [n], anc [n, n] -> (out [n, D], record)."""
    x, g, beta = _inputs(m, h)  # [n, 3C], [n, H, d], [n, H]
    conv0 = state["conv"][0]  # [3C, K]
    rows = torch.cat([conv0.T, x.to(conv0.dtype)])  # [K+n, 3C]
    windows = rows[ancestor_windows(parents.cpu(), conv0.shape[1]).to(rows.device)]  # [n, K, 3C]
    q, k, v = (t.transpose(0, 1) for t in _qkv(m, _conv(m, windows)))  # [H, n, d] each
    S0, anc = state["rec"][0].to(q.dtype), anc.to(q.device)  # [H, dk, dv]
    G = _path_gates(g, anc)  # [n, H, d] float64
    eG, D = G.exp().to(q.dtype).transpose(0, 1), _decay(G, anc, q.dtype)  # [H, n, d], [H, n, n, d]
    # (K2): A strictly lower is all the solve reads (unitriangular), so D's diagonal never enters
    A = beta.T[..., None] * torch.einsum("hic,hjc,hijc->hij", k, k, D)  # [H, n, n]
    rhs = beta.T[..., None] * (v - (k * eG) @ S0)  # [H, n, dv]
    U = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # [H, n, dv]
    attn = torch.einsum("hic,hjc,hijc->hij", q, k, D)  # [H, n, n], (K3)
    o = (q * eG) @ S0 + attn @ U  # [H, n, dv]
    record = {"U": U, "G": G, "k": k, "S0": S0, "x": x, "conv": conv0}
    return _output(m, h, o.transpose(0, 1)), record


def commit(m, record: dict, path: list) -> dict:
    """State after the last node of ``path`` (root..i) by (K1) and the path's last K conv inputs."""
    U, G, k, i = record["U"], record["G"], record["k"], path[-1]
    w = (G[i] - G[path]).exp().to(U.dtype)  # [L, H, d], differences in float64
    update = torch.einsum("lhc,hlc,hlv->hcv", w, k[:, path], U[:, path])  # [H, dk, dv]
    S = G[i].exp().to(U.dtype)[..., None] * record["S0"] + update
    conv = commit_conv_state(record["conv"], record["x"][path].to(record["conv"].dtype))  # [3C, K]
    return {"conv": {0: conv}, "rec": {0: S}}
