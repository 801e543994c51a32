"""Small helpers every notebook uses: seeds, claim checks, stores, prompts."""
from __future__ import annotations

import random

import numpy as np
import torch

from ..common import RESULTS_DIR
from ..experiments.results import ResultsStore


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


def check(claim: str, expected, got, ok: bool) -> bool:
    """Print ``expected / got / match`` for a notebook claim and fail loudly if false."""
    print(f"{claim}\n  expected: {expected}\n  got:      {got}\n  match:    {bool(ok)}")
    if not ok:
        raise AssertionError(f"claim failed: {claim} (expected {expected}, got {got})")
    return True


def compare(claim: str, expected, got, reproduced: bool) -> bool:
    """Print a PUBLISHED claim next to what this lab measured, without failing: the lab's
    answer may be that it does not reproduce here (the notebook then says so)."""
    print(f"published: {claim}\n  expected:   {expected}\n  got:        {got}\n  reproduced: {bool(reproduced)}")
    return bool(reproduced)


def store(name: str, smoke: bool) -> ResultsStore:
    """The notebook's results store; SMOKE runs write to data/results/smoke/ (not committed);
    runs on other checkpoints than the shipped ones get their own store (name + tag)."""
    from ..experiments.sweep import pair_tag
    name = f"{name}-{pair_tag()}" if pair_tag() else name
    return ResultsStore(name, RESULTS_DIR / "smoke") if smoke else ResultsStore(name)


def load_pair(arch: str, checkpoints: dict | None = None):
    """(target, drafter, tokenizer): the shipped pair, or ``checkpoints[arch] = (target_dir,
    drafter_dir)`` (a real Qwen3.6 / Kimi-class checkpoint and a drafter trained for it).
    The pair is registered for sweeps, so every result in the notebook comes from it."""
    import hashlib
    from ..train import pair as pair_mod
    from ..experiments.sweep import use_pair
    dirs = (checkpoints or {}).get(arch)
    if dirs is None:
        loaded, tag = pair_mod.load_pair(arch), "shipped"
    else:
        loaded = pair_mod.load_pair(arch, target_path=dirs[0], drafter_path=dirs[1])
        tag = hashlib.sha256(repr(tuple(map(str, dirs))).encode()).hexdigest()[:8]
    use_pair(arch, loaded, tag)
    return loaded


def prompt_tokens(tok, index: int) -> list[int]:
    """Token ids of HumanEval prompt ``index``."""
    from ..train.data import humaneval_prompts
    return tok.encode(humaneval_prompts()[index]).ids


def cached_table(name: str, config: dict, smoke: bool, compute):
    """A DataFrame computed once per (config, code version) and stored as CSV under the
    results folder; a rerun reads it back (the notebook then only redraws)."""
    import hashlib
    import json

    import pandas as pd
    from ..experiments.results import code_version
    key = hashlib.sha256(json.dumps({"config": config, "code": code_version()}, sort_keys=True,
                                    default=str).encode()).hexdigest()[:12]
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
