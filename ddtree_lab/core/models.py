"""Tiny targets built from the real `transformers` architecture classes.

Two named presets (one frozen dataclass per model config and a small table of presets):
- ``"gdn"``: ``Qwen3_5ForCausalLM`` (Qwen3.5/3.6 text stack): Gated DeltaNet layers and full
  attention 3:1, causal conv kernel 4, grouped key/value heads (docs/background.md section 4).
- ``"mla"``: ``DeepseekV3ForCausalLM`` (Kimi K2.6 / DeepSeek-V3): MLA with low-rank q/kv and a
  rope/nope split, MoE with one shared expert, first layer dense.

``load_target(path)`` loads any local HF checkpoint directory of a causal LM whose layers the
lab verifies exactly (``layer_kinds``: softmax attention of any form, the Gated DeltaNet of Qwen3.5,
Qwen3.5-MoE and Qwen3-Next), so the same code runs a real Qwen3.6, Kimi, Qwen3 or Llama checkpoint.
Anything else is refused from its config and module classes before a weight is read, with its
reason: a sliding window that cuts (``check_window``), a Mamba / SSM mixer, a layer type outside
``LAYER_TYPES``, an unrouted recurrent layer.
"""
from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (AutoConfig, AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3_5ForCausalLM,
                          Qwen3_5TextConfig)
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from . import adapter, families
from .adapter import decoder_layers
from .verify import family_of
from .threads import apply_rule

ARCHS = ("gdn", "mla")            # the shipped pairs
LABELS = tuple(dict.fromkeys(ARCHS + ("attention",) + families.FAMILY_NAMES))  # what ``arch_of`` names (attention: Qwen3, Llama, ...; a recurrent family)


@dataclass(frozen=True)
class TargetConfig:
    """Size of a tiny target; the architecture-specific fields keep the real models' ratios."""

    arch: str
    vocab_size: int = 4096
    hidden_size: int = 192
    num_layers: int = 8
    num_heads: int = 3
    max_positions: int = 2048
    intermediate_size: int = 512
    # GDN (Qwen3.5): linear-attention heads; value heads are a multiple of key heads (GQA-style)
    linear_key_heads: int = 2
    linear_value_heads: int = 4
    linear_head_dim: int = 48
    # MLA + MoE (DeepSeek-V3)
    num_experts: int = 8
    experts_per_token: int = 2
    moe_intermediate_size: int = 192  # 2 routed + 1 shared expert: active size ~ the GDN target's
    extra: dict = field(default_factory=dict)

    def hf_config(self):
        if self.arch == "gdn":
            return _qwen35_config(self)
        if self.arch == "mla":
            return _deepseek_v3_config(self)
        raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")


def _qwen35_config(c: TargetConfig) -> Qwen3_5TextConfig:
    head_dim = c.hidden_size // c.num_heads
    return Qwen3_5TextConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        num_key_value_heads=max(1, c.num_heads // 2), head_dim=head_dim,
        linear_conv_kernel_dim=4, linear_key_head_dim=c.linear_head_dim,
        linear_value_head_dim=c.linear_head_dim, linear_num_key_heads=c.linear_key_heads,
        linear_num_value_heads=c.linear_value_heads, max_position_embeddings=c.max_positions,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.25,
                                                   "mrope_section": [2, 1, 1]},
        **c.extra,
    )


def _deepseek_v3_config(c: TargetConfig) -> DeepseekV3Config:
    return DeepseekV3Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        moe_intermediate_size=c.moe_intermediate_size, num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads, num_key_value_heads=c.num_heads,
        n_shared_experts=1, n_routed_experts=c.num_experts, num_experts_per_tok=c.experts_per_token,
        n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=1.0,
        kv_lora_rank=64, q_lora_rank=96, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        max_position_embeddings=c.max_positions, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rope_interleave=True,
        **c.extra,
    )


PRESETS: dict[str, TargetConfig] = {
    # the lab's targets (issue 11 recipe): ~2.1M active parameters each, matched; measured on
    # one core here: ~2,450 (GDN) / ~3,050 (MLA) training tokens/s at batch 16 x 256
    "gdn": TargetConfig("gdn", hidden_size=128, num_layers=8, num_heads=2, intermediate_size=352,
                        linear_key_heads=2, linear_value_heads=4, linear_head_dim=32),
    "mla": TargetConfig("mla", hidden_size=128, num_layers=8, num_heads=2, intermediate_size=352,
                        num_experts=8, experts_per_token=2, moe_intermediate_size=128),
}
# toy sizes for tests and --tiny smoke runs: seconds on a CPU (never shipped, never measured)
TOY_PRESETS: dict[str, TargetConfig] = {
    "gdn-toy": TargetConfig("gdn", vocab_size=64, hidden_size=32, num_layers=4, num_heads=2,
                            intermediate_size=64, linear_key_heads=1, linear_value_heads=2,
                            linear_head_dim=16, max_positions=512),
    "mla-toy": TargetConfig("mla", vocab_size=64, hidden_size=32, num_layers=3, num_heads=2,
                            intermediate_size=64, num_experts=4, moe_intermediate_size=16,
                            max_positions=512),
}


LAYER_TYPES = ("full_attention", "attention", "hybrid")  # ``config.layer_types`` of softmax attention (hybrid: FalconH1)


def verified() -> str:
    """What the lab verifies exactly, for refusals: softmax attention, and the recurrent layers of
    each family in ``families.REGISTRY`` (read from the registry, never a list kept here)."""
    names = sorted({families.name_of(f) for f in families.REGISTRY.values()})
    return (f"the lab verifies softmax attention layers (any form: MHA, GQA, MLA; layer types {LAYER_TYPES}) and the "
            f"recurrent layers of the families {', '.join(names)} exactly (their classes: "
            f"ddtree_lab.core.families.REGISTRY)")


SSM_CLASS = re.compile(r"Mamba|SSM|Ssm|Mixer|ShortConv|Lightning|DeltaNet|DeltaAttention")  # a recurrent mixer's class


def layer_kinds(model) -> list[str]:
    """Per decoder layer, how the lab verifies it: 'attention' (softmax self-attention of any
    form: MHA, GQA, MLA, with a dense or MoE MLP; the tree mask makes it exact) or 'gdn' (a
    Gated DeltaNet layer of a class in ``GDN_LAYERS``, or a subclass). Anything else is a
    ``ValueError`` naming the model's class, the layer and the reason (``check_window``, then
    per layer ``_layer_kind``): a sliding window, a Mamba / SSM mixer, a layer type outside
    ``LAYER_TYPES``, an unrouted recurrent layer. Reads the config as well as the modules, so
    a ``meta``-device model (no weights) is checked as well as a loaded one."""
    types = getattr(model.config, "layer_types", None) or []
    if not types:
        check_window(model)
    return [_layer_kind(model, i, layer, types[i] if i < len(types) else "full_attention")
            for i, layer in enumerate(decoder_layers(model))]


def check_window(model) -> None:
    """``ValueError`` when a config without ``layer_types`` (Mistral, Mixtral, Phi-3, Starcoder2:
    one window for every layer) sets a sliding window smaller than the longest context a run can
    reach. The rule: a window is set when ``config.sliding_window`` is not None and
    ``use_sliding_window`` (where the config has that flag) is not False; the longest context
    is ``max_position_embeddings``, since ``generate`` and ``verify`` refuse any position past
    it. A set window below it cuts attention that the lab's full-causal tree mask keeps, so
    DDTree would drift from AR once a sequence outgrows the window; a window at or past it never
    cuts anything and is accepted. (With ``layer_types`` the window belongs to the layers typed
    'sliding_attention', refused in ``_layer_kind``.)"""
    cfg, window = model.config, _window(model.config)
    if window is not None and window < cfg.max_position_embeddings:
        raise ValueError(f"{type(model).__name__}: sliding_window={window} is smaller than max_position_embeddings="
                         f"{cfg.max_position_embeddings} (the longest context a run reaches): attention past "
                         f"{window} tokens back is cut, and the lab's tree mask is full causal attention, so DDTree "
                         f"would not equal AR; set sliding_window to null (or >= {cfg.max_position_embeddings}) or "
                         f"max_position_embeddings to {window} in config.json")


def _window(cfg) -> int | None:
    """The config's sliding window in tokens, or None when it sets none (``check_window``)."""
    if getattr(cfg, "use_sliding_window", True) is False:
        return None
    return getattr(cfg, "sliding_window", None)


def _layer_kind(model, i: int, layer, layer_type: str) -> str:
    """'attention', or the family name of the layer's recurrent mixer (``families.REGISTRY``,
    by class: 'gdn', 'kda', 'mamba2', ...), for decoder layer ``i`` of ``config.layer_types``
    type ``layer_type`` (default 'full_attention'), else the ``ValueError`` that names why it
    cannot be exact."""
    where = f"{type(model).__name__}: layer {i} ({type(layer).__name__}"
    fam = next((f for m in layer.modules() if (f := family_of(m)) is not None), None)
    if fam is not None:
        return families.name_of(fam)
    recurrent = [f"{type(m).__name__} in `{n}`" for n, m in layer.named_children() if SSM_CLASS.search(type(m).__name__)]
    if recurrent:
        raise ValueError(f"{where}) holds a recurrent mixer ({recurrent[0]}) of no family the lab has: its state "
                         f"would leak between a tree's branches; {verified()}")
    attn = getattr(layer, "self_attn", None) or next(
        (m for m in layer.children() if type(m).__name__.endswith("Attention")), None)  # Nemotron-H: ``mixer``
    window = getattr(attn, "sliding_window", None)
    if layer_type == "sliding_attention" or (window is not None and window < model.config.max_position_embeddings):
        raise ValueError(f"{where}): layer type {layer_type!r} is not supported: its sliding window of "
                         f"{window or _window(model.config)} tokens needs a windowed tree mask, and the lab's is full "
                         f"causal attention, so DDTree would not equal AR; {verified()}")
    if layer_type not in LAYER_TYPES:
        raise ValueError(f"{where}): layer type {layer_type!r} (config.layer_types) is not supported: {verified()}")
    if attn is not None:
        return "attention"
    raise ValueError(f"{where}) is not supported: no attention and no recurrent mixer of a known family; {verified()}")


def arch_of(model) -> str:
    """The lab's label of a loaded causal LM, from its layers (``layer_kinds``): 'gdn' when it
    has Gated DeltaNet layers (Qwen3.5 / 3.6, Qwen3.5-MoE, Qwen3-Next), 'mla' for multi-head latent attention
    (DeepSeek-V3, Kimi K2: the config has ``kv_lora_rank``), else 'attention' (Qwen3, Qwen3-MoE,
    Llama, ...). An unsupported layer is a ``ValueError`` naming it."""
    kinds = layer_kinds(model)
    recurrent = [k for k in kinds if k != "attention"]
    if recurrent:
        return recurrent[0]
    return "mla" if getattr(model.config, "kv_lora_rank", None) else "attention"


def _model_class(arch: str):
    return {"gdn": Qwen3_5ForCausalLM, "mla": DeepseekV3ForCausalLM}[arch]


def build_target(preset: str | TargetConfig, *, dtype=torch.float32, seed: int | None = 0):
    """A freshly initialised target from a preset name (``PRESETS`` or ``TOY_PRESETS``) or a
    TargetConfig."""
    known = PRESETS | TOY_PRESETS
    if isinstance(preset, str) and preset not in known:
        raise ValueError(f"preset must be one of {sorted(known)}, got {preset!r}")
    cfg = known[preset] if isinstance(preset, str) else preset
    if seed is not None:
        torch.manual_seed(seed)
    hf = cfg.hf_config()
    hf._attn_implementation = "eager"
    if cfg.arch == "mla":
        hf._experts_implementation = "eager"
    model = _model_class(cfg.arch)(hf).to(dtype)
    return model.eval()


# config.json model types whose ``AutoModelForCausalLM`` class is not the text model (the adapter's table)
TEXT_CLASSES = adapter.TEXT_CLASSES


def load_target(path: str | Path, *, dtype=torch.float32, device: str | None = None, **kwargs):
    """Load a local HF checkpoint directory of a causal LM whose layers the lab verifies
    exactly (``layer_kinds``): Qwen3.5 / 3.6, Qwen3.5-MoE, Qwen3-Next, DeepSeek-V3 / Kimi K2, Qwen3 and Qwen3-MoE,
    Llama, ... The class follows ``config.json``'s ``model_type`` (``AutoModelForCausalLM``),
    with eager attention and (MoE) eager experts, which the tree mask and the exact harness
    need. ``kwargs`` go to ``from_pretrained`` (``device_map="auto"`` spreads a large model over GPUs).
    Torch's CPU threads follow the lab's rule unless a count was asked for (``threads.apply_rule``),
    and on a CPU the GDN kernel-fallback warnings are silenced (``kernel_notices``).
    """
    apply_rule()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"path must be a checkpoint directory with config.json, got {path}")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ValueError(f"path must be a checkpoint directory with its weights (*.safetensors or *.bin), "
                         f"got {path} holding {sorted(p.name for p in path.iterdir())}")
    model_type = json.loads((path / "config.json").read_text()).get("model_type", "")
    cls = TEXT_CLASSES.get(model_type)
    if cls is None and (model_type not in CONFIG_MAPPING
                        or CONFIG_MAPPING[model_type] not in AutoModelForCausalLM._model_mapping):
        raise ValueError(f"config.json model_type {model_type!r} has no causal LM class in transformers "
                         f"{transformers.__version__}")
    loader = cls or AutoModelForCausalLM
    config = (cls.config_class if cls else AutoConfig).from_pretrained(path)
    with torch.device("meta"):  # the layers, without weights: an unsupported one is refused before any loading
        arch_of(cls(config) if cls else AutoModelForCausalLM.from_config(config))
    model = loader.from_pretrained(path, dtype=dtype, attn_implementation="eager", experts_implementation="eager",
                                   **kwargs)
    if device is not None:
        model = model.to(device)
    kernel_notices(model)
    return model.eval()


KERNEL_FALLBACK = "is falling back to its reference PyTorch implementation"  # transformers' hub_kernels notice


class _CpuKernelNotices(logging.Filter):
    """Drops transformers' kernel-fallback notices (``causal_conv1d``, ``flash-linear-attention``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return KERNEL_FALLBACK not in record.getMessage()


_CPU_NOTICES = _CpuKernelNotices()


def kernel_notices(model) -> None:
    """A GDN target on the CPU: transformers' warnings that ``causal_conv1d`` and
    ``flash-linear-attention`` are missing are silenced, with one line, once, saying why (both
    are GPU kernels: a CPU user cannot act on them; where transformers' warnings are off, as
    in the notebooks, nothing is said). On a GPU they are kept."""
    log = logging.getLogger("transformers.integrations.hub_kernels")
    if next(model.parameters()).device.type != "cpu":
        log.removeFilter(_CPU_NOTICES)
    elif _CPU_NOTICES not in log.filters and arch_of(model) not in ("mla", "attention"):  # any recurrent family
        log.addFilter(_CPU_NOTICES)
        if log.isEnabledFor(logging.WARNING):
            print("ddtree-lab: silenced transformers' warnings that causal_conv1d, mamba_ssm and flash-linear-attention "
                  "are not installed: all are GPU kernels, and on the CPU the recurrent layers run transformers' PyTorch "
                  "reference",
                  file=sys.stderr)


def count_parameters(model) -> dict:
    """Total and per-token active parameters (MoE: only the routed experts a token uses)."""
    total = sum(p.numel() for p in model.parameters())
    active = total
    cfg = model.config
    if arch_of(model) == "mla":
        per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
        moe_layers = cfg.num_hidden_layers - cfg.first_k_dense_replace
        active -= moe_layers * per_expert * (cfg.n_routed_experts - cfg.num_experts_per_tok)
    return {"total": total, "active": active}


def config_dict(cfg: TargetConfig) -> dict:
    return asdict(cfg)
