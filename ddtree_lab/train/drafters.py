"""Training the lab's DFlash drafters on target rollouts (``ddtree-lab train-drafter``).

Recipe (DFlash section 4): the target's continuations of stdlib function prompts
(``rollouts``), greedy and sampled (``DrafterRecipe.temperatures``), random anchors inside the continuation (and the last prompt token), the
exp(-(k-1)/gamma) position weights, the lab's one resumable loop (``train.train``).
Shipped in the published layout (``dflash.DFlashDraftModel.save_pretrained``: ``config.json``
+ ``model.safetensors``, bf16) with the lab's ``manifest.json`` under
``data/checkpoints/{arch}-drafter``; ``load_drafter`` reads any published-format directory
(a z-lab checkpoint has no manifest), checks it against the target and reattaches the
target's embedding and LM head.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from dflash import DFlash2DraftModel, DFlashDraftModel
from transformers import Qwen3Config

from . import data
from .checkpoints import REBUILD, check_manifest, ckpt_path, store_curve, weights_digest, write_manifest
from .drafter_dir import check_drafter_dir  # its own module: the CLI reads it without torch
from ..core.conditional import selector_scores
from ..core.drafter import (DFlashDrafter, DrafterConfig, acceptance_length, block_labels, block_predecessors,
                            drafter_loss, greedy_matches)
from .rollouts import (anchor_range, drafter_prompts, make_rollouts, sample_anchors, select_rollouts,
                       split_rollouts, target_digest, target_features)
from ..core.models import ARCHS, arch_of, load_target
from .loop import TrainConfig, model_device, train


@dataclass(frozen=True)
class DrafterRecipe:
    """Rollout settings + drafter size + training schedule of one preset.

    TrainConfig.seq_len is the number of anchors per sequence, so the token budget counts
    blocks: steps = max_tokens / (batch_size * anchors).
    """
    train: TrainConfig
    num_rollouts: int
    prompt_len: int = 96
    new_tokens: int = 96
    gen_batch: int = 32
    num_layers: int = 3
    block_size: int = 16
    val_frac: float = 0.05
    # rollout batches cycle through these: 2/5 greedy, 1/5 each at T = 0.3, 0.6 and 1
    temperatures: tuple = (0.0, 0.3, 0.0, 0.6, 1.0)
    # real contexts: windows of the stdlib train split, ``corpus_share`` of every batch; every
    # sequence (rollouts too) is labelled by the target's own top-K next-token distribution
    corpus_windows: int = 2000
    soft_top_k: int = 8             # 0: hard labels (the sequence's own next tokens)
    corpus_share: float = 0.5
    rollout_soft: bool = True       # False: hard labels on the rollouts (soft_top_k then labels the corpus only)

    def __post_init__(self):
        if not 0 <= self.corpus_share <= 1:
            raise ValueError(f"corpus_share must be in [0, 1], got {self.corpus_share}")

    @property
    def anchors(self) -> int:
        return self.train.seq_len


def _schedule(steps: int, batch: int, anchors: int, **kw) -> TrainConfig:
    return TrainConfig(max_tokens=steps * batch * anchors, batch_size=batch, seq_len=anchors, **kw)


RECIPES: dict[str, DrafterRecipe] = {
    # 1 thread, shared 2-core CPU: ~0.32 s/step (8 x 8 blocks), rollouts ~6 prompts/s. 6000 steps at a
    # real-code share of 0.25 (a shipped target's drafter takes its own knobs: SHIPPED_KNOBS)
    "default": DrafterRecipe(_schedule(6000, 8, 8, lr=2e-3, warmup_steps=100, eval_every=250),
                             num_rollouts=4000, corpus_share=0.25),  # ~33 min training + ~11 min rollouts
    "quick": DrafterRecipe(_schedule(500, 8, 8, lr=2e-3, warmup_steps=30, eval_every=100),
                           num_rollouts=320, corpus_windows=160),  # ~3 min training + ~1 min rollouts
    "toy": DrafterRecipe(_schedule(4, 2, 3, lr=3e-3, warmup_steps=1, eval_every=2),
                         num_rollouts=8, prompt_len=8, new_tokens=24, gen_batch=4, num_layers=1,
                         temperatures=(0.0,), corpus_windows=4, soft_top_k=4),
}


# The shipped drafters' knobs: the drafter grid's picks (notebook 06, issue 27: the highest
# free-running tau whose teacher-forced tau on real code keeps the floor). The "default" preset of
# a shipped target trains with them (``preset_recipe``), so `train-drafter --arch A` rebuilds what ships.
SHIPPED_KNOBS: dict[str, dict] = {"gdn": {"corpus_share": 0.25, "layers": 3},
                                  "mla": {"corpus_share": 0.1, "layers": 5}}


def preset_recipe(recipes: dict, preset: str, arch: str | None) -> "DrafterRecipe":
    """``recipes[preset]`` (``RECIPES`` or ``DFLASH2_RECIPES``), with ``SHIPPED_KNOBS[arch]`` for
    the "default" preset of a shipped target (arch None or another arch: the preset as it is)."""
    if preset not in recipes:
        raise ValueError(f"preset must be one of {sorted(recipes)}, got {preset!r}")
    knobs = SHIPPED_KNOBS.get(arch, {}) if preset == "default" else {}
    return with_knobs(recipes[preset], **knobs)


def _batch(rollouts: dict, idx, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens [B, T] long, features [B, T, F] float32 of the rollouts at ``idx``, on ``device``."""
    idx = torch.as_tensor(idx)
    return rollouts["tokens"][idx].long().to(device), rollouts["features"][idx].float().to(device)


def drafter_loss_fn(rollouts: dict, batch_size: int, anchors: int, corpus: dict | None = None,
                    corpus_share: float = 0.5):
    """loss_fn(model, rng) for ``train.train``: random sequences, random anchors each; with
    ``corpus`` (real contexts, ``corpus_contexts``) round(batch_size * corpus_share) sequences
    of every batch come from it, and each part weighs by its share of the batch. Sources that
    carry soft labels (``soft_ids`` / ``soft_probs``) are trained on them."""
    n_corpus = 0 if corpus is None else round(batch_size * corpus_share)

    def part(source, n, drafter, rng):
        idx = rng.integers(0, len(source["tokens"]), size=n)
        tokens, features = _batch(source, idx, model_device(drafter))
        soft = (source["soft_ids"][idx], source["soft_probs"][idx]) if "soft_ids" in source else None
        return drafter_loss(drafter, tokens, features, sample_anchors(source, n, anchors, rng), soft=soft)

    def loss_fn(drafter, rng):
        if n_corpus == 0:
            return part(rollouts, batch_size, drafter, rng)
        if n_corpus == batch_size:
            return part(corpus, batch_size, drafter, rng)
        n_roll = batch_size - n_corpus
        return (n_roll * part(rollouts, n_roll, drafter, rng) + n_corpus * part(corpus, n_corpus, drafter, rng)) / batch_size
    return loss_fn


@torch.no_grad()
def target_soft_labels(target, tokens: torch.Tensor, top_k: int, batch_size: int = 32):
    """(ids int32 [N, T, K], probs float16 [N, T, K]): the target's next-token distribution
    (T = 1) after every position of tokens [N, T], its top K renormalised."""
    ids, probs = [], []
    for s in range(0, len(tokens), batch_size):
        logits = target(tokens[s:s + batch_size].long().to(target.device)).logits.float()
        top = torch.softmax(logits, -1).topk(top_k, -1)
        ids.append(top.indices.int().cpu())
        probs.append((top.values / top.values.sum(-1, keepdim=True)).half().cpu())
    return torch.cat(ids), torch.cat(probs)


@torch.no_grad()
def corpus_contexts(target, windows: int, length: int, layer_ids, top_k: int, seed: int = 0,
                    *, tok=None, batch_size: int = 32) -> dict:
    """Real contexts: ``windows`` random windows of ``length`` tokens of the stdlib train split
    (``data.tokenized_corpus``; HumanEval-free), with the target's features and (``top_k`` > 0)
    soft labels, in the rollouts' layout (prompt_len 1: anchors anywhere in the window)."""
    stream = data.tokenized_corpus(tok)["train"]
    starts = np.random.default_rng(seed).integers(0, len(stream) - length, size=windows)
    tokens = torch.from_numpy(np.stack([stream[s:s + length] for s in starts]).astype(np.int64))
    tokens = tokens % target.config.vocab_size
    feats = [target_features(target, tokens[s:s + batch_size].to(target.device), layer_ids).half().cpu()
             for s in range(0, windows, batch_size)]
    out = {"tokens": tokens.int(), "features": torch.cat(feats), "prompt_len": 1, "layer_ids": tuple(layer_ids)}
    if top_k:
        out["soft_ids"], out["soft_probs"] = target_soft_labels(target, tokens, top_k, batch_size)
    return out


def drafter_eval_fn(rollouts: dict, anchors: int, batch_size: int = 16, seed: int = 1):
    """eval_fn(model): mean loss on all held-out rollouts at fixed (seeded) anchors."""
    anchor_sets = sample_anchors(rollouts, len(rollouts["tokens"]), anchors, np.random.default_rng(seed))

    @torch.no_grad()
    def eval_fn(drafter):
        losses = []
        for s in range(0, len(anchor_sets), batch_size):
            tokens, features = _batch(rollouts, range(s, min(s + batch_size, len(anchor_sets))), model_device(drafter))
            losses.append(drafter_loss(drafter, tokens, features, anchor_sets[s:s + batch_size]).item())
        return float(np.mean(losses))
    return eval_fn


@torch.no_grad()
def _all_matches(drafter, rollouts: dict, block_size: int, batch_size: int = 4):
    """(match, valid) bool [N * A, bs-1] at every anchor of every rollout."""
    low, high = anchor_range(rollouts)
    n = len(rollouts["tokens"])
    anchors = torch.arange(low, high + 1).expand(n, -1)
    out = [greedy_matches(drafter, *_batch(rollouts, range(s, min(s + batch_size, n)), model_device(drafter)),
                          anchors[s:s + batch_size], block_size) for s in range(0, n, batch_size)]
    match, valid = (torch.cat([o[i] for o in out]).flatten(0, 1) for i in (0, 1))
    return match, valid


@torch.no_grad()
def selector_quality(drafter: DFlashDrafter, rollouts: dict, block_size: int, batch_size: int = 4) -> dict:
    """A DFlash 2 drafter's selector on greedy rollouts, every anchor with a full block:
    'unary_recall' (the target's token is in the unary top-K), 'selector_accuracy' (teacher
    forced: the selector's best candidate given the TRUE predecessor is the target's token),
    'unary_tau' / 'selector_tau' (1 + leading matches of the unary argmax path and of the
    selector's own path, each depth conditioned on the selector's previous pick)."""
    sel, low_high = drafter.selector, anchor_range(rollouts)
    n = len(rollouts["tokens"])
    anchors = torch.arange(low_high[0], low_high[1] + 1).expand(n, -1)
    acc = {"recall": [], "accuracy": [], "unary": [], "path": []}
    for s in range(0, n, batch_size):
        tokens, features = _batch(rollouts, range(s, min(s + batch_size, n)), model_device(drafter))
        a = anchors[s:s + batch_size].to(tokens.device)
        hidden = drafter.block_hidden(tokens, features, a, block_size)[:, :, 1:]  # [B, A, L, H]
        logits = drafter.logits(hidden)
        labels, preds = block_labels(tokens, a, block_size), block_predecessors(tokens, a, block_size)
        full = (labels != -100).all(-1)  # [B, A]
        unary, cand = torch.topk(logits, sel.top_k, dim=-1)  # [B, A, L, K]
        proj, succ = sel.hidden_projection(hidden), sel.successor_codebook(cand)
        tf = cand.gather(-1, selector_scores(unary, proj, sel.predecessor_codebook(preds), succ).argmax(-1, keepdim=True))[..., 0]
        walk, prev = [], preds[..., 0]
        for d in range(block_size - 1):
            pick = selector_scores(unary[:, :, d], proj[:, :, d], sel.predecessor_codebook(prev), succ[:, :, d]).argmax(-1)
            prev = cand[:, :, d].gather(-1, pick[..., None])[..., 0]
            walk.append(prev)
        acc["recall"].append((cand == labels[..., None]).any(-1)[full])
        acc["accuracy"].append((tf == labels)[full])
        acc["unary"].append((logits.argmax(-1) == labels)[full])
        acc["path"].append((torch.stack(walk, -1) == labels)[full])
    cat = {k: torch.cat(v) for k, v in acc.items()}  # [N, L]
    return {"unary_recall": cat["recall"].float().mean().item(), "selector_accuracy": cat["accuracy"].float().mean().item(),
            "unary_tau": acceptance_length(cat["unary"]), "selector_tau": acceptance_length(cat["path"])}


def draft_quality(drafter, rollouts: dict, block_size: int) -> dict:
    """{'agreement': top-1 agreement with the target's greedy token at block positions
    1..bs-1, 'tau': linear-verification acceptance length at T=0}, over every anchor.

    tau counts the anchors with a full block of labels. It is exact for greedy decoding: on a
    greedy rollout the drafter sees what it would see when decoding (features up to float
    noise), so its leading matches are the tokens verification would accept.
    """
    match, valid = _all_matches(drafter, rollouts, block_size)
    agreement = ((match & valid).sum(0) / valid.sum(0).clamp_min(1)).tolist()
    return {"agreement": agreement, "tau": acceptance_length(match[valid.all(-1)])}


LABELS = {"soft": (True, True), "mixed": (True, False), "hard": (False, False)}  # (corpus soft, rollouts soft)


def with_knobs(recipe: DrafterRecipe, corpus_share: float | None = None, steps: int | None = None,
               labels: str | None = None, layers: int | None = None, rollouts: int | None = None) -> DrafterRecipe:
    """``recipe`` with the share of real-code windows, the step count, the labels, the
    drafter's depth and the rollout count changed (None: unchanged). labels: ``LABELS``: "soft"
    (the target's top-K everywhere), "mixed" (hard on the rollouts, which the target wrote; soft
    on the real code) or "hard". layers: the drafter's decoder layers (``DrafterRecipe.num_layers``)."""
    for name, value in (("steps", steps), ("layers", layers), ("rollouts", rollouts)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if labels is not None and labels not in LABELS:
        raise ValueError(f"labels must be one of {tuple(LABELS)}, got {labels!r}")
    t = recipe.train
    out = replace(recipe, train=t if steps is None else replace(t, max_tokens=steps * t.batch_size * t.seq_len),
                  corpus_share=recipe.corpus_share if corpus_share is None else corpus_share,
                  num_layers=recipe.num_layers if layers is None else layers,
                  num_rollouts=recipe.num_rollouts if rollouts is None else rollouts)
    if labels is None:
        return out
    corpus_soft, rollout_soft = LABELS[labels]
    return replace(out, soft_top_k=(recipe.soft_top_k or RECIPES["default"].soft_top_k) if corpus_soft else 0,
                   rollout_soft=rollout_soft)


def scaled_data(recipe: DrafterRecipe, share: float) -> DrafterRecipe:
    """``recipe`` making ``share`` (< 1) of its rollouts and real-code windows, for a run of that
    share of its steps: at least one batch of each temperature of the cycle (so the held-out
    rollouts hold greedy ones to measure tau on) and one batch of windows."""
    rollouts = max(recipe.gen_batch * len(recipe.temperatures), math.ceil(recipe.num_rollouts * share))
    windows = max(recipe.train.batch_size, math.ceil(recipe.corpus_windows * share)) if recipe.corpus_windows else 0
    return replace(recipe, num_rollouts=min(rollouts, recipe.num_rollouts),
                   corpus_windows=min(windows, recipe.corpus_windows))


def train_drafter(arch: str | None, preset: str = "default", *, target=None, prompts: list | None = None,
                  tok=None, mask_token_id: int | None = None, out: Path | None = None,
                  runs_dir: Path | None = None, cache_dir: Path | None = data.CACHE_DIR,
                  max_minutes: float | None = None, device: str | None = None,
                  corpus_share: float | None = None, steps: int | None = None, rollouts: int | None = None) -> dict:
    """Make/load rollouts, train (or resume) a drafter for ``target`` and ship it.

    target: defaults to the shipped ``{arch}-target`` (float32); any target ``load_target``
    accepts (arch None: ``arch_of(target)``). prompts: strings (with ``tok``, default the lab
    tokenizer) or token-id lists; default ``drafter_prompts()``. mask_token_id: default the
    tokenizer's MASK. out: default the shipped ``{arch}-drafter``; runs_dir (the resumable
    training state): ``data/runs/{out's name}-{preset}`` for a drafter inside ``data/`` (the
    shipped ones), else ``{out}.run`` beside ``out``. corpus_share, steps, rollouts: the recipe's knobs
    (``with_knobs``; default the preset's, ``preset_recipe``: a shipped arch's own for "default");
    fewer steps than the preset's, without ``rollouts``, make that share of its data (``scaled_data``).
    Returns the shipped manifest.
    """
    base = preset_recipe(RECIPES, preset, arch)
    recipe = with_knobs(base, corpus_share, steps, rollouts=rollouts)
    if rollouts is None and recipe.train.total_steps < base.train.total_steps:
        recipe = scaled_data(recipe, recipe.train.total_steps / base.train.total_steps)
    if target is None:
        if arch is None:
            raise ValueError("arch must be given when no target is")
        path = ckpt_path(arch, "target")
        check_manifest(path, REBUILD["target"].format(arch=arch))
        target = load_target(path, device=device)
    arch = arch_of(target) if arch is None else arch
    if arch_of(target) != arch:
        raise ValueError(f"target must be a {arch!r} model, got {arch_of(target)!r}")
    if prompts is None or mask_token_id is None:
        tok = tok or data.load_tokenizer()
    mask_token_id = data.special_ids(tok)["mask"] if mask_token_id is None else mask_token_id
    if mask_token_id is None or not 0 <= mask_token_id < target.config.vocab_size:
        raise ValueError(f"mask_token_id must be a token id in [0, {target.config.vocab_size}) (the tokenizer has "
                         f"no {data.MASK!r} token: pass one, e.g. an unused special token), got {mask_token_id!r}")
    out = Path(out or ckpt_path(arch, "drafter"))
    print(plan_line(recipe))
    training = training_data(target, recipe, tok, prompts, recipe.train.seed, cache_dir)
    return fit_drafter(target, arch, recipe, training, mask_token_id, Path(runs_dir or default_runs_dir(out, preset)),
                       out=out, preset=preset, max_minutes=max_minutes)


def plan_line(recipe: DrafterRecipe) -> str:
    """What a drafter's training will do, printed before it starts: its phases and what shortens them."""
    windows = f", {recipe.corpus_windows} real-code windows" if recipe.corpus_windows and recipe.corpus_share else ""
    return (f"train-drafter: {recipe.num_rollouts} target rollouts of {recipe.new_tokens} tokens{windows}, then "
            f"{recipe.train.total_steps} steps (each phase prints its estimate once it starts; --steps N and "
            f"--rollouts N shorten them)")


def default_runs_dir(out: Path, preset: str) -> Path:
    """Where a drafter's resumable training state lives: ``data/runs/{out's name}-{preset}`` for
    a drafter inside ``data/`` (the shipped ones), else ``{out}.run`` beside ``out``."""
    inside = out.resolve().is_relative_to(data.DATA_DIR.resolve())
    return data.DATA_DIR / "runs" / f"{out.name}-{preset}" if inside else out.with_name(f"{out.name}.run")


def fit_drafter(target, arch: str, recipe: DrafterRecipe, training: tuple, mask_token_id: int, runs_dir: Path,
                *, out: Path, preset: str = "default", max_minutes: float | None = None) -> dict:
    """Train (or resume, from ``runs_dir``) one DFlash drafter for ``target`` as ``recipe`` says,
    on ``training`` (``training_data``'s tuple), and ship it to ``out``; -> its manifest."""
    rollouts, train_r, val_r, corpus = training
    cfg = replace(recipe.train, max_minutes=max_minutes)
    dcfg = DrafterConfig.for_target(target, mask_token_id, num_layers=recipe.num_layers,
                                    block_size=recipe.block_size, target_layer_ids=rollouts["layer_ids"])
    torch.manual_seed(cfg.seed)
    drafter = DFlashDrafter.from_config(dcfg, target).to(target.device)
    return _train_and_ship(drafter, target, arch, preset, recipe, cfg, rollouts=rollouts, train_r=train_r,
                           val_r=val_r, corpus=corpus, runs_dir=Path(runs_dir), out=Path(out), kind="drafter")


def training_data(target, recipe: DrafterRecipe, tok, prompts, seed: int, cache_dir):
    """(rollouts, train split with soft labels, held-out split, corpus windows or None): the
    data every drafter of a target is trained on (DFlash and DFlash 2 alike)."""
    prompts = drafter_prompts() if prompts is None else prompts
    rollouts = make_rollouts(target, tok, prompts, new_tokens=recipe.new_tokens, prompt_len=recipe.prompt_len,
                             max_rollouts=recipe.num_rollouts, batch_size=recipe.gen_batch,
                             temperatures=recipe.temperatures, seed=seed, cache_dir=cache_dir)
    train_r, val_r = split_rollouts(rollouts, recipe.val_frac, seed=seed)
    if recipe.soft_top_k and recipe.rollout_soft:
        train_r = {**train_r, **dict(zip(("soft_ids", "soft_probs"),
                                         target_soft_labels(target, train_r["tokens"], recipe.soft_top_k)))}
    use_corpus = recipe.corpus_windows and recipe.corpus_share > 0
    corpus = corpus_contexts(target, recipe.corpus_windows, recipe.prompt_len + recipe.new_tokens,
                             rollouts["layer_ids"], recipe.soft_top_k, seed, tok=tok) if use_corpus else None
    return rollouts, train_r, val_r, corpus


def _train_and_ship(drafter, target, arch, preset, recipe, cfg, *, rollouts, train_r, val_r, corpus,
                    runs_dir: Path, out: Path, kind: str, **extra) -> dict:
    tdigest = target_digest(target)  # the run's identity: a run of another target is never resumed
    st = train(drafter, drafter_loss_fn(train_r, cfg.batch_size, recipe.anchors, corpus, recipe.corpus_share),
               drafter_eval_fn(val_r, recipe.anchors), cfg, runs_dir, desc=f"{kind} {arch}",
               identity={"target_sha256": tdigest, "kind": kind})
    store_curve(runs_dir, out, arch, kind)
    info = {"arch": arch, "preset": preset, "recipe": asdict(replace(recipe, train=cfg)), "train_state": st,
            "threads": torch.get_num_threads(), "target_sha256": tdigest,
            "rollouts": {k: rollouts[k] for k in ("key", "num_rollouts", "prompt_len", "new_tokens", "layer_ids",
                                                  "temperatures")}, **extra}
    return ship_drafter(drafter, out, val_r, recipe.anchors, **info)


# DFlash 2's shape as published (conv kernel 2, groups of 16, top-16 candidates), the
# selector rank scaled down with the hidden size (published 256 at hidden 4096+)
DFLASH2_SHAPE = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 64, "selector_top_k": 16}
# fine-tuning a DFlash drafter into DFlash 2: ~0.5 s/step on one shared core here
DFLASH2_RECIPES = {"default": replace(RECIPES["default"], train=_schedule(1000, 8, 8, lr=1e-3, warmup_steps=50,
                                                                           eval_every=200)),
                   "quick": replace(RECIPES["quick"], train=_schedule(200, 8, 8, lr=1e-3, warmup_steps=20,
                                                                       eval_every=100)),
                   "toy": RECIPES["toy"]}


def dflash2_from(drafter: DFlashDrafter, target, **shape) -> DFlashDrafter:
    """A ``DFlash2DraftModel`` that starts as ``drafter`` exactly: every DFlash weight copied,
    every causal convolution the identity (base kernel 1 at offset 0, no dynamic part) and
    the selector's successor codebook zero (so its scores are the unary logits). ``shape``
    overrides ``DFLASH2_SHAPE``."""
    config = copy.deepcopy(drafter.model.config)
    config.dflash_config = {**(config.dflash_config or {}), **DFLASH2_SHAPE, **shape}
    config.architectures = ["DFlash2DraftModel"]
    model = DFlash2DraftModel(config).to(drafter.device)
    missing, unexpected = model.load_state_dict(drafter.model.state_dict(), strict=False)
    if unexpected or any(not ("_conv." in k or "candidate_selector." in k) for k in missing):
        raise ValueError(f"a DFlash drafter does not map onto DFlash 2: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for layer in model.layers:
            for conv in (layer.attention_conv, layer.mlp_conv):
                conv.base_kernel.zero_()
                conv.base_kernel[:, 0] = 1.0
                conv.kernel_projection.weight.zero_()
        model.candidate_selector.successor_codebook.weight.zero_()
    return DFlashDrafter(model, target)


def train_drafter2(arch: str | None, preset: str = "default", *, target=None, drafter=None,
                   prompts: list | None = None, tok=None, out: Path | None = None, runs_dir: Path | None = None,
                   cache_dir: Path | None = data.CACHE_DIR, max_minutes: float | None = None,
                   corpus_share: float | None = None, labels: str | None = None) -> dict:
    """Train a DFlash 2 drafter (``dflash.DFlash2DraftModel``, convolutions and candidate selector)
    for ``target``: it starts as ``drafter`` (default the shipped DFlash drafter, ``dflash2_from``)
    and is trained on the same data with the DFlash loss plus the selector's K-way cross
    entropy (``core.drafter.selector_loss``). Ships under ``data/checkpoints/{arch}-drafter2``,
    or ``out`` (a target of one's own: ``target`` and its ``drafter`` given, arch None reads
    as ``arch_of(target)``; the run beside ``out``, ``default_runs_dir``).
    corpus_share, labels: the data knobs (``with_knobs``), as the DFlash drafter was trained."""
    recipe = with_knobs(preset_recipe(DFLASH2_RECIPES, preset, arch), corpus_share, labels=labels)
    cfg = replace(recipe.train, max_minutes=max_minutes)
    if target is None:
        check_manifest(ckpt_path(arch, "target"), REBUILD["target"].format(arch=arch))
        target = load_target(ckpt_path(arch, "target"))
    arch = arch_of(target) if arch is None else arch
    drafter = drafter or load_drafter(ckpt_path(arch, "drafter"), target)
    recipe = replace(recipe, num_layers=drafter.cfg.num_layers)  # its depth is the DFlash drafter's
    tok = tok or data.load_tokenizer()
    rollouts, train_r, val_r, corpus = training_data(target, recipe, tok, prompts, cfg.seed, cache_dir)
    torch.manual_seed(cfg.seed)
    drafter2 = dflash2_from(drafter, target).float().train()
    out = Path(out or ckpt_path(arch, "drafter2"))
    return _train_and_ship(drafter2, target, arch, preset, recipe, cfg, rollouts=rollouts, train_r=train_r,
                           val_r=val_r, corpus=corpus, runs_dir=Path(runs_dir or default_runs_dir(out, preset)), out=out, kind="drafter2",
                           initialised_from=drafter_digest(drafter))


def ship_drafter(drafter: DFlashDrafter, out: Path, val_rollouts: dict, anchors: int, **info) -> dict:
    """Round the drafter to bf16 in place, save it in the published layout, record the
    metrics of what ships."""
    out.mkdir(parents=True, exist_ok=True)
    for p in out.glob("*"):
        p.unlink()
    drafter.model.to(torch.bfloat16).save_pretrained(out)
    drafter.model.float().eval()
    bs = drafter.cfg.block_size
    metrics = {"final_val_loss": drafter_eval_fn(val_rollouts, anchors)(drafter)}
    greedy = greedy_rollouts(val_rollouts)  # tau is exact on greedy rollouts only
    for size in sorted({bs, max(2, bs // 2)}, reverse=True):
        quality = draft_quality(drafter, greedy, size)
        metrics |= {f"agreement_block{size}": quality["agreement"], f"tau_block{size}": quality["tau"]}
        if drafter.selector is not None:
            metrics |= {f"{k}_block{size}": v for k, v in selector_quality(drafter, greedy, size).items()}
    return write_manifest(out, **metrics, train_time_s=info["train_state"]["elapsed_s"],
                          drafter_config=asdict(drafter.cfg), **info)


def greedy_rollouts(rollouts: dict) -> dict:
    """The T = 0 rollouts (all of them when the rollouts carry no temperature)."""
    if "temperature" not in rollouts:
        return rollouts
    keep = torch.nonzero(rollouts["temperature"] == 0).flatten()
    if len(keep) == 0:
        raise ValueError("the held-out rollouts hold no greedy (T = 0) rollout to measure tau on")
    return select_rollouts(rollouts, keep)


def load_drafter(path: Path, target, rebuild: str | None = None) -> DFlashDrafter:
    """A published-format drafter directory (``config.json`` + safetensors, e.g. z-lab's) in
    float32 on the target's embedding and LM head. A lab manifest, when present, has every
    file's hash checked; ``check_drafter_fits`` raises a ``ValueError`` naming the field on
    any mismatch with the target."""
    path = Path(path)
    if rebuild is None:  # only a shipped target's arch has a rebuild command without a directory
        rebuild = REBUILD["drafter"].format(arch=arch_of(target)) if arch_of(target) in ARCHS else ""
    if (path / "manifest.json").is_file():
        check_manifest(path, rebuild)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path / 'config.json'} is missing: a drafter directory holds a published "
                                f"DFlash checkpoint (save_pretrained layout){'; rebuild it with `' + rebuild + '`' if rebuild else ''}")
    check_drafter_dir(path)
    check_drafter_fits(DrafterConfig.from_qwen3_config(Qwen3Config.from_pretrained(path)), target)
    model = drafter_class(path).from_pretrained(path, dtype=torch.float32)
    return DFlashDrafter(model, target).eval()


def drafter_digest(drafter) -> str:
    """``weights_digest`` of a drafter (its config included)."""
    return weights_digest(drafter, asdict(drafter.cfg))


def drafter_class(path: Path):
    """``DFlash2DraftModel`` for a directory whose config names it (its convolutions and
    candidate selector load too: the lab drafts conditional trees from it), else ``DFlashDraftModel``."""
    archs = json.loads((Path(path) / "config.json").read_text()).get("architectures") or []
    return DFlash2DraftModel if "DFlash2DraftModel" in archs else DFlashDraftModel


def check_drafter_fits(cfg: DrafterConfig, target) -> None:
    """``ValueError`` naming the field and both values when a drafter cannot serve ``target``."""
    c = target.config
    checks = [("hidden_size", cfg.hidden_size, c.hidden_size, cfg.hidden_size == c.hidden_size),
              ("vocab_size", cfg.vocab_size, c.vocab_size, cfg.vocab_size == c.vocab_size),
              ("target_layer_ids", list(cfg.target_layer_ids), f"layers 0..{c.num_hidden_layers - 1}",
               all(0 <= i < c.num_hidden_layers for i in cfg.target_layer_ids)),
              ("mask_token_id", cfg.mask_token_id, f"vocabulary 0..{c.vocab_size - 1}",
               0 <= cfg.mask_token_id < c.vocab_size)]
    for name, mine, theirs, ok in checks:
        if not ok:
            raise ValueError(f"drafter {name} = {mine} does not fit the target ({theirs})")
