"""Small helpers every notebook uses: seeds, claim checks, stores, prompts."""
from __future__ import annotations

import random

import numpy as np
import torch

from .results import RESULTS_DIR, ResultsStore


def seed_everything(seed: int = 0) -> None:
    """One call seeds python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check(claim: str, expected, got, ok: bool) -> bool:
    """Print ``expected / got / match`` for a notebook claim and fail loudly if false."""
    print(f"{claim}\n  expected: {expected}\n  got:      {got}\n  match:    {bool(ok)}")
    if not ok:
        raise AssertionError(f"claim failed: {claim} (expected {expected}, got {got})")
    return True


def store(name: str, smoke: bool) -> ResultsStore:
    """The notebook's results store; SMOKE runs write to data/results/smoke/ (not committed)."""
    return ResultsStore(name, RESULTS_DIR / "smoke") if smoke else ResultsStore(name)


def prompt_tokens(tok, index: int) -> list[int]:
    """Token ids of HumanEval prompt ``index``."""
    from .data import humaneval_prompts
    return tok.encode(humaneval_prompts()[index]).ids
