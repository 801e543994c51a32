"""Targets that cannot be verified exactly are refused before any work, with the real reason
(issue 58): the layer check (``models.layer_kinds``) reads the config as well as the modules.

- a Mistral with ``sliding_window=64`` (one window for every layer, no ``layer_types``): refused,
  since the window is smaller than ``max_position_embeddings``, the longest context a run reaches;
- (a FalconH1 was refused for its Mamba2 mixer until the families came: every hybrid class is
  accepted now, ``core/families/tests/test_every_hybrid.py``);
- a Gemma-2 (alternating sliding / full layers) and a Qwen3 with ``layer_types``: refused for
  the 'sliding_attention' layer, with its window;
- a Mistral without a window, or with one that never cuts (>= max_position_embeddings), and a
  Qwen2 whose window is switched off (``use_sliding_window=False``) are accepted, and a Mistral
  decodes DDTree == AR.
``load_target`` refuses from config.json before reading a weight; ``load_pair`` and
``train_drafter`` refuse before any other work. (The CLI: ``app/tests/test_cli_errors.py``.)
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ddtree_lab.core.decode import generate
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import arch_of, layer_kinds, load_target
from ddtree_lab.train.drafters import train_drafter
from ddtree_lab.train.pair import load_pair
from helpers import HintedDrafter, generator, random_prefix

SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
             intermediate_size=64, vocab_size=64, max_position_embeddings=256)
# id -> (model type, config fields beyond SHAPE, the reason the ValueError gives, a reason it must not give)
REFUSED = {
    "mistral-window64": ("mistral", dict(sliding_window=64),
                         r"MistralForCausalLM: sliding_window=64 is smaller than max_position_embeddings=256", "Mamba"),
    "gemma2-alternating": ("gemma2", dict(sliding_window=16),
                           r"Gemma2ForCausalLM: layer 0 \(Gemma2DecoderLayer\): layer type 'sliding_attention' is "
                           r"not supported: its sliding window of 16 tokens", "Mamba"),
    "qwen3-layer-types": ("qwen3", dict(use_sliding_window=True, sliding_window=8,
                                        layer_types=["full_attention", "sliding_attention"]),
                          r"Qwen3ForCausalLM: layer 1 \(Qwen3DecoderLayer\): layer type 'sliding_attention' is not "
                          r"supported: its sliding window of 8 tokens", "Mamba"),
}
ACCEPTED = {"mistral-no-window": ("mistral", dict(sliding_window=None)),
            "mistral-window-past-context": ("mistral", dict(sliding_window=256)),
            "qwen2-window-off": ("qwen2", dict(use_sliding_window=False, sliding_window=8))}


def tiny(model_type: str, seed: int = 0, **extra):
    """A random tiny causal LM of ``model_type`` (eager attention, float32)."""
    cfg = AutoConfig.for_model(model_type, **SHAPE, **extra)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg).eval()


def saved(model_type: str, extra: dict, path):
    """``tiny(...)`` saved with ``save_pretrained`` into ``path``, its weights then made unreadable:
    a refusal that comes from config.json alone still passes, any weight read fails."""
    tiny(model_type, **extra).save_pretrained(path)
    (path / "model.safetensors").write_bytes(b"not weights")
    return path


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_layer_check_names_the_real_reason(case):
    model_type, extra, reason, wrong = REFUSED[case]
    with pytest.raises(ValueError, match=reason) as err:
        arch_of(tiny(model_type, **extra))
    assert wrong not in str(err.value)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_load_target_and_load_pair_refuse_from_the_config_alone(case, tmp_path):
    model_type, extra, reason, _ = REFUSED[case]
    path = saved(model_type, extra, tmp_path / "target")
    with pytest.raises(ValueError, match=reason):
        load_target(path)
    with pytest.raises(ValueError, match=reason):
        load_pair("attention", path, tmp_path / "no-drafter")


def test_train_drafter_refuses_before_any_work(tmp_path):
    model_type, extra, reason, _ = REFUSED["mistral-window64"]
    with pytest.raises(ValueError, match=reason):
        train_drafter(None, "toy", target=tiny(model_type, **extra), out=tmp_path / "drafter",
                      cache_dir=tmp_path / "cache", prompts=[[1, 2, 3]])
    assert list(tmp_path.iterdir()) == []  # no rollouts, no run state, no drafter


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_a_window_that_never_cuts_is_accepted(case, tmp_path):
    model_type, extra = ACCEPTED[case]
    model = tiny(model_type, **extra)
    assert layer_kinds(model) == ["attention"] * SHAPE["num_hidden_layers"] and arch_of(model) == "attention"
    model.save_pretrained(tmp_path)
    assert arch_of(load_target(tmp_path)) == "attention"


def test_a_mistral_without_a_window_decodes_ddtree_equal_to_ar():
    model = tiny("mistral", sliding_window=None)
    cfg = DrafterConfig.for_target(model, mask_token_id=SHAPE["vocab_size"] - 1, num_layers=1, block_size=6)
    torch.manual_seed(1)
    drafter = DFlashDrafter.from_config(cfg, model).eval()
    prompt = random_prefix(SHAPE["vocab_size"], generator("mistral"), low=4, high=12)
    ar = generate(model, drafter, prompt, method="ar", max_new_tokens=24)
    spec = generate(model, HintedDrafter(drafter, list(prompt) + ar.tokens), prompt, method="ddtree", budget=12,
                    block_size=6, max_new_tokens=24)
    assert spec.tokens == ar.tokens and max(spec.acceptance_lengths) > 1
