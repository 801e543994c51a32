"""One resumable training loop for every model in the lab (targets and drafters).

AdamW, linear warmup then cosine decay over a token budget (a wall-clock cap stops early
and is recorded), a tqdm bar with the loss, validation loss logged to ``log.csv``, and a
training state saved atomically every few minutes: kill the run and start it again, it
continues from the last checkpoint with the same batches (batch ``s`` is drawn from
``np.random.default_rng([seed, s])``).
"""
from __future__ import annotations

import csv
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from ..common import pace_line


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: int                 # token budget: the schedule's length
    batch_size: int = 16
    seq_len: int = 256
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    max_minutes: float | None = None  # wall-clock cap (training stops early, noted in the log)
    time_schedule: bool = False     # warmup + cosine over max_minutes of wall clock, not max_tokens
    eval_every: int = 200
    ckpt_every_s: float = 180.0
    seed: int = 0

    def __post_init__(self):
        if self.time_schedule and not (self.max_minutes or 0) > 0:
            raise ValueError(f"max_minutes must be > 0 with time_schedule=True, got {self.max_minutes}")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def total_steps(self) -> int:
        return max(1, math.ceil(self.max_tokens / self.tokens_per_step))


@dataclass(frozen=True)
class SpeedConfig:
    """How a step runs on the CPU, not what it computes: never part of a run's identity, so a
    run resumes under other speed settings (profile: /tmp/realism/profile_train.py, issue 11).

    flush_denormal: subnormal floats become 0 while training. The GDN chunk kernel's decays
        (exp of large negative sums) underflow into subnormals, which x86 multiplies 10-100x
        slower; flushing them (|x| < 1.2e-38) made the GDN target 1.2-1.5x faster (MLA: same).
    fused_adam: AdamW's one-kernel CPU step (same update maths as the per-tensor loop).
    autocast_bf16: forward under ``torch.autocast("cpu", bfloat16)`` (mixed precision; the
        weights, optimizer and loss stay float32). ~1.3x on the GDN target, ~0.8x on MLA.
    sdpa: a HF model with ``config._attn_implementation == "eager"`` trains with "sdpa" (the
        same attention maths, one fused kernel) and gets "eager" back on exit. ~1.15x on GDN.
    compile: ``torch.compile`` the model for the training forward/backward (inductor, C++);
        off: compiling the targets took over 20 min on one shared core here.
    """

    flush_denormal: bool = True
    fused_adam: bool = True
    autocast_bf16: bool = False
    sdpa: bool = False
    compile: bool = False


def progress(cfg: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Fraction of the schedule done: steps over total_steps, or (``time_schedule``) the larger
    of that and the elapsed wall clock over ``max_minutes``. Training ends at 1."""
    frac = step / cfg.total_steps
    if cfg.time_schedule:
        frac = max(frac, elapsed_s / (60 * cfg.max_minutes))
    return min(1.0, frac)


def lr_at(cfg: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Linear warmup to cfg.lr over warmup_steps, then cosine to cfg.lr * min_lr_frac at the
    end of the schedule (``progress`` 1)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    start = progress(cfg, cfg.warmup_steps) if not cfg.time_schedule else 0.0
    frac = min(1.0, max(0.0, progress(cfg, step, elapsed_s) - start) / max(1e-9, 1 - start))
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def random_windows(tokens: np.ndarray, batch_size: int, seq_len: int, rng) -> torch.Tensor:
    """[batch_size, seq_len + 1] random windows of a token stream."""
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
    return torch.from_numpy(np.stack([tokens[s:s + seq_len + 1] for s in starts]).astype(np.int64))


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class CsvLog:
    """A CSV log of ``FIELDS`` (here log.csv, one row per eval); rows past a resumed
    checkpoint's step are dropped (the run replays them)."""

    FIELDS = ["step", "tokens", "elapsed_s", "lr", "train_loss", "val_loss"]

    def __init__(self, path: Path, resume_step: int):
        self.path = path
        rows = []
        if path.is_file() and resume_step > 0:
            with path.open() as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, self.FIELDS)
            w.writeheader()
            w.writerows(rows)

    def add(self, **row) -> None:
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.FIELDS).writerow(row)


class _Bar:
    """Progress in steps, or in seconds of the wall-clock schedule (``time_schedule``)."""

    def __init__(self, cfg: TrainConfig, st: dict, desc: str):
        self.by_time = cfg.time_schedule
        total, done = (round(60 * cfg.max_minutes), st["elapsed_s"]) if self.by_time else (cfg.total_steps, st["step"])
        self.bar = tqdm(total=total, initial=round(done), desc=desc, unit="s" if self.by_time else "it",
                        dynamic_ncols=True)

    def update(self, st: dict, **postfix) -> None:
        done = min(self.bar.total, round(st["elapsed_s"])) if self.by_time else st["step"]
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix(step=st["step"], **postfix)

    def close(self) -> None:
        self.bar.close()


def train(model: torch.nn.Module, loss_fn: Callable, eval_fn: Callable, cfg: TrainConfig,
          out_dir: Path, *, desc: str = "train", speed: SpeedConfig = SpeedConfig(),
          identity: dict | None = None) -> dict:
    """Run (or resume) training; returns the final training state summary.

    loss_fn(model, rng) -> scalar loss for one batch drawn with ``rng``;
    eval_fn(model) -> validation loss (float). Only parameters with requires_grad train.
    ``speed`` picks the CPU fast paths (see SpeedConfig); the denormal flush is undone on exit.
    identity: what the run trains for (a drafter: its target's digest), saved with the state;
    a saved state of another identity (or of none, when one is given) is refused, never resumed.
    """
    hf_cfg = getattr(model, "config", None)
    attn = getattr(hf_cfg, "_attn_implementation", None)
    if speed.sdpa and attn == "eager":
        hf_cfg._attn_implementation = "sdpa"
    torch.set_flush_denormal(speed.flush_denormal)
    try:
        return _train(model, loss_fn, eval_fn, cfg, Path(out_dir), desc, speed=speed, identity=identity)
    finally:
        torch.set_flush_denormal(False)
        if speed.sdpa and attn == "eager":
            hf_cfg._attn_implementation = attn


def _train(model, loss_fn, eval_fn, cfg: TrainConfig, out_dir: Path, desc: str,
           *, speed: SpeedConfig, identity: dict | None = None) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95),
                            fused=speed.fused_adam or None)
    step_model = torch.compile(model) if speed.compile else model  # shares model's parameters
    state_path = out_dir / "train_state.pt"
    st = {"step": 0, "elapsed_s": 0.0, "val_loss": None, "stopped_by": None}
    if state_path.is_file():
        saved = torch.load(state_path, weights_only=False)
        if saved["config"] != asdict(cfg):
            raise ValueError(f"{state_path} was written with another config; delete it to restart")
        if saved.get("identity") != identity:
            raise ValueError(f"{out_dir} holds the run of {_named(saved.get('identity'))}, not of {_named(identity)}: "
                             f"delete {out_dir} to start over, or train into another directory")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        st = saved["state"]
    log = CsvLog(out_dir / "log.csv", st["step"])

    def save():
        _atomic_save({"model": model.state_dict(), "opt": opt.state_dict(), "state": st,
                      "config": asdict(cfg), "identity": identity}, state_path)

    model.train()
    bar = _Bar(cfg, st, desc)
    t0, last_ckpt, ema = time.monotonic() - st["elapsed_s"], time.monotonic(), None
    start, paced = (st["step"], st["elapsed_s"]), cfg.time_schedule or cfg.total_steps - st["step"] < 40
    while progress(cfg, st["step"], st["elapsed_s"]) < 1:
        if cfg.max_minutes is not None and not cfg.time_schedule and st["elapsed_s"] > 60 * cfg.max_minutes:
            st["stopped_by"] = f"wall-clock cap {cfg.max_minutes} min at step {st['step']}"
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, st["step"], st["elapsed_s"])
        with torch.autocast(model_device(model).type, dtype=torch.bfloat16, enabled=speed.autocast_bf16):
            loss = loss_fn(step_model, np.random.default_rng([cfg.seed, st["step"]]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        st["step"] += 1
        st["elapsed_s"] = time.monotonic() - t0
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if not paced and st["step"] - start[0] >= 20:  # the estimate, once the first steps are timed
            tqdm.write(pace_line(desc, st["step"] - start[0], cfg.total_steps - start[0], st["elapsed_s"] - start[1],
                                 "steps"))
            paced = True
        bar.update(st, loss=f"{ema:.3f}", val=st["val_loss"])
        last = progress(cfg, st["step"], st["elapsed_s"]) >= 1
        if st["step"] % cfg.eval_every == 0 or last:
            model.eval()
            st["val_loss"] = float(eval_fn(model))
            model.train()
            log.add(step=st["step"], tokens=st["step"] * cfg.tokens_per_step,
                    elapsed_s=round(st["elapsed_s"], 1), lr=lr_at(cfg, st["step"] - 1, st["elapsed_s"]),
                    train_loss=round(ema, 4), val_loss=round(st["val_loss"], 4))
        if time.monotonic() - last_ckpt > cfg.ckpt_every_s or last:
            save()
            last_ckpt = time.monotonic()
    bar.close()
    save()
    model.eval()
    return dict(st)


@torch.no_grad()
def lm_eval_loss(model, tokens: np.ndarray, seq_len: int = 256, max_windows: int = 64) -> float:
    """Mean next-token loss (nats) over up to max_windows disjoint windows of a stream, spread
    evenly over it (so a subset still samples every part of the split)."""
    total = (len(tokens) - 1) // seq_len
    n = min(max_windows, total)
    losses = []
    for i in np.linspace(0, total - 1, n).round().astype(int) if n else []:
        w = torch.from_numpy(tokens[i * seq_len:(i + 1) * seq_len + 1].astype(np.int64))[None].to(model_device(model))
        logits = model(w[:, :-1]).logits
        losses.append(torch.nn.functional.cross_entropy(logits[0].float(), w[0, 1:]).item())
    return float(np.mean(losses))


def _named(identity: dict | None) -> str:
    """'a model for target_sha256 1a2b3c4d5e6f' (a run's identity in an error)."""
    if not identity:
        return "a model it does not name"
    return "a model for " + ", ".join(f"{k} {str(v)[:12]}" for k, v in identity.items())


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters live (batches are moved there)."""
    return next(model.parameters()).device


def lm_loss_fn(tokens: np.ndarray, batch_size: int, seq_len: int) -> Callable:
    """loss_fn for next-token training on random windows of a token stream."""
    def loss_fn(model, rng):
        w = random_windows(tokens, batch_size, seq_len, rng).to(model_device(model))
        logits = model(w[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), w[:, 1:].flatten())
    return loss_fn
