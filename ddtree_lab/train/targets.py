"""Training the lab's targets on the large corpus (``ddtree-lab train-target``).

Both targets train on the same token stream (``train.corpus``: the standard library plus the
permissive dependency closure, validation held out by package) with the same schedule, so
their comparison is fair; sizes are matched on ACTIVE parameters (the MoE target has more in
total).

Recipe (issue 11, chosen by measurement on this machine): AdamW (0.9, 0.95), weight decay
0.1, peak LR 3e-3, linear warmup then cosine to 10 %, batch 16 x 256. The default preset is
scheduled on the wall clock (``TrainConfig.time_schedule``): the cosine ends after
``max_minutes`` whatever the machine's speed, so a run always finishes inside a session with
its learning rate decayed; the tokens it saw are recorded in the manifest and ``log.csv``.
"""
from __future__ import annotations

import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from . import data
from .checkpoints import ckpt_path, store_curve, write_manifest
from .corpus import build_corpus
from ..core.families.tiny import FAMILY_CLASSES, build_tiny
from ..core.models import PRESETS, TOY_PRESETS, build_target, count_parameters, load_target
from .loop import TrainConfig, lm_eval_loss, lm_loss_fn, train
from .unlikelihood import UnlikelihoodConfig, finetune

# token budgets per training preset (same for both archs)
TARGET_TRAIN = {
    # 65 min of one core: ~9M tokens (GDN) / ~11M (MLA); max_tokens only bounds the run
    "default": TrainConfig(max_tokens=40_000_000, batch_size=16, seq_len=256, lr=3e-3, warmup_steps=50,
                           max_minutes=65.0, time_schedule=True, eval_every=100),
    "quick": TrainConfig(max_tokens=400_000, batch_size=16, seq_len=256, lr=3e-3, warmup_steps=20),
    "toy": TrainConfig(max_tokens=4 * 8 * 32, batch_size=4, seq_len=32, lr=3e-3, warmup_steps=1,
                       eval_every=2),
}


def train_target(arch: str, preset: str = "default", out: Path | None = None,
                 runs_dir: Path | None = None, model_preset: str | None = None,
                 max_minutes: float | None = None, *, device: str = "cpu") -> dict:
    """Train (or resume) one target and ship it as a bf16 HF checkpoint with a manifest
    (``device="cuda"`` trains on a GPU; batches are moved there)."""
    if preset not in TARGET_TRAIN:
        raise ValueError(f"preset must be one of {sorted(TARGET_TRAIN)}, got {preset!r}")
    cfg = TARGET_TRAIN[preset] if max_minutes is None else replace(TARGET_TRAIN[preset], max_minutes=max_minutes)
    model_preset = model_preset or (f"{arch}-toy" if preset == "toy" else arch)
    out = Path(out or ckpt_path(arch, "target"))
    runs_dir = Path(runs_dir or data.DATA_DIR / "runs" / f"{arch}-target-{preset}")
    tok = data.load_tokenizer()
    corpus = build_corpus(tok=tok) if preset != "toy" else data.tokenized_corpus(tok)
    model_cfg = (PRESETS | TOY_PRESETS)[model_preset]
    if model_cfg.vocab_size < tok.get_vocab_size():
        corpus = {k: (v % model_cfg.vocab_size if k != "manifest" else v) for k, v in corpus.items()}
    model = build_target(model_cfg, seed=cfg.seed).to(device)
    val = corpus["val"]
    st = train(model, lm_loss_fn(corpus["train"], cfg.batch_size, cfg.seq_len),
               lambda m: lm_eval_loss(m, val, cfg.seq_len, max_windows=16),
               cfg, runs_dir, desc=f"target {arch}")
    store_curve(runs_dir, out, arch, "target")
    return ship_target(model, out, arch=arch, preset=preset, train_cfg=cfg, model_cfg=model_cfg, train_state=st,
                       corpus_manifest=_corpus_summary(corpus["manifest"]), val_tokens=val, seq_len=cfg.seq_len,
                       eval_windows=16 if preset == "toy" else 2_000,
                       tokens_trained=st["step"] * cfg.tokens_per_step, threads=torch.get_num_threads(),
                       tokens_per_s=round(st["step"] * cfg.tokens_per_step / max(st["elapsed_s"], 1e-9)))


def _corpus_summary(man: dict) -> dict:
    """The corpus manifest without its per-file and per-package lists (they live in
    ``data/corpus_summary.json``)."""
    return {k: v for k, v in man.items() if k not in ("files", "packages", "humaneval_files")}


def ship_target(model, out: Path, *, val_tokens: np.ndarray, seq_len: int, eval_windows: int,
                **info) -> dict:
    """Save bf16 weights, reload them and record the final validation loss of what ships
    (over the whole validation split, up to ``eval_windows`` windows)."""
    out.mkdir(parents=True, exist_ok=True)
    for p in out.glob("*"):
        p.unlink()
    model.to(torch.bfloat16).save_pretrained(out)
    PreTrainedTokenizerFast(tokenizer_object=data.load_tokenizer()).save_pretrained(out)  # the target's own tokenizer
    model.to(torch.float32)
    shipped = load_target(out, device=str(next(model.parameters()).device))
    val_loss = lm_eval_loss(shipped, val_tokens, seq_len, max_windows=eval_windows)
    info = {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v) for k, v in info.items()}
    return write_manifest(out, final_val_loss=val_loss, parameters=count_parameters(shipped),
                          train_time_s=info["train_state"]["elapsed_s"], **info)


# ``tiny_target``'s model: a Qwen3 (the DDTree paper's target class) small enough to train in a minute on a CPU
TINY_QWEN3 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=192, max_position_embeddings=4096, tie_word_embeddings=True)
# its LM phase: a fixed count of steps (about a minute on one thread here), so the walk-through's target is
# the same model on every machine of a kind whatever its load (a wall-clock minute gave fewer steps on a
# busy CI machine, and a target that loops: the CI failure of stop 73)
TINY_STEPS = 300
TINY_TRAIN = TrainConfig(max_tokens=TINY_STEPS * 16 * 128, batch_size=16, seq_len=128, lr=3e-3, warmup_steps=20,
                         eval_every=100)
# then (family "attention") unlikelihood against its own loops (``unlikelihood.finetune``, issue 66): the
# LM phase's model says one token forever ("\n") from a HumanEval prompt's first new token. Measured on
# one thread, 300 + 150 steps: no loop in the first 16 greedy tokens of the walk-through's 2 prompts on
# seeds 0, 1 and 7 of 0-7 (seed 2 loops still after 600 LM steps, 300 unlikelihood steps or the lens's
# candidates). The walk-through builds seed 0; counted in steps on one thread, it is that model on
# every machine of this kind. Its prefixes are the corpus's, never HumanEval's
TINY_UL = UnlikelihoodConfig(alpha=1.0, steps=150, lr=3e-3, candidates="ngram", eval_every=150)


def _train_tiny(model, corpus, family: str, seed: int, steps: int, minutes: float | None) -> dict:
    """``tiny_target``'s training: ``steps`` LM steps (or ``minutes`` of wall clock), then, for
    "attention", ``TINY_UL``'s unlikelihood steps -> {'step', 'elapsed_s'} of both."""
    cfg = replace(TINY_TRAIN, seed=seed, **(dict(max_tokens=10 ** 9, max_minutes=minutes, time_schedule=True)
                                            if minutes else dict(max_tokens=steps * 16 * 128)))
    with tempfile.TemporaryDirectory() as runs:  # a minute of training: nothing worth resuming
        st = train(model, lm_loss_fn(corpus["train"], cfg.batch_size, cfg.seq_len),
                   lambda m: lm_eval_loss(m, corpus["val"], cfg.seq_len, max_windows=8), cfg, Path(runs),
                   desc="tiny target")
        if family == "attention":
            ul = finetune(model, corpus, replace(TINY_UL, seed=seed), Path(runs) / "unlikelihood",
                          desc="tiny target: unlikelihood")
            st = {"step": st["step"] + ul["step"], "elapsed_s": st["elapsed_s"] + ul["elapsed_s"]}
    return st


def tiny_target(out: Path, steps: int = TINY_STEPS, seed: int = 0, family: str = "attention",
                minutes: float | None = None) -> dict:
    """A target of one's own in one call (``ddtree-lab tiny-target``): for ``family`` "attention" a
    ``Qwen3ForCausalLM`` built from a transformers ``Qwen3Config`` (``TINY_QWEN3``), else the hybrid
    class of that recurrent family (``families.tiny.FAMILY_CLASSES``: "gdn" Qwen3.5, "kda" Kimi
    Linear, "mamba2" Nemotron-H, "short_conv" LFM2) at width 64; trained for ``steps`` optimizer
    steps on the lab's stdlib corpus (0: random weights; ``minutes``: a wall-clock schedule of that
    length instead, the family study's targets), then, for "attention", ``TINY_UL``'s unlikelihood
    steps on its own greedy continuations, so its greedy output does not loop from its first
    tokens. Seeded, counted in steps and trained on one thread (whatever torch's count: it is
    restored after), it is the same model on every machine of a kind. Saved as a
    user's checkpoint is: ``save_pretrained`` and its tokenizer files (the lab's BPE, saved the
    transformers way), no lab manifest. -> {'architecture', 'parameters', 'final_val_loss',
    'steps', 'train_time_s'} (both phases' steps and seconds together)."""
    if family not in FAMILY_CLASSES:
        raise ValueError(f"family must be one of {sorted(FAMILY_CLASSES)}, got {family!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0 (0: random weights), got {steps!r}")
    if minutes is not None and not minutes > 0:
        raise ValueError(f"minutes must be > 0 (or None: train for steps), got {minutes!r}")
    tok = data.load_tokenizer()
    torch.manual_seed(seed)
    if family == "attention":
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=tok.get_vocab_size(), **TINY_QWEN3))
    else:
        model = build_tiny(FAMILY_CLASSES[family], vocab_size=tok.get_vocab_size(), width=64, dtype=torch.float32,
                           seed=seed)
    corpus = data.tokenized_corpus(tok)
    st = {"step": 0, "elapsed_s": 0.0}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # always one: a count of steps reproduces only at one thread count
    try:
        if steps > 0 or minutes:
            st = _train_tiny(model, corpus, family, seed, steps, minutes)
    finally:
        torch.set_num_threads(threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(out)
    with torch.no_grad():
        val = lm_eval_loss(model, corpus["val"], TINY_TRAIN.seq_len, max_windows=8)
    return {"architecture": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
            "final_val_loss": val, "steps": st["step"], "train_time_s": st["elapsed_s"]}
