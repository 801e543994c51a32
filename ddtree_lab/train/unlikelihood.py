"""Unlikelihood fine-tuning of a trained target, so that it writes code instead of loops (issue 70).

Welleck et al., "Neural Text Generation with Unlikelihood Training" (arXiv 1908.04319):
section 5.2's sequence-level objective, on the model's own greedy continuations. Each step:

- MLE: next-token loss on ``mle_windows`` random windows of ``mle_len`` tokens of the corpus
  the target trained on (``corpus.build_corpus``'s train split), so the model keeps its text;
- unlikelihood: ``prefixes`` random corpus prefixes of ``prefix_len`` tokens, continued
  greedily for ``new_tokens`` tokens by the model itself (no gradient); every continuation
  token a candidate rule marks (``CANDIDATES``) contributes -log(1 - p(token | before)), the
  paper's L_ULS with C_t = {x_t}; the sum is divided by the number of continuation tokens.

loss = MLE + alpha * UL. AdamW and clipping by ``loop.train`` (the lab's resumable loop: a
checkpoint of model and optimizer every ``ckpt_every_s`` seconds under ``runs_dir``, a tqdm
bar, ``log.csv``); this module adds ``steps.csv``, one row per step (MLE, UL, candidate share,
share of continuations that end in a loop).

Candidate rules (``CandidateRule``: (prefix ids, continuation ids) -> [bool] per continuation
token):

- "ngram": the token completes an ``NGRAM``-gram already seen earlier in prefix +
  continuation (the paper's repeated-n-gram rule, n = 4);
- "lens": the continuation up to and including the token ends in a loop by the lab's loop
  lens (``experiments.train.loops.round_loop_flags``; precision 0.90, recall 0.93 on
  hand-labelled rounds). Code repeats legitimately (identifiers, ``self.``, indentation), so
  the lens marks fewer tokens than the n-gram rule.
"""
from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import data
from .checkpoints import ckpt_path, sha256_file
from .corpus import build_corpus
from .loop import CsvLog, TrainConfig, lm_eval_loss, model_device, random_windows, train
from .rollouts import continue_prompts
from ..core.models import load_target
from .loops import is_looping, round_loop_flags

NGRAM = 4
CandidateRule = Callable[[Sequence[int], Sequence[int]], list]


def ngram_candidates(prefix: Sequence[int], cont: Sequence[int], n: int = NGRAM) -> list[bool]:
    """[len(cont)] True where the continuation token completes an ``n``-gram that already ended
    earlier in prefix + continuation (Welleck et al. section 5.2, repeated n-grams)."""
    seq = list(prefix) + list(cont)
    seen, out = set(), []
    for i in range(len(seq)):
        gram = tuple(seq[i - n + 1:i + 1]) if i >= n - 1 else None
        if i >= len(prefix):
            out.append(gram is not None and gram in seen)
        if gram is not None:
            seen.add(gram)
    return out


def lens_candidates(prefix: Sequence[int], cont: Sequence[int]) -> list[bool]:
    """[len(cont)] True where ``cont[:t + 1]`` ends in a loop by the lab's loop lens (the
    output alone, as the lens reads it: the prefix is given text)."""
    return round_loop_flags(list(prefix), list(cont), [1] * len(cont), committed=1)


CANDIDATES: dict[str, CandidateRule] = {"ngram": ngram_candidates, "lens": lens_candidates}


@dataclass(frozen=True)
class UnlikelihoodConfig:
    """One fine-tune: the objective's weight and shape, the optimiser's steps and rate.

    alpha: weight of the unlikelihood term (>= 0; 0 is plain MLE fine-tuning).
    candidates: the rule that marks continuation tokens (``CANDIDATES``).
    """
    alpha: float = 0.5
    steps: int = 250
    lr: float = 1e-4
    candidates: str = "ngram"
    mle_windows: int = 8
    mle_len: int = 192
    prefixes: int = 4
    prefix_len: int = 32
    new_tokens: int = 64
    warmup_steps: int = 10
    eval_every: int = 50
    ckpt_every_s: float = 120.0
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha >= 0:
            raise ValueError(f"alpha must be a number >= 0, got {self.alpha!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        if self.candidates not in CANDIDATES:
            raise ValueError(f"candidates must be one of {sorted(CANDIDATES)}, got {self.candidates!r}")
        for name in ("steps", "mle_windows", "mle_len", "prefixes", "prefix_len", "new_tokens", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")

    def train_config(self) -> TrainConfig:
        """The lab loop's config: ``steps`` steps of ``mle_windows`` x ``mle_len`` tokens, warmup
        then a constant rate (min_lr_frac 1), clip 1.0."""
        return TrainConfig(max_tokens=self.steps * self.mle_windows * self.mle_len, batch_size=self.mle_windows,
                           seq_len=self.mle_len, lr=float(self.lr), min_lr_frac=1.0,
                           warmup_steps=max(1, self.warmup_steps), grad_clip=1.0, eval_every=self.eval_every,
                           ckpt_every_s=self.ckpt_every_s, seed=self.seed)


def unlikelihood_loss(logits: torch.Tensor, tokens: torch.Tensor, marks: torch.Tensor) -> torch.Tensor:
    """Sequence-level unlikelihood: logits [B, T, V] predicting tokens [B, T] (the continuation),
    marks [B, T] bool (candidates) -> scalar: sum over marked tokens of -log(1 - p(token)),
    divided by B * T (0 where nothing is marked)."""
    p = torch.softmax(logits.float(), -1).gather(-1, tokens[..., None])[..., 0]  # [B, T]
    per_token = -torch.log(torch.clamp(1 - p, min=1e-5))
    return (per_token * marks.float()).sum() / tokens.numel()


class _StepLog(CsvLog):
    """steps.csv: one row per step (``loop.CsvLog``), numbered on from the resumed step."""

    FIELDS = ["step", "mle", "ul", "candidate_share", "looping_share"]

    def __init__(self, path: Path, resume_step: int):
        super().__init__(path, resume_step)
        self.step = resume_step

    def add(self, **row) -> None:
        self.step += 1
        super().add(step=self.step, **row)


def greedy_continuations(model, prefixes: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """[B, P + new_tokens]: the model's greedy continuations of prefixes [B, P], in eval mode
    and without gradient (the training mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        return continue_prompts(model, prefixes, new_tokens)
    finally:
        model.train(was_training)


def mark(rule: CandidateRule, seqs: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """[B, T] candidate marks of the continuations seqs[:, prefix_len:] by ``rule``."""
    rows = [rule(s[:prefix_len], s[prefix_len:]) for s in seqs.tolist()]
    return torch.tensor(rows, dtype=torch.bool)


def ul_loss_fn(corpus: np.ndarray, cfg: UnlikelihoodConfig, log: _StepLog | None = None) -> Callable:
    """loss_fn(model, rng) for ``loop.train``: MLE on corpus windows + alpha * unlikelihood on
    the model's greedy continuations of corpus prefixes (module docstring); each step's parts
    go to ``log``."""
    rule = CANDIDATES[cfg.candidates]

    def loss_fn(model, rng):
        dev = model_device(model)
        w = random_windows(corpus, cfg.mle_windows, cfg.mle_len, rng).to(dev)
        mle = torch.nn.functional.cross_entropy(model(w[:, :-1]).logits.flatten(0, 1).float(), w[:, 1:].flatten())
        prefixes = random_windows(corpus, cfg.prefixes, cfg.prefix_len - 1, rng).to(dev)  # [B, prefix_len]
        seqs = greedy_continuations(model, prefixes, cfg.new_tokens)
        marks = mark(rule, seqs.cpu(), cfg.prefix_len).to(dev)
        logits = model(seqs[:, :-1]).logits[:, cfg.prefix_len - 1:]  # predicts seqs[:, prefix_len:]
        ul = unlikelihood_loss(logits, seqs[:, cfg.prefix_len:], marks)
        if log is not None:
            log.add(mle=round(mle.item(), 4), ul=round(ul.item(), 4),
                    candidate_share=round(marks.float().mean().item(), 4),
                    looping_share=round(_looping_share(seqs.cpu(), cfg.prefix_len), 4))
        return mle + cfg.alpha * ul
    return loss_fn


def _looping_share(seqs: torch.Tensor, prefix_len: int) -> float:
    """Share of the continuations seqs[:, prefix_len:] that end in a loop (the lab's lens)."""
    return float(np.mean([is_looping(s[prefix_len:]) for s in seqs.tolist()]))


def finetune(model, corpus: dict, cfg: UnlikelihoodConfig, runs_dir: Path, *, start: str = "",
             desc: str = "unlikelihood") -> dict:
    """Fine-tune ``model`` in place (or resume the run in ``runs_dir``) -> the loop's final state.

    corpus: {'train', 'val'} token streams; start: what the model was loaded from (a checkpoint
    digest), part of the run's identity with ``cfg``, so a run of another start or config is
    refused, never resumed."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    state = runs_dir / "train_state.pt"
    done = int(torch.load(state, weights_only=False)["state"]["step"]) if state.is_file() else 0
    log = _StepLog(runs_dir / "steps.csv", done)
    identity = {"start": start, **{k: v for k, v in asdict(cfg).items() if k != "ckpt_every_s"}}
    val = corpus["val"]
    return train(model, ul_loss_fn(corpus["train"], cfg, log),
                 lambda m: lm_eval_loss(m, val, cfg.mle_len, max_windows=16), cfg.train_config(), runs_dir,
                 desc=desc, identity=identity)


def checkpoint_digest(directory: Path) -> str:
    """sha256 of a checkpoint's weights file(s): what a fine-tune started from."""
    files = sorted(Path(directory).glob("*.safetensors"))
    return ",".join(sha256_file(p)[:16] for p in files)


def finetune_target(arch: str, cfg: UnlikelihoodConfig, runs_dir: Path, *, start: Path | None = None) -> tuple:
    """Load the shipped target of ``arch`` (or ``start``), fine-tune it on the lab's corpus ->
    (model, final state). The corpus's vocabulary is folded into the model's as in training."""
    start = Path(start or ckpt_path(arch, "target"))
    model = load_target(start)
    corpus = build_corpus(tok=data.load_tokenizer())
    vocab = model.config.vocab_size
    corpus = {k: (v % vocab if k != "manifest" else v) for k, v in corpus.items()}
    st = finetune(model, corpus, cfg, runs_dir, start=checkpoint_digest(start), desc=f"unlikelihood {arch}")
    return model, st
