"""Targets by layer type (issue 25): every causal LM whose layers are softmax attention (MHA,
GQA, MLA; dense or MoE MLP) or a routed Gated DeltaNet (Qwen3.5's, Qwen3.5-MoE's, Qwen3-Next's)
enters the lab, through ``load_target`` and ``arch_of``; any other layer is refused, naming it.

Tiny random configs of the field's targets, stock classes: Qwen3 and Qwen3-MoE (the DDTree
paper's), Llama (DFlash's), and the GDN hybrids Qwen3.5-MoE and Qwen3-Next (GDN + gated full
attention, MoE with a shared expert). For each:
- tree verification equals the stock full forward per node (chain, bushy, deep trees), in
  float32 stock and in float64 under ``harness.float64_harness()`` (scale-aware, 1e-12), in
  every exact mode (attention: the tree mask; GDN: fork and wy); naive GDN is exact on chains
  and leaks on branched trees;
- rounds of verify + commit leave the cache a fresh prefill of the committed sequence would
  (float64, every mode, naive included: its commit re-scores a branched path);
- a batched verify of trees of different sizes (packed) equals each tree's batch-1 verify;
- speculative decoding (DFlash and DDTree, T = 0, every GDN mode) equals AR, with a random
  drafter sized for the target;
- ``load_target`` reads the class from config.json.
Recurrent layers of a family the lab lacks (here: Kimi Linear's KDA or OLMo-Hybrid's GDN with its
registry entry removed; every hybrid class has its family, ``core/families``) and sliding-window
attention are refused before any work.
"""
from __future__ import annotations

import functools
import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

from ddtree_lab.core import adapter, families, harness, naive
from ddtree_lab.core.families.gdn import wy
from ddtree_lab.core import verify as verify_mod
from ddtree_lab.core.verify import commit
from ddtree_lab.core.decode import generate
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import arch_of, build_target, layer_kinds, load_target
from ddtree_lab.core.verify import GDN_MODES, prefill, tree_logits, verify, verify_batch
from helpers import (LOGIT_TOL, HintedDrafter, assert_close, assert_same_cache, generator, precision, random_prefix,
                     random_tree, root_path)

torch.set_num_threads(1)

SHAPE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
             intermediate_size=64, vocab_size=64, max_position_embeddings=256)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1)
# GDN hybrids: GDN, full attention, GDN; 2 value heads per key head (Qwen3-Next's fused
# projections interleave them per key-head group); a shared expert beside the routed ones
GDN = dict(MOE, layer_types=["linear_attention", "full_attention", "linear_attention"], linear_num_key_heads=1,
           linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
           shared_expert_intermediate_size=16)
# model type -> (config fields beyond SHAPE, arch_of label)
MODELS = {"qwen3": ({}, "attention"), "qwen3_moe": (MOE, "attention"), "llama": ({}, "attention"),
          "qwen3_5_moe_text": (GDN, "gdn"), "qwen3_next": (GDN, "gdn")}
EXACT_MODES = {"attention": (None,), "gdn": tuple(m for m in GDN_MODES if m != "naive")}
ALL_MODES = {"attention": (None,), "gdn": GDN_MODES}
# recurrent layers verify does not route (no family in ``families.REGISTRY``): model type -> (layer class named, config fields)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
REFUSED = {"kimi_linear": ("KimiLinearDeltaAttention", TOKENS), "olmo_hybrid": ("OlmoHybridGatedDeltaNet", TOKENS)}
DTYPE_ID = {torch.float32: "f32", torch.float64: "f64"}


def tiny(model_type: str, seed: int = 0, **extra):
    """A random tiny causal LM of ``model_type`` (eager attention and experts, float32)."""
    cfg = AutoConfig.for_model(model_type, **SHAPE, **extra)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg).eval()


@functools.lru_cache(maxsize=None)
def target(model_type: str, dtype: torch.dtype = torch.float32):
    """``tiny(model_type)`` (seed 0) in ``dtype``, cached: the same weights in both dtypes."""
    return tiny(model_type, **MODELS[model_type][0]).to(dtype)


def label(model_type: str) -> str:
    return MODELS[model_type][1]


def cases(modes: dict, *rest) -> list:
    """pytest params (model type, mode, *r) for every mode of every model's label and every
    tuple r of ``rest`` (none: (model type, mode))."""
    return [pytest.param(t, mode, *r, id="-".join([t] + ([mode] if mode else []) + [str(x) for x in r]))
            for t in MODELS for mode in modes[label(t)] for r in (rest or [()])]


# ----------------------------------------------------------------------------- layers

@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_models_enter_by_their_layer_types(model_type):
    model = target(model_type)
    kinds = [{"linear_attention": "gdn"}.get(t, "attention")
             for t in getattr(model.config, "layer_types", None) or ["full_attention"] * SHAPE["num_hidden_layers"]]
    assert label(model_type) != "gdn" or "gdn" in kinds
    assert layer_kinds(model) == kinds
    assert arch_of(model) == label(model_type)


@pytest.mark.parametrize("model_type,mode", cases(EXACT_MODES))
def test_trees_of_different_sizes_verify_packed_as_each_alone(model_type, mode):
    """One batched verify of trees of 9, 2 and 5 rows (packed: ``verify.packed_attention``
    runs the layer's own eager attention) == each tree's batch-1 verify, float32."""
    model, gen = target(model_type), generator("packed", model_type, mode)
    prefixes = [random_prefix(SHAPE["vocab_size"], gen) for _ in range(3)]
    trees = [random_tree(kind, n, SHAPE["vocab_size"], gen) for kind, n in (("bushy", 8), ("chain", 1), ("deep", 4))]
    outs = verify_batch(model, [prefill(model, p)[0] for p in prefixes], trees, mode or "wy")
    for b, (p, t, o) in enumerate(zip(prefixes, trees, outs)):
        assert_close(f"{model_type}-{mode or 'tree'} seq{b}", verify(model, prefill(model, p)[0], t, mode or "wy").logits,
                     o.logits, LOGIT_TOL[torch.float32])

@pytest.mark.parametrize("model_type", [t for t in sorted(MODELS) if label(t) == "gdn"])
def test_gdn_layers_are_routed_and_stay_the_stock_layer(model_type):
    """``verify.route_recurrent`` gives each GDN layer a routed twin of its own stock class;
    with transformers' own cache the routed model is the stock one."""
    model = tiny(model_type, **MODELS[model_type][0])
    stock = {i: type(m) for i, m in wy.gdn_modules(model).items()}
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    before = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True).logits
    mods = {i: m for i, (m, _) in verify_mod.route_recurrent(model).items()}
    assert mods.keys() == stock.keys() == {0, 2}
    assert all(type(m) is verify_mod.route_class(stock[i]) and isinstance(m, stock[i]) for i, m in mods.items())
    assert all(type(m).__name__ == f"Tree{stock[i].__name__}" for i, m in mods.items())
    after = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True).logits
    assert torch.equal(before, after)


# ----------------------------------------------------------------------------- tree == full forward

@functools.lru_cache(maxsize=None)
def oracle(model_type: str, kind: str, dtype: torch.dtype):
    """(prefix, 24-node tree of ``kind``, stock per-path forward logits), shared by every mode."""
    gen = generator(model_type, kind)
    prefix, tree = random_prefix(SHAPE["vocab_size"], gen), random_tree(kind, 24, SHAPE["vocab_size"], gen)
    with precision(dtype):
        return prefix, tree, naive.tree_logits(target(model_type, dtype), prefix, tree)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=DTYPE_ID.get)
@pytest.mark.parametrize("model_type,mode,kind", cases(EXACT_MODES, ("chain",), ("bushy",), ("deep",)))
def test_tree_logits_equal_full_forward(model_type, mode, kind, dtype):
    """Every node's row == the stock forward over prefix + its path (float64: under the harness)."""
    prefix, tree, ref = oracle(model_type, kind, dtype)
    with precision(dtype):
        out = tree_logits(target(model_type, dtype), prefix, tree, mode or "wy")
    assert out.shape == ref.shape == (25, SHAPE["vocab_size"])
    assert_close(f"{model_type}-{mode or 'tree'}-{kind}-{DTYPE_ID[dtype]}", ref, out, LOGIT_TOL[dtype])


@pytest.mark.parametrize("model_type", [t for t in sorted(MODELS) if label(t) == "gdn"])
def test_naive_is_exact_on_chains_and_leaks_on_branched_trees(model_type):
    """naive reads the flattened tree as a chain: exact on a chain, wrong past a branch (float64)."""
    model = target(model_type, torch.float64)
    with harness.float64_harness():
        prefix, tree, ref = oracle(model_type, "chain", torch.float64)
        assert_close(f"{model_type}-naive-chain-f64", ref, tree_logits(model, prefix, tree, "naive"),
                     LOGIT_TOL[torch.float64])
        for kind in ("bushy", "deep"):
            prefix, tree, ref = oracle(model_type, kind, torch.float64)
            err = {m: (tree_logits(model, prefix, tree, m) - ref).abs().max().item() for m in GDN_MODES}
            print(f"{model_type}-{kind}-f64: naive max|d|={err['naive']:.3e}, fork {err['fork']:.3e}, "
                  f"wy {err['wy']:.3e}")
            assert err["naive"] > 1e3 * max(err["fork"], err["wy"]) and err["naive"] > 1e-6


# ----------------------------------------------------------------------------- verify + commit rounds

@pytest.mark.parametrize("model_type,mode", cases(ALL_MODES))
def test_rounds_match_fresh_prefill(model_type, mode):
    """4 rounds of verify + commit (bushy and deep trees; root, deepest and random paths): the
    cache == a fresh prefill of the committed sequence, and the next verify agrees (float64)."""
    model, mode = target(model_type, torch.float64), mode or "wy"
    V = SHAPE["vocab_size"]
    gen = generator("rounds", model_type, mode)
    with harness.float64_harness():
        committed = random_prefix(V, gen)
        cache, _ = prefill(model, committed)
        for r, pick in enumerate(("root", "deepest", "random", "random")):
            tree = random_tree(("bushy", "deep")[r % 2], 16, V, gen)
            pending = verify(model, cache, tree, mode).pending
            path = root_path(tree, pick, gen)
            commit(model, cache, pending, path)
            committed = committed + tree.tokens[path].tolist()
            assert cache.length == len(committed)
        fresh, _ = prefill(model, committed)
        assert_same_cache(f"{model_type}-{mode}-rounds-f64", fresh, cache, 1e-12)
        tree = random_tree("bushy", 16, V, gen)
        assert_close(f"{model_type}-{mode}-next-round-f64", verify(model, fresh, tree, mode).logits,
                     verify(model, cache, tree, mode).logits, 1e-12)


# ----------------------------------------------------------------------------- lossless decoding

@pytest.mark.parametrize("model_type,mode,method,budget",
                         cases({"attention": (None,), "gdn": ("wy",)}, ("dflash", None))
                         + cases(ALL_MODES, ("ddtree", 12)))
def test_speculative_decoding_equals_ar(model_type, mode, method, budget):
    model = target(model_type)
    cfg = DrafterConfig.for_target(model, mask_token_id=SHAPE["vocab_size"] - 1, num_layers=1, block_size=6)
    torch.manual_seed(1)
    drafter = DFlashDrafter.from_config(cfg, model).eval()
    prompt = random_prefix(SHAPE["vocab_size"], generator("prompt"), low=4, high=12)
    ar = generate(model, drafter, prompt, method="ar", max_new_tokens=24)
    hinted = HintedDrafter(drafter, list(prompt) + ar.tokens)   # rounds accept several tokens and reject some
    spec = generate(model, hinted, prompt, method=method, block_size=6, max_new_tokens=24,
                    gdn_mode=mode or "wy", **({"budget": budget} if budget else {}))
    assert spec.tokens == ar.tokens
    assert max(spec.acceptance_lengths) > 1 and len(spec.acceptance_lengths) < len(ar.tokens)


# ----------------------------------------------------------------------------- loading and refusals

@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_load_target_reads_the_class_from_config_json(model_type, tmp_path):
    model = target(model_type)
    model.save_pretrained(tmp_path)
    loaded = load_target(tmp_path)
    assert type(loaded) is type(model) and arch_of(loaded) == label(model_type)
    assert loaded.config._attn_implementation == "eager"
    ids = torch.tensor([[3, 5, 7, 11]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_recurrent_layers_of_a_family_the_lab_lacks_are_refused_naming_the_class(model_type, tmp_path, monkeypatch):
    """Every hybrid class transformers ships has its family now (``families``); one without (its
    registry entry removed here) is refused before any weight is read, naming the class."""
    cls, extra = REFUSED[model_type]
    monkeypatch.setattr(families, "REGISTRY", {k: v for k, v in families.REGISTRY.items() if k != cls})
    m = tiny(model_type, **extra)
    with pytest.raises(ValueError, match=rf"layer 0 .*\({cls} in `\w+`\) of no family the lab has"):
        arch_of(m)
    m.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not weights")  # refused before any loading
    with pytest.raises(ValueError, match=f"{type(m).__name__}: layer 0 .*{cls}"):
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
