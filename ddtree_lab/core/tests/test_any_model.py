"""Targets by layer type (issue 25): every causal LM whose layers are softmax attention (MHA,
GQA, MLA; dense or MoE MLP) or Qwen3.5's Gated DeltaNet enters the lab, through
``load_target`` and ``arch_of``; any other layer is refused, naming it.

Tiny random configs of the field's targets (Qwen3 and Qwen3-MoE: the DDTree paper's;
Llama: DFlash's), float32 stock classes: tree verification equals the stock full forward per
node, and speculative decoding (DFlash and DDTree, T = 0) equals AR, with a random drafter
sized for the target. The hybrids whose recurrent layer the adapter does not route yet
(Qwen3-Next, Qwen3.5-MoE) and sliding-window attention are refused before any work.
"""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ddtree_lab.core.decode import generate
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import arch_of, build_target, layer_kinds, load_target
from ddtree_lab.core.verify import tree_logits, tree_logits_reference
from helpers import LOGIT_TOL, assert_close, generator, random_prefix, random_tree

torch.set_num_threads(1)

SHAPE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
             intermediate_size=64, vocab_size=64, max_position_embeddings=256)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1)
ACCEPTED = {"qwen3": {}, "qwen3_moe": MOE, "llama": {}}
REFUSED = {"qwen3_next": ("Qwen3NextGatedDeltaNet", MOE), "qwen3_5_moe_text": ("Qwen3_5MoeGatedDeltaNet", MOE)}


def tiny(model_type: str, seed: int = 0, **extra):
    """A random tiny causal LM of ``model_type`` (eager attention and experts, float32)."""
    cfg = AutoConfig.for_model(model_type, **SHAPE, **extra)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg).eval()


@pytest.fixture(scope="module", params=sorted(ACCEPTED))
def model(request):
    return tiny(request.param, **ACCEPTED[request.param])


def test_attention_models_enter_as_attention(model):
    assert layer_kinds(model) == ["attention"] * SHAPE["num_hidden_layers"]
    assert arch_of(model) == "attention"


@pytest.mark.parametrize("kind", ["chain", "bushy", "deep"])
def test_tree_logits_equal_full_forward(model, kind):
    gen = generator(type(model).__name__, kind)
    prefix, tree = random_prefix(SHAPE["vocab_size"], gen), random_tree(kind, 24, SHAPE["vocab_size"], gen)
    ref = tree_logits_reference(model, prefix, tree)
    out = tree_logits(model, prefix, tree, "wy")
    assert_close(f"{type(model).__name__} {kind}", ref, out, LOGIT_TOL[torch.float32])


@pytest.mark.parametrize("method,budget", [("dflash", None), ("ddtree", 12)])
def test_speculative_decoding_equals_ar(model, method, budget):
    cfg = DrafterConfig.for_target(model, mask_token_id=SHAPE["vocab_size"] - 1, num_layers=1, block_size=6)
    torch.manual_seed(1)
    drafter = DFlashDrafter.from_config(cfg, model).eval()
    prompt = random_prefix(SHAPE["vocab_size"], generator("prompt"), low=4, high=12)
    ar = generate(model, drafter, prompt, method="ar", max_new_tokens=24)
    spec = generate(model, drafter, prompt, method=method, block_size=6, max_new_tokens=24,
                    **({"budget": budget} if budget else {}))
    assert spec.tokens == ar.tokens
    assert len(spec.acceptance_lengths) <= len(ar.tokens)


def test_load_target_reads_the_class_from_config_json(model, tmp_path):
    model.save_pretrained(tmp_path)
    loaded = load_target(tmp_path)
    assert type(loaded) is type(model) and arch_of(loaded) == "attention"
    assert loaded.config._attn_implementation == "eager"
    ids = torch.tensor([[3, 5, 7, 11]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_unrouted_recurrent_layers_are_refused_naming_the_class(model_type, tmp_path):
    cls, extra = REFUSED[model_type]
    m = tiny(model_type, **extra)
    with pytest.raises(ValueError, match=f"layer 0 \\({cls}\\) is not supported"):
        arch_of(m)
    m.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not weights")  # refused before any loading
    with pytest.raises(ValueError, match=f"{type(m).__name__}: layer 0 \\({cls}\\)"):
        load_target(tmp_path)


def test_sliding_window_layers_are_refused():
    m = tiny("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert "sliding_attention" in m.config.layer_types
    with pytest.raises(ValueError, match="'sliding_attention' is not supported"):
        arch_of(m)


def test_a_directory_without_weights_is_refused_by_name(tmp_path):
    AutoConfig.for_model("qwen3", **SHAPE).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"with its weights \(\*.safetensors or \*.bin\), got .* \['config.json'\]"):
        load_target(tmp_path)


def test_a_model_type_without_a_causal_lm_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_model"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="model_type 'no_such_model' has no causal LM class"):
        load_target(tmp_path)


def test_the_shipped_presets_keep_their_labels():
    assert arch_of(build_target("gdn-toy")) == "gdn"
    assert arch_of(build_target("mla-toy")) == "mla"
    assert set(layer_kinds(build_target("gdn-toy"))) == {"gdn", "attention"}
