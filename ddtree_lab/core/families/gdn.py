"""Gated DeltaNet (GDN) family: exact tree verification for every stock GDN mixer of the pinned
transformers (5.23.0), one code path for all of them (the protocol of ``families/__init__.py``).

Gated DeltaNet: arXiv 2412.06464 (the gated delta rule). Per value head, state
S [dk, dv]:  S_t = e^{g_t} S_{t-1};  S_t += k_t beta_t (v_t - S_t^T k_t)^T;  o_t = S_t^T q_t,
after a causal depthwise conv (kernel K, silu) over the fused pre-conv q|k|v, with q, k
l2-normalised and q scaled by dk^-0.5; then a gated RMSNorm rmsnorm(o) * w * silu(z) and an
output projection. The maths is ``core/gdn_tree.py``'s; this module only adds the per-class
layouts and the protocol's step / tree / commit, reusing ``adapter``'s GDN pieces.

The classes differ only in where the projections, gates and output norm live (``LAYOUTS``):

* Qwen3.5 / Qwen3.5-MoE (the same code under two names): ``in_proj_qkv`` (fused q|k|v),
  ``in_proj_z`` (output gate), ``in_proj_a`` / ``in_proj_b`` (decay / beta), ``norm``,
  ``out_proj``;
* Qwen3-Next: q|k|v|z and b|a fused per key-head group (``in_proj_qkvz``, ``in_proj_ba``),
  unfused by its own ``fix_query_key_value_ordering`` (``adapter.gdn_project``);
* OLMo-hybrid: separate ``q_proj`` / ``k_proj`` / ``v_proj`` (concatenated q|k|v before ONE
  fused conv, as Qwen3.5's), ``a_proj`` / ``b_proj``, the output gate ``g_proj``, the gated
  norm ``o_norm`` (eps fixed at 1e-5) and ``o_proj``; with ``linear_allow_neg_eigval`` (its
  default) beta = 2 sigmoid(b), in (0, 2), so I - beta k k^T may have a negative eigenvalue.

Every class keeps ONE conv state and ONE recurrent state per layer (index 0 of the stock
``LinearAttentionLayer``): conv [C, K] with C = 2 key_dim + value_dim, the last K pre-conv
inputs oldest first; rec [H, dk, dv] (H value heads).

Precision: the stock kernels compute the conv output's q/k/v, the gates and the recurrence in
float32 even in a float64 model; ``adapter.gdn_qkv`` / ``gdn_gates`` mirror that through
``adapter.kernel_dtype`` (swapped for the identity by ``harness.float64_harness``), and the
recurrent state keeps the dtype it came in (float32 in a stock float64 cache).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch

from .. import adapter, gdn_tree

CLASS_NAMES = ("Qwen3_5GatedDeltaNet", "Qwen3_5MoeGatedDeltaNet", "Qwen3NextGatedDeltaNet",
               "OlmoHybridGatedDeltaNet")
IDX = 0  # every GDN class keeps its one conv / recurrent state at index 0 of the stock cache layer


# ----------------------------------------------------------------------------- per-class layouts

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
    g, beta = adapter.gdn_gates(m, a, b)  # g = -e^{A_log} softplus(a + dt_bias), as Qwen3.5's
    return g, (2.0 * beta if m.allow_neg_eigval else beta)


def _olmo_output(m, o: torch.Tensor, z: torch.Tensor, dtype) -> torch.Tensor:
    """OLMo-hybrid: ``adapter.gdn_output`` under its own names (``o_norm``, ``o_proj``)."""
    names = SimpleNamespace(norm=m.o_norm, out_proj=m.o_proj, head_v_dim=m.head_v_dim)
    return adapter.gdn_output(names, o, z, dtype)


QWEN = Layout(adapter.gdn_project, adapter.gdn_gates, adapter.gdn_output)
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


# ----------------------------------------------------------------------------- protocol

def _inputs(m, h: torch.Tensor, conv_state: torch.Tensor, parents: torch.Tensor):
    """Everything before the recurrence, on a tree (a chain of one for ``step``): h [n, D] ->
    x [n, C] pre-conv, q, k [n, H, dk], v [n, H, dv], g, beta [n, H], z [n, H, dv]."""
    lay = layout(m)
    x, z, a, b = lay.project(m, h)
    y = gdn_tree.tree_conv(x, conv_state, adapter.gdn_conv_weight(m), parents)  # [n, C], silu'd
    q, k, v = adapter.gdn_qkv(m, y)
    g, beta = lay.gates(m, a, b)
    return x, q, k, v, g, beta, z


def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """The plain one-token step: h [D] -> (out [D], the state after it), state not modified."""
    conv, S0 = state["conv"][IDX], state["rec"][IDX]  # [C, K], [H, dk, dv]
    x, q, k, v, g, beta, z = _inputs(m, h[None], conv, torch.tensor([-1]))
    o, S = gdn_tree.delta_step(S0.to(v.dtype), q[0], k[0], v[0], g[0], beta[0])  # [H, dv], [H, dk, dv]
    out = layout(m).output(m, o[None], z, h.dtype)[0]  # [D]
    return out, {"conv": {IDX: gdn_tree.commit_conv_state(conv, x)}, "rec": {IDX: S.to(S0.dtype)}}


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The one-pass tree forward: ancestor-window conv + tree WY. h [n, D], parents [n],
    anc [n, n] -> (out [n, D], record for ``commit``)."""
    conv, S0 = state["conv"][IDX], state["rec"][IDX]
    x, q, k, v, g, beta, z = _inputs(m, h, conv, parents)
    S0k = S0.to(v.dtype)  # [H, dk, dv] in the kernel dtype
    o, aux = gdn_tree.gated_delta_wy(q, k, v, g, beta, parents, S0=S0k, anc=anc, return_aux=True)  # [n, H, dv]
    out = layout(m).output(m, o, z, h.dtype)  # [n, D]
    return out, {"x": x, "conv": conv, "S0": S0k, "rec_dtype": S0.dtype, "aux": aux}


def commit(m, record: dict, path: list) -> dict:
    """The state after the last node of ``path`` (root..node): conv from the path's pre-conv
    inputs, recurrent state by (W1) from the WY pass (``gdn_tree.wy_state``)."""
    x = record["x"][torch.as_tensor(path, device=record["x"].device)]  # [L, C]
    S = gdn_tree.wy_state(record["aux"], record["S0"], list(path))  # [H, dk, dv]
    return {"conv": {IDX: gdn_tree.commit_conv_state(record["conv"], x)}, "rec": {IDX: S.to(record["rec_dtype"])}}
