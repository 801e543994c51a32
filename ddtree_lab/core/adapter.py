"""What the lab relies on in `transformers` internals (pinned: transformers==5.23.0), and the
text model classes it loads.

- ``TEXT_CLASSES``: the text causal LM of a ``config.json`` model type whose
  ``AutoModelForCausalLM`` class is not it;
- ``check_internals()`` fails loudly if the pinned version changed what the lab reads: the
  Gated DeltaNet layers' attributes (``families/gdn/wy.py`` computes from them), the stock
  kernels the float64 harness swaps, the attention functions the packed verify calls.

The loop's own contact points live where they run: the routes, the stock cache read after a
prefill and the packed attention in ``verify.py``; the GDN layer pieces in ``families/gdn``.
"""
from __future__ import annotations

import sys

from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dsv3
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as qwen35moe
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3next


PINNED_TRANSFORMERS = "5.23.0"


def decoder_layers(model):
    return model.model.layers


# config.json model types whose ``AutoModelForCausalLM`` class is not the text model (the
# Qwen3.5 types name the vision-language model; Kimi K2's own type is DeepSeek-V3's
# architecture under another name)
TEXT_CLASSES = {"qwen3_5": qwen35.Qwen3_5ForCausalLM, "qwen3_5_text": qwen35.Qwen3_5ForCausalLM,
                "qwen3_5_moe": qwen35moe.Qwen3_5MoeForCausalLM, "qwen3_5_moe_text": qwen35moe.Qwen3_5MoeForCausalLM,
                "kimi_k2": dsv3.DeepseekV3ForCausalLM}


# --- the packed verify's attention ------------------------------------------------------


# --- Gated DeltaNet pieces --------------------------------------------------------------


# --- stock cache -> plain tensors --------------------------------------------------------


# --- the stock kernels' compute dtype -----------------------------------------------------


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
    from .families.gdn.wy import GDN_CLASSES  # late: the families import the package's modules
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
