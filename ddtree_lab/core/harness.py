"""The float64 proof's harness, apart from the code it tests.

``float64_harness()`` swaps the float32 casts of the stock modules (RMSNorms, eager softmax,
the MoE routers, the GDN kernels, Kimi Linear's forget gate) for dtype-preserving versions, and
the GDN family's ``kernel_dtype`` with them, so a float64 model computes in float64 end to end and
tree vs full forward can be compared to ~1e-14. The patches are found by name in every modeling
module of ``MODULES`` (``patches``): a module's ``eager_attention_forward`` and GDN kernels, its
``*RMSNorm`` (plain, or zero-centred: a weight initialised to zeros, used as 1 + w),
``*RMSNormGated`` (norm, weight, then the gate), softmax ``*TopKRouter`` and group-limited
sigmoid ``*TopkRouter`` (DeepSeek-V3's, Kimi Linear's) classes; the classes whose stock forward
their name does not tell, by their own name (``_NAMED``: Jamba's router, which never renormalises,
and Kimi Linear's forget gate). For tests and the proof notebooks only: nothing in the
decoding path imports this module or asks whether it is active.

What class and function swaps cannot reach stays outside: a cast inside a mixer's own forward
(Kimi Linear's ``last_recurrent_state.to(torch.float32)`` before its cache, the Mamba1 / Mamba2
mixers' ``A_log.float()``; the Mamba2 SSM kernels' ``.float()``), so the Mamba2 modules (Nemotron-H,
Falcon-H1, Granite-MoE-hybrid, Bamba, Zamba2, whose gated norms also gate before the norm) are
not listed, and the KDA tests add their own module-wide swap on top of this harness.

``timed_calls(targets, spent)`` is the other instrument that swaps module attributes: the
verify-cost breakdowns and the scripts time kernels through it, so the package patches a
module in this file only.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import time
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from .families.gdn import naive as gdn_naive, wy

# the modeling modules whose float32 casts the harness swaps (transformers.models.<name>.modeling_<name>)
MODULES = ("qwen3", "qwen3_moe", "llama", "qwen3_5", "qwen3_5_moe", "qwen3_next", "deepseek_v3",
           "olmo_hybrid", "kimi_linear", "minimax", "jamba")


def _same_dtype(dtype: torch.dtype) -> torch.dtype:
    """``wy.kernel_dtype`` under the harness: the kernels keep the model's dtype."""
    return dtype


def _rmsnorm_zero_centered(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.to(x.dtype))


def _rmsnorm_gated(self, h, gate):
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight.to(h.dtype) * h * ACT2FN[getattr(self, "activation", "silu")](gate.to(h.dtype))


def _rmsnorm_plain(self, h):
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight.to(h.dtype) * h


def _eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    rep = module.num_key_value_groups
    key, value = (t.repeat_interleave(rep, dim=1) if rep > 1 else t for t in (key, value))
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _softmax_router(self, h):
    """The Qwen3-MoE / Qwen3.5-MoE / Qwen3-Next / MiniMax ``*TopKRouter.forward`` without the
    float32 softmax (top-k of the softmax, renormalised where the router does: Qwen3.5-MoE's and
    MiniMax's always)."""
    h = h.reshape(-1, self.hidden_dim)
    logits = F.linear(h, self.weight.to(h.dtype))
    top, idx = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
    if getattr(self, "norm_topk_prob", True):
        top = top / top.sum(dim=-1, keepdim=True)
    return logits, top, idx


def _softmax_router_unnormalised(self, h):
    """``JambaTopKRouter.forward`` without the float32 softmax: the top-k of the softmax as they
    are (Jamba's router never renormalises them)."""
    logits = F.linear(h, self.weight.to(h.dtype))
    top, idx = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
    return logits, top, idx


def _forget_gate(self, h):
    """``KimiLinearForgetGate.forward`` without its ``.float()`` casts: h [B, T, D] -> the log
    decay [B, T, H, d] (the stock softplus, capped above 20)."""
    g = (self.f_b_proj(self.f_a_proj(h)) + self.dt_bias.to(h.dtype)).view(*h.shape[:2], -1, self.head_dim)
    return -self.A_log.to(h.dtype).exp() * torch.where(g > 20.0, g, torch.log(1.0 + torch.exp(g)))


def _router(self, h):
    """The DeepSeek-V3 / Kimi Linear ``*TopkRouter.forward`` without the float32 cast (the same
    group-limited top-k of the sigmoid scores)."""
    h = h.reshape(-1, self.hidden_dim)
    logits = F.linear(h, self.weight.to(h.dtype))
    scores = logits.sigmoid()
    choice = scores + self.e_score_correction_bias.to(h.dtype)
    per_group = self.num_experts // self.num_group
    group_scores = choice.view(-1, self.num_group, per_group).topk(min(2, per_group), dim=-1)[0].sum(-1)
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    keep = torch.zeros_like(group_scores).scatter_(1, group_idx, 1).bool()
    choice = choice.masked_fill(~keep.repeat_interleave(per_group, dim=1), float("-inf"))
    idx = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
    w = scores.gather(1, idx)
    if self.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return logits, w * self.routed_scaling_factor, idx


def _chunk_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                use_qk_l2norm_in_kernel=False, **kwargs):
    """Dtype-preserving stand-in for transformers' GDN kernels, via gdn_tree: each batch row
    (query [B, T, nk, dk]) on its own."""
    rows = [_chunk_rule_row(query[b], key[b], value[b], g[b], beta[b],
                            None if initial_state is None else initial_state[b]) for b in range(query.shape[0])]
    return torch.stack([o for o, _ in rows]), (torch.stack([S for _, S in rows]) if output_final_state else None)


def _chunk_rule_row(query, key, value, g, beta, S0):
    """One row of ``_chunk_rule``: query [T, nk, dk], value [T, H, dv], S0 [H, dk, dv] or None
    -> (o [T, H, dv], S [H, dk, dv])."""
    q, k = wy.normalize_qk(query, key, value.shape[1])
    S0 = S0 if S0 is not None else q.new_zeros(q.shape[1], q.shape[2], value.shape[-1])
    return gdn_naive.gated_delta_chain(q, k, value, g.to(q.dtype), beta.to(q.dtype), S0.to(q.dtype))


def _rmsnorm_patch(cls):
    """The dtype-preserving forward of an ``*RMSNorm`` class: zero-centred (1 + w) when a fresh
    one's weight is zeros (Qwen3.5, Qwen3-Next), plain (w) otherwise (Qwen3, Llama, DeepSeek-V3)."""
    fresh = cls(4)
    if not torch.all(fresh.weight == 0):
        return _rmsnorm_plain
    return _rmsnorm_zero_centered


# classes whose stock forward their name's ending does not tell, by their own name
_NAMED = {"JambaTopKRouter": _softmax_router_unnormalised, "KimiLinearForgetGate": _forget_gate}


def _module_patches(mod) -> list:
    """(object, attribute, replacement) for one modeling module, found by name."""
    out = [(mod, name, fn) for name, fn in (("eager_attention_forward", _eager_attention),
                                            ("torch_chunk_gated_delta_rule", _chunk_rule),
                                            ("torch_recurrent_gated_delta_rule", _chunk_rule))
           if hasattr(mod, name)]
    for name, obj in sorted(vars(mod).items()):
        if not isinstance(obj, type) or obj.__module__ != mod.__name__:
            continue  # imported, not defined here
        if name in _NAMED:
            out.append((obj, "forward", _NAMED[name]))
        elif name.endswith("RMSNormGated"):
            out.append((obj, "forward", _rmsnorm_gated))
        elif name.endswith("RMSNorm"):
            out.append((obj, "forward", _rmsnorm_patch(obj)))
        elif name.endswith("TopKRouter"):
            out.append((obj, "forward", _softmax_router))
        elif name.endswith("TopkRouter"):
            out.append((obj, "forward", _router))
    return out


@functools.lru_cache(maxsize=None)
def patches() -> tuple:
    """Every (object, attribute, replacement) the harness swaps: those found in ``MODULES`` and
    the GDN family's ``kernel_dtype``."""
    out = []
    for name in MODULES:
        out += _module_patches(importlib.import_module(f"transformers.models.{name}.modeling_{name}"))
    return tuple(out + [(wy, "kernel_dtype", _same_dtype)])


@contextlib.contextmanager
def swapped(swaps) -> Iterator[None]:
    """While open, each (object, attribute, replacement) of ``swaps`` is set; every attribute
    is restored on exit (also where the body raises)."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in swaps]
    try:
        for obj, name, fn in swaps:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in reversed(saved):
            setattr(obj, name, fn)


@contextlib.contextmanager
def float64_harness() -> Iterator[None]:
    """Swap the float32 casts of the stock modules for dtype-preserving versions (``patches``).

    For tests and the proof notebook only: with it, a float64 model computes in float64 end
    to end, so tree vs full forward can be compared to ~1e-14.
    """
    with swapped(patches()):
        yield


@contextlib.contextmanager
def timed_calls(targets, spent: dict, clock=time.perf_counter) -> Iterator[dict]:
    """While open, every call of ``owner.name`` for (owner, name, key) in ``targets`` (a module
    or class attribute) adds its wall milliseconds to ``spent[key]``; ``clock``: a timer (one
    that syncs the device first, on a GPU). Every attribute is restored on exit."""
    saved = [(owner, name, getattr(owner, name), key) for owner, name, key in targets]

    def wrap(fn, key):
        def timed_call(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + 1e3 * (clock() - start)
        return timed_call
    try:
        for owner, name, fn, key in saved:
            setattr(owner, name, wrap(fn, key))
        yield spent
    finally:
        for owner, name, fn, _ in saved:
            setattr(owner, name, fn)
