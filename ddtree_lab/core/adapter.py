"""The one place that touches `transformers` internals (pinned: transformers==5.23.0).

- Gated DeltaNet layers (``GDN_CLASSES``: Qwen3.5's, Qwen3.5-MoE's (the same layout under
  another name) and Qwen3-Next's (q|k|v|z and b|a fused per key-head group, unfused by its own
  ``fix_query_key_value_ordering``)): the input projections, the conv weight, the q/k/v split
  with its l2 norms, the gates, and the gated-RMSNorm output projection; ``route_gdn_trees``
  gives them, once per model, a route to the lab's tree layer;
- ``TEXT_CLASSES``: the text causal LM of a ``config.json`` model type whose
  ``AutoModelForCausalLM`` class is not it;
- the stock ``DynamicCache`` after a prefill: attention K/V (MLA stores its compressed latents
  there), GDN conv and recurrent states;
- ``kernel_dtype``: the dtype the stock GDN kernels compute in (the float64 proof's harness,
  ``harness.float64_harness``, lives in its own module and swaps it);
- ``packed_attention``: the attention of a packed verify (``verify.tree_forward``), registered
  in transformers' ``AttentionInterface`` and switched on for that forward only
  (``packed_attention_on``).

``check_internals()`` fails loudly if the pinned version changed any of these.
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dsv3
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as qwen35moe
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3next

from transformers import AttentionInterface

from . import batched, gdn_tree

PINNED_TRANSFORMERS = "5.23.0"


def decoder_layers(model):
    return model.model.layers


# the stock Gated DeltaNet layer classes the tree paths run (``models.layer_kinds`` reads
# their names); Qwen3.5-MoE's is Qwen3.5's code under another name, Qwen3-Next's differs only
# in its fused input projections (``gdn_project``)
GDN_CLASSES = (qwen35.Qwen3_5GatedDeltaNet, qwen35moe.Qwen3_5MoeGatedDeltaNet, qwen3next.Qwen3NextGatedDeltaNet)

# config.json model types whose ``AutoModelForCausalLM`` class is not the text model (the
# Qwen3.5 types name the vision-language model; Kimi K2's own type is DeepSeek-V3's
# architecture under another name)
TEXT_CLASSES = {"qwen3_5": qwen35.Qwen3_5ForCausalLM, "qwen3_5_text": qwen35.Qwen3_5ForCausalLM,
                "qwen3_5_moe": qwen35moe.Qwen3_5MoeForCausalLM, "qwen3_5_moe_text": qwen35moe.Qwen3_5MoeForCausalLM,
                "kimi_k2": dsv3.DeepseekV3ForCausalLM}


def gdn_modules(model) -> dict[int, torch.nn.Module]:
    """{layer index: its Gated DeltaNet layer of ``GDN_CLASSES``} (empty for attention-only models;
    OLMo-Hybrid's GDN, whose projections differ, runs through its family, ``family_modules``)."""
    return {i: layer.linear_attn for i, layer in enumerate(decoder_layers(model))
            if isinstance(getattr(layer, "linear_attn", None), GDN_CLASSES)}


def family_modules(model) -> dict[int, tuple]:
    """{layer index: (mixer, family module)} of the recurrent layers the fast loop runs through
    their family's one-pass tree form (``core/families``): every one not in ``GDN_CLASSES``."""
    from . import families  # late: the families' gdn module imports this adapter
    return {i: (m, fam) for i, (m, fam) in families.recurrent_mixers(model).items() if not isinstance(m, GDN_CLASSES)}


def route_family_trees(model) -> dict[int, tuple]:
    """Give every mixer of ``family_modules`` the tree route (``families.TreeRoute``), once; ->
    ``family_modules(model)``."""
    from . import families  # late: the families' gdn module imports this adapter
    mods = _ROUTED_FAMILIES.get(model)
    if mods is None:
        mods = family_modules(model)
        for m, _ in mods.values():
            m.__class__ = families.route_class(type(m))
        _ROUTED_FAMILIES[model] = mods
    return mods


class TreeRoute:
    """The stock layer with one more route: handed a cache that runs GDN layers on trees (one
    with a ``gdn_tree_layer(layer, hidden_states [B, T, D]) -> [B, T, D]`` method,
    ``verify.TreeBatch``), the layer runs there; with any other cache it is the stock forward.
    Mixed in before a stock GDN class (``tree_class``)."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        route = getattr(cache_params, "gdn_tree_layer", None)
        if route is None:
            return super().forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        return route(self, hidden_states)


class TreeGatedDeltaNet(TreeRoute, qwen35.Qwen3_5GatedDeltaNet):
    """Qwen3.5's GDN layer with the tree route."""


_TREE_CLASSES: dict[type, type] = {qwen35.Qwen3_5GatedDeltaNet: TreeGatedDeltaNet}


def tree_class(cls: type) -> type:
    """The routed twin of a GDN layer class (``TreeRoute`` mixed in before it), made once per
    class; a class that already has the route is its own twin."""
    if issubclass(cls, TreeRoute):
        return cls
    if cls not in _TREE_CLASSES:
        _TREE_CLASSES[cls] = type(f"Tree{cls.__name__}", (TreeRoute, cls), {"__module__": __name__})
    return _TREE_CLASSES[cls]


def route_gdn_trees(model) -> dict[int, torch.nn.Module]:
    """Give every GDN layer of ``model`` the tree route (``TreeGatedDeltaNet``), once: the
    weights, the stock behaviour and the state dict are unchanged; -> ``gdn_modules(model)``.
    The walk over the layers runs once per model: later calls return what it found."""
    mods = _ROUTED.get(model)
    if mods is None:
        mods = gdn_modules(model)
        for m in mods.values():
            if isinstance(m, GDN_CLASSES):
                m.__class__ = tree_class(type(m))
        _ROUTED[model] = mods
    return mods


_ROUTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its routed GDN layers
_ROUTED_FAMILIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its routed family mixers


GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what transformers' grouped_mm takes


def experts_setting(model) -> str | None:
    """The model's experts implementation (transformers' ``set_experts_implementation``), None
    when it has no mixture-of-experts layers."""
    has_experts = any(hasattr(type(m), "_apply_gate") for m in model.modules())
    return model.config._experts_implementation if has_experts else None


@contextlib.contextmanager
def loop_ready(model) -> Iterator[None]:
    """The kernels every lab loop runs its target on (AR, speculative, eager and compiled), the
    model's own settings restored on exit:
    - mixture-of-experts layers as transformers' ``grouped_mm`` (one grouped matmul over the
      routed tokens) instead of the eager loop over experts: at a verify of 9-65 tokens on the
      shipped MLA target it costs 0.85-0.88x, with the same logits bit for bit on this CPU
      (``core/tests/test_loop_ready.py``), and it has no data-dependent shapes, so a compiled
      forward has no graph break there;
    - Gated DeltaNet layers take their tree route first (``route_gdn_trees``, once per model),
      so the AR step and the verify run (and compile) on the same layer classes.
    Other models, and float64 ones (``grouped_mm`` takes float32 and 16-bit floats only: the
    float64 proofs keep the eager experts), are left as they are."""
    route_gdn_trees(model)
    route_family_trees(model)
    before = experts_setting(model)
    if before is None or before == "grouped_mm" or next(model.parameters()).dtype not in GROUPED_DTYPES:
        yield
        return
    model.set_experts_implementation("grouped_mm")
    try:
        yield
    finally:
        model.set_experts_implementation(before)


# --- the packed verify's attention ------------------------------------------------------
PACKED_ATTENTION = "ddtree_packed"


def packed_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, *, tree_rows, **kwargs):
    """The attention of a packed verify: the module's own eager attention, per sequence.

    query [1, h, N, d]: the N tree rows of B trees side by side; key, value [B, hk, S, d]: each
    sequence's committed rows then its tree rows (``verify.TreeBatch.update``); attention_mask
    [B, 1, T, S]; tree_rows LongTensor[N] (``batched.packed_rows``). The query rows are
    unpacked to [B, h, T, d], attended as a padded batch and packed back: -> (out [1, N, h, dv],
    None)."""
    B, T = attention_mask.shape[0], attention_mask.shape[2]
    eager = sys.modules[type(module).__module__].eager_attention_forward
    out, _ = eager(module, batched.unpack(query, tree_rows, B, T, 2), key, value, attention_mask, scaling, dropout)
    return batched.pack(out, tree_rows, 1), None  # out [B, T, h, dv]


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


@contextlib.contextmanager
def packed_attention_on(model, on: bool = True) -> Iterator[None]:
    """``model``'s attention layers run ``packed_attention`` inside the block (``on``), their
    own implementation restored on exit."""
    if not on:
        yield
        return
    before = model.config._attn_implementation
    model.config._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        model.config._attn_implementation = before


# --- Gated DeltaNet pieces --------------------------------------------------------------
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
    q, k = gdn_tree.normalize_qk(q.reshape(T, m.num_k_heads, m.head_k_dim),
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


# --- stock cache -> plain tensors --------------------------------------------------------
def read_hf_cache(model, hf_cache, row: int = 0, first: int = 0) -> dict:
    """{'kv': {layer: (keys, values)}, 'conv': {layer: [C, K]}, 'rec': {layer: [H, dk, dv]},
    'states': {layer: a family's state}} of batch row ``row``, its attention rows from ``first``
    on (a left-padded row's own): kv of every cache layer holding keys (attention in
    ``self_attn``, Nemotron-H's ``mixer``, Zamba2's shared block, Falcon-H1's beside its Mamba),
    conv / rec of the ``GDN_CLASSES`` layers, states of the other families' layers."""
    out = {"kv": {}, "conv": {}, "rec": {}, "states": {}}
    for i, layer in enumerate(hf_cache.layers):
        if getattr(layer, "keys", None) is None or not getattr(layer, "is_initialized", False):
            continue
        out["kv"][i] = tuple(t[row:row + 1, :, first:] for t in (layer.keys, layer.values))  # [1, h, T, d] (MLA: latents, h = 1)
    from . import families  # late: the families' gdn module imports this adapter
    for i, (_, fam) in family_modules(model).items():
        out["states"][i] = families.state_of(fam, hf_cache, i, row)
    for i in gdn_modules(model):
        out["conv"][i] = hf_cache.get_conv_state(i)[row].clone()       # [C, K]
        out["rec"][i] = hf_cache.get_recurrent_state(i)[row].clone()   # [H, dk, dv]
    return out


# --- the stock kernels' compute dtype -----------------------------------------------------
def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype transformers' GDN kernels compute in for a model of ``dtype``: float32 always
    (the stock layer casts). ``harness.float64_harness`` swaps this for the identity, with the
    kernels themselves."""
    return torch.float32


def check_internals() -> None:
    """Raise if the pinned transformers changed what this adapter relies on."""
    problems = []
    version = sys.modules["transformers"].__version__  # the live module: importing some model classes replaces it
    if version != PINNED_TRANSFORMERS:
        problems.append(f"transformers {version} != pinned {PINNED_TRANSFORMERS}")
    gdn_attrs = ["conv1d", "A_log", "dt_bias", "norm", "out_proj", "key_dim", "value_dim", "head_k_dim",
                 "head_v_dim", "num_k_heads", "num_v_heads", "conv_kernel_size", "layer_idx"]
    projections = {qwen3next.Qwen3NextGatedDeltaNet: ["in_proj_qkvz", "in_proj_ba", "fix_query_key_value_ordering"]}
    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                 linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
                 linear_value_head_dim=8, vocab_size=16)
    configs = {qwen35.Qwen3_5GatedDeltaNet: qwen35.Qwen3_5TextConfig,
               qwen35moe.Qwen3_5MoeGatedDeltaNet: qwen35moe.Qwen3_5MoeTextConfig,
               qwen3next.Qwen3NextGatedDeltaNet: qwen3next.Qwen3NextConfig}
    for cls in GDN_CLASSES:
        m = cls(configs[cls](**shape), 0)
        attrs = gdn_attrs + projections.get(cls, ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b"])
        problems += [f"{cls.__name__} lost .{a}" for a in attrs if not hasattr(m, a)]
    for obj, name in [(qwen35, "l2norm"), (qwen35, "torch_chunk_gated_delta_rule"),
                      (qwen35, "eager_attention_forward"), (dsv3, "eager_attention_forward"),
                      (qwen35moe, "eager_attention_forward"), (qwen3next, "eager_attention_forward"),
                      (qwen35moe, "torch_chunk_gated_delta_rule"), (qwen3next, "torch_chunk_gated_delta_rule"),
                      (dsv3.DeepseekV3TopkRouter, "forward")]:
        if not hasattr(obj, name):
            problems.append(f"{getattr(obj, '__name__', obj)}.{name} is gone")
    if problems:
        raise RuntimeError("transformers internals changed: " + "; ".join(problems))
