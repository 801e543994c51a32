"""What one training step of the shipped drafter recipe costs on this CPU (issue 25: the recipe
states its memory and time per step).

Per shipped target: its drafter, loaded as ``train-drafter`` trains it (the target's frozen
embedding and LM head borrowed), one step of ``RECIPES["default"]`` exactly as the training
loop takes it (``drafter_loss`` with the target's soft labels over a batch of ``batch_size``
sequences x ``anchors`` blocks, backward, gradient clip, AdamW), on stand-in tensors of the
recipe's shapes (token ids, the target's features of its conditioning layers, top-K soft
labels): the arithmetic and the memory of a step do not depend on the values. One thread.

- step_s: median wall seconds of a step over REPEATS (after WARMUP);
- peak_mib: peak MiB of tensor storage alive during one step (``measure.LiveBytes``:
  activations, gradients, optimizer state), beside the drafter's parameter MiB;
- shipped_s_per_step: the shipped run's training seconds per step, evaluations included
  (its manifest).

Results -> data/results/recipe_cost.csv (docs/results.md, "Your own models, in detail").

    PYTHONPATH=. python scripts/recipe_cost.py
"""
from __future__ import annotations

import json

import pandas as pd
import torch

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.core.drafter import drafter_loss
from ddtree_lab.core.models import ARCHS, load_target
from ddtree_lab.experiments.plumbing.measure import LiveBytes, median_seconds
from ddtree_lab.train.checkpoints import ckpt_path
from ddtree_lab.train.drafters import RECIPES, load_drafter

OUT = RESULTS_DIR / "recipe_cost.csv"
WARMUP, REPEATS = 2, 10


def step_fn(drafter, recipe, gen: torch.Generator):
    """One training step of ``recipe`` (loss, backward, clip, AdamW) on stand-in tensors."""
    cfg, train = drafter.cfg, recipe.train
    B, T, K = train.batch_size, recipe.prompt_len + recipe.new_tokens, recipe.soft_top_k
    tokens = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)
    features = torch.randn(B, T, cfg.feature_size, generator=gen)
    anchors = torch.randint(1, T - cfg.block_size, (B, recipe.anchors), generator=gen)
    soft = (torch.randint(0, cfg.vocab_size, (B, T, K), generator=gen),
            torch.softmax(torch.randn(B, T, K, generator=gen), -1))
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay)

    def step():
        loss = drafter_loss(drafter, tokens, features, anchors, soft=soft)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, train.grad_clip)
        opt.step()
    return step, params


def measure(arch: str) -> dict:
    recipe = RECIPES["default"]
    target = load_target(ckpt_path(arch, "target"))
    drafter = load_drafter(ckpt_path(arch, "drafter"), target).train()
    step, params = step_fn(drafter, recipe, torch.Generator().manual_seed(0))
    seconds = median_seconds(step, REPEATS, warmup=WARMUP)  # the optimizer state exists after the warm-up
    with LiveBytes() as live:
        step()
    manifest = json.loads((ckpt_path(arch, "drafter") / "manifest.json").read_text())
    return {"arch": arch, "batch": recipe.train.batch_size, "anchors": recipe.anchors,
            "block": drafter.cfg.block_size, "seq_len": recipe.prompt_len + recipe.new_tokens,
            "soft_top_k": recipe.soft_top_k, "step_s": seconds, "peak_mib": live.peak / 2 ** 20,
            "params_mib": sum(p.numel() * p.element_size() for p in params) / 2 ** 20,
            "shipped_s_per_step": manifest["train_time_s"] / manifest["train_state"]["step"], "threads": 1,
            "repeats": REPEATS}


def run() -> None:
    torch.set_num_threads(1)
    table = pd.DataFrame([measure(arch) for arch in ARCHS])
    print(table.round(3).to_string(index=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_timing_table(table, OUT)
    print(f"saved {OUT}")


def main() -> None:
    run()


if __name__ == "__main__":
    main()
