"""Full-width layers of the published targets: a few real-size layers, random init, saved as a
checkpoint directory and loaded back through ``models.load_target`` as a real model would be.

Every per-layer shape comes from a published config.json (sources cited beside each number);
only the number of layers, the vocabulary (embedding and lm_head are not layer shapes) and,
for the MoE, the number of routed experts (so that the layer fits in this machine's memory)
are cut down:

- ``"qwen3.5-27b"``: ``Qwen3_5ForCausalLM``, the Qwen3.5/3.6-27B text stack.
  Source: https://huggingface.co/Qwen/Qwen3.5-27B/blob/main/config.json (``text_config``;
  Qwen3.6-27B publishes the same text stack). Layers follow the published 3:1 pattern
  (``full_attention_interval`` 4: three Gated DeltaNet layers, then one gated attention layer).
- ``"kimi-k2.6"``: ``DeepseekV3ForCausalLM``, the Kimi K2.6 text stack (continued pretraining
  of Kimi-K2-Base, same architecture). Source:
  https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json; the MLA ranks and
  dims are DeepSeek-V3's (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json),
  which has 128 heads and 256 experts where Kimi K2 has 64 and 384.

    model = build_full_size("qwen3.5-27b", num_layers=4)
    path = save_checkpoint(model, tmp_dir)            # save_pretrained, safetensors
    model = load_target(path)                         # the lab's own loader
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import DeepseekV3Config, DynamicCache, Qwen3_5TextConfig

from ...core.models import _model_class

# --- Qwen3.5-27B text_config (huggingface.co/Qwen/Qwen3.5-27B, config.json) -----------------
QWEN35_27B = dict(
    hidden_size=5120,             # "hidden_size": 5120
    intermediate_size=17408,      # "intermediate_size": 17408
    num_attention_heads=24,       # "num_attention_heads": 24
    num_key_value_heads=4,        # "num_key_value_heads": 4
    head_dim=256,                 # "head_dim": 256
    linear_num_key_heads=16,      # "linear_num_key_heads": 16
    linear_num_value_heads=48,    # "linear_num_value_heads": 48
    linear_key_head_dim=128,      # "linear_key_head_dim": 128
    linear_value_head_dim=128,    # "linear_value_head_dim": 128
    linear_conv_kernel_dim=4,     # "linear_conv_kernel_dim": 4
    rms_norm_eps=1e-6,            # "rms_norm_eps": 1e-06
    max_position_embeddings=262144,  # "max_position_embeddings": 262144
    tie_word_embeddings=False,    # "tie_word_embeddings": false
    # "rope_parameters": partial_rotary_factor 0.25 (64 of 256 dims rotated), theta 1e7,
    # mrope_section [11, 11, 10] (text-only positions make the three sections equal)
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [11, 11, 10], "mrope_interleaved": True},
)
QWEN35_27B_LAYERS = 64            # "num_hidden_layers": 64 (48 linear_attention + 16 full_attention)
QWEN35_FULL_ATTENTION_INTERVAL = 4  # "full_attention_interval": 4

# --- Kimi K2 / K2.6 (huggingface.co/moonshotai/Kimi-K2-Instruct, config.json) ---------------
KIMI_K2 = dict(
    hidden_size=7168,             # "hidden_size": 7168 (DeepSeek-V3: same)
    intermediate_size=18432,      # "intermediate_size": 18432 (dense layers; DeepSeek-V3: same)
    num_attention_heads=64,       # "num_attention_heads": 64 (DeepSeek-V3: 128)
    num_key_value_heads=64,       # "num_key_value_heads": 64
    q_lora_rank=1536,             # "q_lora_rank": 1536 (DeepSeek-V3: same)
    kv_lora_rank=512,             # "kv_lora_rank": 512
    qk_rope_head_dim=64,          # "qk_rope_head_dim": 64
    qk_nope_head_dim=128,         # "qk_nope_head_dim": 128
    v_head_dim=128,               # "v_head_dim": 128
    moe_intermediate_size=2048,   # "moe_intermediate_size": 2048 (the expert width)
    num_experts_per_tok=8,        # "num_experts_per_tok": 8 (top-k)
    n_shared_experts=1,           # "n_shared_experts": 1
    n_group=1, topk_group=1,      # "n_group": 1, "topk_group": 1 (DeepSeek-V3: 8, 4)
    first_k_dense_replace=1,      # "first_k_dense_replace": 1 (DeepSeek-V3: 3)
    routed_scaling_factor=2.827,  # "routed_scaling_factor": 2.827 (DeepSeek-V3: 2.5)
    norm_topk_prob=True,          # "norm_topk_prob": true
    rms_norm_eps=1e-6,            # "rms_norm_eps": 1e-06
    tie_word_embeddings=False,    # "tie_word_embeddings": false
    max_position_embeddings=262144,  # K2.6's published context (K2-Instruct: 131072)
    # "rope_theta": 50000.0; the YaRN scaling (factor 64) changes only the frequencies
    rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
    rope_interleave=True,
)
KIMI_K2_ROUTED_EXPERTS = 384      # "n_routed_experts": 384 (cut down here, see FullSizeConfig)
KIMI_K2_LAYERS = 61               # "num_hidden_layers": 61


@dataclass(frozen=True)
class FullSizeConfig:
    """A few published-width layers. vocab_size, num_layers and num_experts are the only cuts."""

    name: str
    arch: str
    num_layers: int
    vocab_size: int = 2048
    num_experts: int = 16        # routed experts (MLA); Kimi K2 has 384, top-8 of 16 still routes
    dense_layers: int = 1        # first_k_dense_replace (MLA)
    # None = published. The test suite cuts the per-token MLP widths (dense MLP, expert) to fit
    # its time budget; the attention / GDN / MLA shapes, the only ones verify touches, stay.
    mlp_width: int | None = None
    expert_width: int | None = None

    def widths(self) -> dict:
        base = QWEN35_27B if self.arch == "gdn" else KIMI_K2
        out = {"intermediate_size": self.mlp_width or base["intermediate_size"]}
        if self.arch == "mla":
            out["moe_intermediate_size"] = self.expert_width or KIMI_K2["moe_intermediate_size"]
        return out

    def hf_config(self):
        if self.arch == "gdn":
            return Qwen3_5TextConfig(vocab_size=self.vocab_size, num_hidden_layers=self.num_layers,
                                     layer_types=qwen35_layer_types(self.num_layers),
                                     **{**QWEN35_27B, **self.widths()})
        return DeepseekV3Config(vocab_size=self.vocab_size, num_hidden_layers=self.num_layers,
                                n_routed_experts=self.num_experts,
                                **{**KIMI_K2, "first_k_dense_replace": self.dense_layers, **self.widths()})


def qwen35_layer_types(num_layers: int) -> list[str]:
    """The published pattern cut to ``num_layers``: linear x3, full, linear x3, full, ...; a model
    of fewer than 4 layers keeps one full-attention layer last so both layer kinds are present."""
    types = ["linear_attention" if (i + 1) % QWEN35_FULL_ATTENTION_INTERVAL else "full_attention"
             for i in range(num_layers)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    return types


FULL_SIZE_PRESETS: dict[str, FullSizeConfig] = {
    "qwen3.5-27b": FullSizeConfig("qwen3.5-27b", "gdn", num_layers=4),
    "kimi-k2.6": FullSizeConfig("kimi-k2.6", "mla", num_layers=2),
}


def full_size_config(preset: str | FullSizeConfig, **changes) -> FullSizeConfig:
    """A preset by name (or a config) with fields replaced, e.g. ``num_layers=2``."""
    if isinstance(preset, str):
        if preset not in FULL_SIZE_PRESETS:
            raise ValueError(f"preset must be one of {sorted(FULL_SIZE_PRESETS)}, got {preset!r}")
        preset = FULL_SIZE_PRESETS[preset]
    return replace(preset, **changes)


def build_full_size(preset: str | FullSizeConfig, *, dtype=torch.float32, seed: int = 0, **changes):
    """A freshly initialised full-width model (eager attention, eager experts), in eval mode."""
    cfg = full_size_config(preset, **changes)
    torch.manual_seed(seed)
    hf = cfg.hf_config()
    hf._attn_implementation = "eager"
    if cfg.arch == "mla":
        hf._experts_implementation = "eager"
    return _model_class(cfg.arch)(hf).to(dtype).eval()


def save_checkpoint(model, path: str | Path) -> Path:
    """``save_pretrained`` (safetensors) into ``path``; returns the directory."""
    path = Path(path)
    model.save_pretrained(path)
    return path


GDN_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                  "linear_value_head_dim", "linear_conv_kernel_dim")
MLA_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                  "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "moe_intermediate_size",
                  "num_experts_per_tok", "n_shared_experts")


def layer_shapes(model) -> dict:
    """The per-layer numbers the presets promise, read back from a loaded model's config."""
    c = model.config
    if c.model_type.startswith("qwen3_5"):
        return {k: getattr(c, k) for k in GDN_SHAPE_KEYS} | {
            "partial_rotary_factor": c.rope_parameters["partial_rotary_factor"]}
    return {k: getattr(c, k) for k in MLA_SHAPE_KEYS}


def published_shapes(arch: str) -> dict:
    """What ``layer_shapes`` must return for a full-size model of ``arch`` ("gdn" or "mla")."""
    if arch == "gdn":
        return {k: QWEN35_27B[k] for k in GDN_SHAPE_KEYS} | {
            "partial_rotary_factor": QWEN35_27B["rope_parameters"]["partial_rotary_factor"]}
    return {k: KIMI_K2[k] for k in MLA_SHAPE_KEYS}


# ----------------------------------------------------------------------------- the oracle

def leaves(tree) -> list[int]:
    """Nodes without children, in order."""
    has_child = torch.zeros(len(tree), dtype=torch.bool)
    has_child[tree.parents[1:]] = True
    return [i for i in range(len(tree)) if not has_child[i]]


@torch.no_grad()
def stock_tree_logits(model, prefix_ids, tree) -> torch.Tensor:
    """The stock twin of ``verify.tree_logits`` [N+1, V]: transformers' own forward with its own
    ``DynamicCache``, one root-to-leaf path at a time (every node lies on some leaf's path).

    The prefix is prefilled once (stock chunked GDN kernel); each leaf's path continues a deep
    copy of that cache. Cheaper than one uncached forward per node at full width; its
    agreement with the uncached forward is checked separately (``stock_path_logits``).
    """
    device = next(model.parameters()).device
    prefix = torch.as_tensor(prefix_ids, dtype=torch.long).reshape(1, -1).to(device)
    cache = DynamicCache(config=model.config)
    model(prefix, past_key_values=cache, use_cache=True)
    out = torch.empty(len(tree), model.config.vocab_size, dtype=next(model.parameters()).dtype, device=device)
    for leaf in leaves(tree):
        path = tree.path_to(leaf)
        logits = model(tree.tokens[path][None].to(device), past_key_values=copy.deepcopy(cache), use_cache=True).logits
        out[path] = logits[0]
    return out


@torch.no_grad()
def stock_path_logits(model, prefix_ids, tree, node: int) -> torch.Tensor:
    """The uncached stock forward over prefix + path(node): logits [depth+1, V] of the path's
    nodes (row j = after the path's first j+1 tokens)."""
    path = tree.path_to(node)
    ids = torch.cat([torch.as_tensor(prefix_ids, dtype=torch.long).reshape(-1), tree.tokens[path]])
    logits = model(ids[None].to(next(model.parameters()).device)).logits[0]
    return logits[-len(path):]


def relative_error(ref: torch.Tensor, out: torch.Tensor) -> float:
    """max |ref - out| / max |ref| (logits of random full-width layers are O(1-10))."""
    return ((ref.float() - out.float()).abs().max() / ref.float().abs().max()).item()
