"""Tests for the DFlash drafter (ddtree_lab.core.drafter, drafter_data, drafters).

The training forward (all anchors in one masked pass) must equal inference (``draft`` on
an incrementally built context cache) at the same anchor: that pins training/inference
consistency. Toy targets (vocab 64) use a fake MASK id inside the vocab.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ddtree_lab.core import naive
from ddtree_lab.train import data
from ddtree_lab.core.drafter import (_rows, DFlashDrafter, DrafterConfig, acceptance_length, block_labels, soft_cross_entropy,
                                default_target_layers, drafter_loss, position_weights)
from ddtree_lab.train.rollouts import (continue_prompts, drafter_prompts, function_prompts, make_rollouts,
                                      prompt_ids)
from ddtree_lab.train.drafters import RECIPES, drafter_eval_fn, drafter_loss_fn, load_drafter, train_drafter
from ddtree_lab.core.models import build_target
from ddtree_lab.train.loop import train
from helpers import assert_close

torch.set_num_threads(1)
MASK = 63
TARGETS = ["gdn-toy", "mla-toy"]


def make_drafter(preset="gdn-toy", **overrides):
    target = build_target(preset)
    torch.manual_seed(1)
    cfg = DrafterConfig.for_target(target, MASK, num_layers=2, **overrides)
    return target, DFlashDrafter.from_config(cfg, target).eval()


def toy_sequences(drafter, batch=2, length=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, MASK, (batch, length), generator=gen)
    return tokens, torch.randn(batch, length, drafter.cfg.feature_size, generator=gen)


def toy_prompts(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, MASK, size=int(rng.integers(8, 14))).tolist() for _ in range(n)]


# ----------------------------------------------------------------------------- model

def test_default_target_layers():
    assert default_target_layers(8) == (1, 2, 4, 5)
    assert default_target_layers(36, n=5) == (1, 9, 17, 25, 33)
    assert default_target_layers(4) == (1,) and default_target_layers(3) == (1,)


@pytest.mark.parametrize("block_size", [16, 8], ids=["block16", "block8"])
@pytest.mark.parametrize("preset", TARGETS)
def test_propose_matches_training_forward(preset, block_size):
    _, drafter = make_drafter(preset)
    tokens, feats = toy_sequences(drafter)
    anchors = torch.tensor([[0, 5, 17, 38], [1, 9, 26, 39]])  # 38, 39: labels past T ignored
    train_logits = drafter.block_logits(tokens, feats, anchors, block_size)  # [B, A, bs-1, V]
    for b in range(2):
        for j, a in enumerate(anchors[b].tolist()):
            state = drafter.new_state()
            for lo, hi in [(0, a // 3), (a // 3, a // 2)]:  # several rounds, then the proposal
                drafter.draft(state, feats[b, lo:hi], tokens[b, hi].item(), block_size).logits
            incremental = drafter.draft(state, feats[b, a // 2:a], tokens[b, a].item(), block_size).logits
            one_shot = drafter.draft(drafter.new_state(), feats[b, :a], tokens[b, a].item(), block_size).logits
            assert incremental.shape == (block_size - 1, 64) and state.length == a
            assert_close(f"incremental vs one-shot a={a}", one_shot, incremental, 1e-5)
            assert_close(f"draft vs training a={a}", train_logits[b, j], incremental, 1e-5)


@pytest.mark.parametrize("preset", TARGETS)
def test_propose_equals_its_reference_twin_the_dflash_loops_cache(preset):
    """Rounds of 0, 7, 1 and 4 new context rows: the lab's ContextCache path == the published
    model on a transformers DynamicCache cropped after every block (dflash_generate's way)."""
    from transformers import DynamicCache
    _, drafter = make_drafter(preset)
    gen = torch.Generator().manual_seed(3)
    state, cache = drafter.new_state(), DynamicCache(config=drafter.model.config)
    for n, root in zip((0, 7, 1, 4), (5, 9, 2, 11)):
        feats = torch.randn(n, drafter.cfg.feature_size, generator=gen)
        assert_close(f"draft after {state.length}+{n} rows", naive.propose(drafter, cache, feats, root, 8),
                     drafter.draft(state, feats, root, 8).logits, 1e-5)
        assert cache.get_seq_length() == state.length


@pytest.mark.parametrize("handed", (False, True), ids=("own-forward", "handed-forward"))
def test_a_handed_forward_that_runs_eagerly_drafts_the_same(handed):
    """A forward handed in (a compiled copy, which dynamo runs eagerly once past its recompile
    limit) makes no reserve; the batch of one then appends by cat instead of in place, and
    drafts what the published model on a cropped DynamicCache drafts, round after round."""
    from transformers import DynamicCache
    _, drafter = make_drafter("mla-toy")
    gen = torch.Generator().manual_seed(4)
    state, cache = drafter.new_state(), DynamicCache(config=drafter.model.config)
    for n, root in zip((3, 7, 1, 4, 2), (5, 9, 2, 11, 6)):
        feats = torch.randn(n, drafter.cfg.feature_size, generator=gen)
        got = drafter.draft(state, feats, root, 8, forward=drafter.model if handed else None)
        assert_close(f"draft after {state.length}+{n} rows", naive.propose(drafter, cache, feats, root, 8),
                     got.logits, 1e-5)


def test_drafter_is_the_published_class_and_round_trips_its_layout(tmp_path):
    """save_pretrained / from_pretrained of dflash.DFlashDraftModel: config.json with
    dflash_config, the lab's view of it, and the same proposals after the round trip."""
    from dflash import DFlashDraftModel
    target, drafter = make_drafter(block_size=8)
    assert type(drafter.model) is DFlashDraftModel
    drafter.model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["dflash_config"]["block_size"] == 8 and cfg["dflash_config"]["mask_token_id"] == MASK
    assert cfg["dflash_config"]["target_layer_ids"] == list(drafter.cfg.target_layer_ids)
    again = DFlashDrafter(DFlashDraftModel.from_pretrained(tmp_path), target).eval()
    assert again.cfg == drafter.cfg
    feats = torch.randn(5, drafter.cfg.feature_size)
    assert_close("round trip", drafter.draft(drafter.new_state(), feats, 3, 8).logits,
                 again.draft(again.new_state(), feats, 3, 8).logits, 1e-6)


def test_block_size_validation():
    _, drafter = make_drafter()
    feats = torch.randn(5, drafter.cfg.feature_size)
    for bs in (8, 16):
        assert drafter.draft(drafter.new_state(), feats, 3, bs).logits.shape == (bs - 1, 64)
    for bad in (1, 17, 0):
        with pytest.raises(ValueError, match=r"block_size must be an int in \[2, 16\]"):
            drafter.draft(drafter.new_state(), feats, 3, bad).logits


def test_loss_weights_and_labels():
    _, drafter = make_drafter()
    tokens, feats = toy_sequences(drafter, batch=1, length=20)
    anchors = torch.tensor([[3, 18]])  # anchor 18: one label (token 19)
    labels = block_labels(tokens, anchors, 16)
    assert labels[0, 1, 0] == tokens[0, 19] and (labels[0, 1, 1:] == -100).all()
    logits = drafter.block_logits(tokens, feats, anchors)
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none", ignore_index=-100)
    w = position_weights(16, 7.0).repeat(2) * (labels.flatten() != -100)
    assert_close("loss", (ce * w).sum() / w.sum(), drafter_loss(drafter, tokens, feats, anchors), 1e-6)
    w16 = position_weights(16, 7.0)
    assert w16[0] == 1 and abs(w16[7].item() - np.exp(-1)) < 1e-7  # k = 8: exp(-7/7)


def test_soft_labels_reduce_to_the_hard_loss_and_follow_the_target_distribution():
    """One-hot soft labels (K = 1, the next token) give exactly the hard loss; a soft label is
    the distribution after position a + j for block position j + 1 of anchor a."""
    _, drafter = make_drafter()
    tokens, feats = toy_sequences(drafter, batch=2, length=20)
    anchors = torch.tensor([[3, 18], [0, 7]])
    one_hot = (torch.cat([tokens[:, 1:], tokens[:, -1:]], 1)[..., None].int(), torch.ones(2, 20, 1))
    assert_close("one-hot soft == hard", drafter_loss(drafter, tokens, feats, anchors),
                 drafter_loss(drafter, tokens, feats, anchors, soft=one_hot), 1e-6)
    logits = drafter.block_logits(tokens, feats, anchors)
    ids = torch.stack([torch.arange(64)[:4]] * 20)[None].expand(2, -1, -1)  # K = 4 candidates
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1]).expand(2, 20, 4)
    ce = soft_cross_entropy(logits, *(_rows(t, anchors, 15) for t in (ids, probs)))
    want = -(probs[0, 0] * torch.log_softmax(logits[0, 0, 0], -1)[:4]).sum()
    assert_close("anchor 3, position 1", want, ce[0, 0, 0], 1e-6)


def test_acceptance_length_counts_leading_matches():
    match = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    assert acceptance_length(match) == 1 + (2 + 0 + 4) / 3


def test_state_dict_holds_no_target_weights_and_target_stays_frozen(tmp_path):
    target, drafter = make_drafter()
    keys = set(drafter.state_dict())
    assert not any("embed" in k or "lm_head" in k for k in keys)
    target_ptrs = {p.data_ptr() for p in target.parameters()}
    assert not target_ptrs & {p.data_ptr() for p in drafter.parameters()}
    before = {k: v.clone() for k, v in target.state_dict().items()}
    tokens, feats = toy_sequences(drafter, batch=4, length=24)
    rollouts = {"tokens": tokens, "features": feats, "prompt_len": 8}
    cfg = RECIPES["toy"].train
    train(drafter, drafter_loss_fn(rollouts, 2, 3), drafter_eval_fn(rollouts, 3), cfg, tmp_path)
    for k, v in target.state_dict().items():
        assert torch.equal(before[k], v), k
    assert all(p.grad is None for p in target.parameters())


# ----------------------------------------------------------------------------- data

def test_function_prompts_cut_signature_and_docstring():
    src = "import os\n\nX = 1\n\n@decorator\ndef f(a, b):\n    '''Add.\n\n    More.\n    '''\n    return a + b\n"
    (prompt,) = function_prompts(src)
    assert prompt == "import os\n\nX = 1\n\n@decorator\ndef f(a, b):\n    '''Add.\n\n    More.\n    '''\n"


def test_no_humaneval_prompt_in_drafter_prompts():
    prompts = drafter_prompts()
    assert len(prompts) > 2000 and len(set(prompts)) == len(prompts)
    corpus = "\0".join(prompts)
    leaked = [p for p in data.humaneval_prompts() if p in corpus or p.strip() in corpus]
    assert not leaked, f"{len(leaked)} HumanEval prompts appear in the drafter prompts"


@pytest.mark.parametrize("preset", TARGETS)
def test_rollouts_are_greedy_or_sampled_and_resume_from_chunks(preset, tmp_path):
    target = build_target(preset)
    kw = dict(new_tokens=6, prompt_len=8, batch_size=2, chunk_batches=1, cache_dir=tmp_path,
              temperatures=(0.0, 1.0))
    ref = make_rollouts(target, None, toy_prompts(), **kw)
    assert ref["tokens"].shape == (8, 14) and ref["features"].dtype == torch.float16
    assert ref["temperature"].tolist() == [0.0, 0.0, 1.0, 1.0] * 2  # batches alternate
    logits = target(ref["tokens"].long()).logits
    greedy = ref["temperature"] == 0
    argmax = logits[:, 7:-1].argmax(-1) == ref["tokens"][:, 8:].long()
    assert argmax[greedy].all() and not argmax[~greedy].all()
    # a sampled batch is what its seeded generator draws
    again = continue_prompts(target, ref["tokens"][2:4, :8].long(), 6, 1.0, torch.Generator().manual_seed(1))
    assert torch.equal(again, ref["tokens"][2:4].long())
    ids = prompt_ids(None, toy_prompts(), 8, 64)
    assert torch.equal(ref["tokens"][:, :8].long(), ids)
    # a crash after chunk 0: its saved part is reused (marked by zeroed features), the rest redone
    path = tmp_path / f"drafter-{preset[:3]}-{ref['key']}.pt"
    path.unlink()
    parts = path.with_suffix(".parts")
    parts.mkdir()
    torch.save((ref["tokens"][:2], torch.zeros_like(ref["features"][:2]), ref["temperature"][:2]),
               parts / "00000.pt")
    resumed = make_rollouts(target, None, toy_prompts(), **kw)
    assert (resumed["features"][:2] == 0).all() and torch.equal(resumed["features"][2:], ref["features"][2:])
    assert path.is_file() and not parts.exists()


# ----------------------------------------------------------------------------- train + ship

def test_train_drafter_toy_ships_reloads_and_resumes(tmp_path):
    target = build_target("gdn-toy")
    kw = dict(target=target, prompts=toy_prompts(), mask_token_id=MASK, out=tmp_path / "ckpt",
              runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache")
    man = train_drafter("gdn", "toy", **kw)
    assert set(man["files"]) == {"config.json", "model.safetensors"}
    assert man["train_state"]["step"] == RECIPES["toy"].train.total_steps
    assert len(man["agreement_block16"]) == 15 and len(man["agreement_block8"]) == 7
    assert np.isfinite(man["final_val_loss"]) and 1 <= man["tau_block8"] <= 8 and 1 <= man["tau_block16"] <= 16
    # reload == the trained weights rounded to bf16
    trained = DFlashDrafter.from_config(load_drafter(kw["out"], target).cfg, target).eval()
    saved = torch.load(kw["runs_dir"] / "train_state.pt", weights_only=False)["model"]
    trained.load_state_dict({k: v.bfloat16().float() for k, v in saved.items()})
    loaded = load_drafter(kw["out"], target)
    feats = torch.randn(6, loaded.cfg.feature_size)
    assert torch.equal(loaded.draft(loaded.new_state(), feats, 5, 16).logits,
                       trained.draft(trained.new_state(), feats, 5, 16).logits)
    # second run: cached rollouts, resumed training state, no new steps
    log = (kw["runs_dir"] / "log.csv").read_text()
    again = train_drafter("gdn", "toy", **kw)
    assert again["train_state"] == man["train_state"]
    assert (kw["runs_dir"] / "log.csv").read_text() == log
    assert again["files"]["model.safetensors"] == man["files"]["model.safetensors"]
    assert json.loads((kw["out"] / "manifest.json").read_text())["final_val_loss"] == man["final_val_loss"]
