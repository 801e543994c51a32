"""The one place that touches `transformers` internals (pinned: transformers==5.23.0).

- Gated DeltaNet layers (``Qwen3_5GatedDeltaNet``): the input projections, the conv weight,
  the q/k/v split with its l2 norms, the gates, and the gated-RMSNorm output projection;
  ``route_gdn_trees`` gives them, once per model, a route to the lab's tree layer;
- the stock ``DynamicCache`` after a prefill: attention K/V (MLA stores its compressed latents
  there), GDN conv and recurrent states;
- ``float64_harness()``: swaps the casts to float32 inside RMSNorms, eager softmax, the MoE
  router and the GDN kernel for dtype-preserving versions (tests and the proof notebook only).

``check_internals()`` fails loudly if the pinned version changed any of these.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dsv3
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35

from . import gdn_tree

PINNED_TRANSFORMERS = "5.23.0"


def decoder_layers(model):
    return model.model.layers


def gdn_modules(model) -> dict[int, torch.nn.Module]:
    """{layer index: Qwen3_5GatedDeltaNet} (empty for attention-only models)."""
    return {i: layer.linear_attn for i, layer in enumerate(decoder_layers(model))
            if getattr(layer, "linear_attn", None) is not None}


class TreeGatedDeltaNet(qwen35.Qwen3_5GatedDeltaNet):
    """The stock layer with one more route: handed a cache that runs GDN layers on trees (one
    with a ``gdn_tree_layer(layer, hidden_states [B, T, D]) -> [B, T, D]`` method,
    ``verify.TreeBatch``), the layer runs there; with any other cache it is the stock forward."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        route = getattr(cache_params, "gdn_tree_layer", None)
        if route is None:
            return super().forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        return route(self, hidden_states)


def route_gdn_trees(model) -> dict[int, torch.nn.Module]:
    """Give every GDN layer of ``model`` the tree route (``TreeGatedDeltaNet``), once: the
    weights, the stock behaviour and the state dict are unchanged; -> ``gdn_modules(model)``."""
    mods = gdn_modules(model)
    for m in mods.values():
        if type(m) is qwen35.Qwen3_5GatedDeltaNet:
            m.__class__ = TreeGatedDeltaNet
    return mods


def attention_layer_ids(model) -> list[int]:
    return [i for i, layer in enumerate(decoder_layers(model)) if hasattr(layer, "self_attn")]


# --- Gated DeltaNet pieces --------------------------------------------------------------
def gdn_project(m, h: torch.Tensor):
    """h [T, D] -> x [T, C] (pre-conv q|k|v), z [T, H, dv], a [T, H], b [T, H]."""
    return (m.in_proj_qkv(h), m.in_proj_z(h).reshape(h.shape[0], -1, m.head_v_dim),
            m.in_proj_a(h), m.in_proj_b(h))


def gdn_conv_weight(m) -> torch.Tensor:
    """[C, K] depthwise causal conv weight (no bias in Qwen3.5)."""
    return m.conv1d.weight.squeeze(1)


def gdn_qkv(m, y: torch.Tensor):
    """Post-conv y [T, C] -> q, k [T, H, dk] (l2-normalised, q scaled, expanded to H value
    heads) and v [T, H, dv], as transformers' kernels see them."""
    T = y.shape[0]
    if not harness_active():  # the stock kernels run in float32 whatever the model dtype
        y = y.float()
    q, k, v = torch.split(y, [m.key_dim, m.key_dim, m.value_dim], dim=-1)
    q, k = gdn_tree.normalize_qk(q.reshape(T, m.num_k_heads, m.head_k_dim),
                                 k.reshape(T, m.num_k_heads, m.head_k_dim), m.num_v_heads)
    return q, k, v.reshape(T, m.num_v_heads, m.head_v_dim)


def gdn_gates(m, a: torch.Tensor, b: torch.Tensor):
    """a, b [T, H] -> log decay g [T, H] and beta [T, H], computed as transformers does.

    g is float32 even in a float64 model (the stock layer casts ``a``); the harness keeps that
    cast, since the stock full forward it is compared with keeps it too.
    """
    g = -m.A_log.float().exp() * F.softplus(a.float() + m.dt_bias)
    if harness_active():
        return g.to(a.dtype), b.sigmoid()
    return g.float(), b.sigmoid().float()


def gdn_output(m, o: torch.Tensor, z: torch.Tensor, dtype) -> torch.Tensor:
    """o [T, H, dv], z [T, H, dv] -> the layer output [T, D]."""
    o = m.norm(o.to(dtype).reshape(-1, m.head_v_dim), z.reshape(-1, m.head_v_dim))
    return m.out_proj(o.reshape(z.shape[0], -1))


# --- stock cache -> plain tensors --------------------------------------------------------
def read_hf_cache(model, hf_cache) -> dict:
    """{'kv': {layer: (keys, values)}, 'conv': {layer: [C, K]}, 'rec': {layer: [H, dk, dv]}}."""
    out = {"kv": {}, "conv": {}, "rec": {}}
    for i in attention_layer_ids(model):
        layer = hf_cache.layers[i]
        out["kv"][i] = (layer.keys, layer.values)  # [1, h, T, d] (MLA: latents, h = 1)
    for i in gdn_modules(model):
        out["conv"][i] = hf_cache.get_conv_state(i)[0].clone()       # [C, K]
        out["rec"][i] = hf_cache.get_recurrent_state(i)[0].clone()   # [H, dk, dv]
    return out


# --- float64 harness -----------------------------------------------------------------------
def _rmsnorm_zero_centered(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.to(x.dtype))


def _rmsnorm_gated(self, h, gate):
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight.to(h.dtype) * h * F.silu(gate.to(h.dtype))


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


def _router(self, h):
    """DeepseekV3TopkRouter.forward without the float32 cast (same group-limited top-k)."""
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
    """Dtype-preserving stand-in for transformers' GDN kernels (batch 1), via gdn_tree."""
    q, k = gdn_tree.normalize_qk(query[0], key[0], value.shape[2])
    S0 = initial_state[0] if initial_state is not None else q.new_zeros(q.shape[1], q.shape[2], value.shape[-1])
    o, S = gdn_tree.gated_delta_chain(q, k, value[0], g[0].to(q.dtype), beta[0].to(q.dtype), S0.to(q.dtype))
    return o[None], (S[None] if output_final_state else None)


def harness_active() -> bool:
    """True inside ``float64_harness()``: read from the patched functions themselves, so there
    is no flag of our own to keep in sync."""
    return dsv3.DeepseekV3RMSNorm.forward is _rmsnorm_plain


@contextlib.contextmanager
def float64_harness() -> Iterator[None]:
    """Swap the float32 casts of the stock modules for dtype-preserving versions.

    For tests and the proof notebook only: with it, a float64 model computes in float64 end
    to end, so tree vs full forward can be compared to ~1e-14.
    """
    patches = [(qwen35.Qwen3_5RMSNorm, "forward", _rmsnorm_zero_centered),
               (qwen35.Qwen3_5RMSNormGated, "forward", _rmsnorm_gated),
               (dsv3.DeepseekV3RMSNorm, "forward", _rmsnorm_plain),
               (qwen35, "eager_attention_forward", _eager_attention),
               (dsv3, "eager_attention_forward", _eager_attention),
               (dsv3.DeepseekV3TopkRouter, "forward", _router),
               (qwen35, "torch_chunk_gated_delta_rule", _chunk_rule),
               (qwen35, "torch_recurrent_gated_delta_rule", _chunk_rule)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


def check_internals() -> None:
    """Raise if the pinned transformers changed what this adapter relies on."""
    import transformers
    problems = []
    if transformers.__version__ != PINNED_TRANSFORMERS:
        problems.append(f"transformers {transformers.__version__} != pinned {PINNED_TRANSFORMERS}")
    gdn_attrs = ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "conv1d", "A_log", "dt_bias",
                 "norm", "out_proj", "key_dim", "value_dim", "head_k_dim", "head_v_dim",
                 "num_k_heads", "num_v_heads", "conv_kernel_size"]
    cfg = qwen35.Qwen3_5TextConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=16, linear_num_key_heads=1,
                                   linear_num_value_heads=2, linear_key_head_dim=8,
                                   linear_value_head_dim=8, vocab_size=16)
    m = qwen35.Qwen3_5GatedDeltaNet(cfg, 0)
    problems += [f"Qwen3_5GatedDeltaNet lost .{a}" for a in gdn_attrs if not hasattr(m, a)]
    for obj, name in [(qwen35, "l2norm"), (qwen35, "torch_chunk_gated_delta_rule"),
                      (qwen35, "eager_attention_forward"), (dsv3, "eager_attention_forward"),
                      (dsv3.DeepseekV3TopkRouter, "forward")]:
        if not hasattr(obj, name):
            problems.append(f"{getattr(obj, '__name__', obj)}.{name} is gone")
    if problems:
        raise RuntimeError("transformers internals changed: " + "; ".join(problems))
