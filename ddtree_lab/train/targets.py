"""Training the lab's targets on the stdlib corpus (``ddtree-lab train-target``).

Both targets train on the same token stream with the same schedule, so their comparison is
fair; sizes are matched on ACTIVE parameters (the MoE target has more in total).
"""
from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from . import data
from .checkpoints import ckpt_path, write_manifest
from ..core.models import PRESETS, build_target, count_parameters, load_target
from .loop import TrainConfig, lm_eval_loss, lm_loss_fn, train

# token budgets per training preset (same for both archs)
TARGET_TRAIN = {
    "default": TrainConfig(max_tokens=3_200_000, batch_size=16, seq_len=256, lr=3e-3, warmup_steps=60),
    "quick": TrainConfig(max_tokens=400_000, batch_size=16, seq_len=256, lr=3e-3, warmup_steps=20),
    "toy": TrainConfig(max_tokens=4 * 8 * 32, batch_size=4, seq_len=32, lr=3e-3, warmup_steps=1,
                       eval_every=2),
}


def train_target(arch: str, preset: str = "default", out: Path | None = None,
                 runs_dir: Path | None = None, model_preset: str | None = None,
                 max_minutes: float | None = None) -> dict:
    """Train (or resume) one target and ship it as a bf16 HF checkpoint with a manifest."""
    if preset not in TARGET_TRAIN:
        raise ValueError(f"preset must be one of {sorted(TARGET_TRAIN)}, got {preset!r}")
    cfg = replace(TARGET_TRAIN[preset], max_minutes=max_minutes)
    model_preset = model_preset or (f"{arch}-toy" if preset == "toy" else arch)
    out = Path(out or ckpt_path(arch, "target"))
    runs_dir = Path(runs_dir or data.DATA_DIR / "runs" / f"{arch}-target-{preset}")
    tok = data.load_tokenizer()
    corpus = data.tokenized_corpus(tok)
    model_cfg = PRESETS[model_preset]
    if model_cfg.vocab_size < tok.get_vocab_size():
        corpus = {k: (v % model_cfg.vocab_size if k != "manifest" else v) for k, v in corpus.items()}
    model = build_target(model_cfg, seed=cfg.seed)
    val = corpus["val"]
    st = train(model, lm_loss_fn(corpus["train"], cfg.batch_size, cfg.seq_len),
               lambda m: lm_eval_loss(m, val, cfg.seq_len, max_windows=16),
               cfg, runs_dir, desc=f"target {arch}")
    return ship_target(model, out, arch=arch, preset=preset, train_cfg=cfg, model_cfg=model_cfg, train_state=st,
                       corpus_manifest=corpus["manifest"], val_tokens=val, seq_len=cfg.seq_len,
                       eval_windows=16 if preset == "toy" else 10_000)


def ship_target(model, out: Path, *, val_tokens: np.ndarray, seq_len: int, eval_windows: int,
                **info) -> dict:
    """Save bf16 weights, reload them and record the final validation loss of what ships
    (over the whole validation split, up to ``eval_windows`` windows)."""
    out.mkdir(parents=True, exist_ok=True)
    for p in out.glob("*"):
        p.unlink()
    model.to(torch.bfloat16).save_pretrained(out)
    model.to(torch.float32)
    shipped = load_target(out)
    val_loss = lm_eval_loss(shipped, val_tokens, seq_len, max_windows=eval_windows)
    info = {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v) for k, v in info.items()}
    return write_manifest(out, final_val_loss=val_loss, parameters=count_parameters(shipped),
                          train_time_s=info["train_state"]["elapsed_s"], **info)
