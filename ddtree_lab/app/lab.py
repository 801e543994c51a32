"""Small helpers every notebook uses: seeds, claim checks, stores, prompts (models come
from ``ddtree_lab.load_pair``, passed explicitly)."""
from __future__ import annotations

import random

import numpy as np
import torch

from ..common import RESULTS_DIR, stable_hash
from ..experiments.results import ResultsStore
from ..train.data import prompt_tokens  # noqa: F401  (notebooks call lab.prompt_tokens)


def seed_everything(seed: int = 0) -> None:
    """One call seeds python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0, cpu_threads: int | None = 1) -> None:
    """Every notebook's first call: seeds, and CPU threads (1 by default: the tiny models run
    fastest on one thread, and a busy second core then never stalls them)."""
    seed_everything(seed)
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # the kernel fallback notices: the README explains the kernels once
    hf_logging.disable_progress_bar()  # no 'Loading weights' bar in every model-loading cell


def check(claim: str, expected, got, ok: bool) -> None:
    """Print ``expected / got / match`` for a notebook claim and fail loudly if false."""
    print(f"{claim}\n  expected: {expected}\n  got:      {got}\n  match:    {bool(ok)}")
    if not ok:
        raise AssertionError(f"claim failed: {claim} (expected {expected}, got {got})")


def compare(claim: str, expected, got, reproduced: bool) -> bool:
    """Print a PUBLISHED claim next to what this lab measured, without failing: the lab's
    answer may be that it does not reproduce here (the notebook then says so)."""
    print(f"published: {claim}\n  expected:   {expected}\n  got:        {got}\n  reproduced: {bool(reproduced)}")
    return bool(reproduced)


def store(name: str, smoke: bool) -> ResultsStore:
    """The notebook's results store; SMOKE runs write to data/results/smoke/ (not committed).
    Rows of different models share a store: each row's key holds the pair's digests."""
    return ResultsStore(name, RESULTS_DIR / "smoke") if smoke else ResultsStore(name)


def cached_table(name: str, config: dict, smoke: bool, compute):
    """A DataFrame computed once per (config, code version) and stored as CSV under the
    results folder; a rerun reads it back (the notebook then only redraws)."""
    import pandas as pd
    from ..experiments.results import code_version
    key = stable_hash({"config": config, "code": code_version()}, 12)
    folder = RESULTS_DIR / "smoke" if smoke else RESULTS_DIR
    path = folder / f"{name}-{key}.csv.gz"
    if path.is_file():
        return pd.read_csv(path)
    frame = compute()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    frame.to_csv(tmp, index=False, compression="gzip")
    tmp.replace(path)
    return frame
