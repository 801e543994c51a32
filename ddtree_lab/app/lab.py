"""Small helpers every notebook uses: seeds, claim checks, stores, prompts (models come
from ``ddtree_lab.load_pair``, passed explicitly)."""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from dataclasses import fields

import numpy as np
import pandas as pd
import torch
from transformers.utils import logging as hf_logging

from ..common import RESULTS_DIR, stable_hash
from ..core.threads import set_threads
from ..experiments.plumbing.results import ResultsStore, cached_table_path, stamp, stamp_line, stamp_path
from .claims import Claim, check, compare  # noqa: F401  (lab.check / lab.compare: the notebooks' names)
from ..train.data import prompt_tokens  # noqa: F401  (notebooks call lab.prompt_tokens)


def seed_everything(seed: int = 0) -> None:
    """One call seeds python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0, cpu_threads: int | None = None) -> None:
    """Every notebook's first call: seeds, and torch's CPU threads: ``cpu_threads``, or (None)
    the lab's rule for decoding and timing, one thread (``core.threads``, the same rule as the
    CLI's and ``load_pair``'s)."""
    seed_everything(seed)
    set_threads(cpu_threads, "decode")
    hf_logging.set_verbosity_error()  # the kernel fallback notices: the README explains the kernels once
    hf_logging.disable_progress_bar()  # no 'Loading weights' bar in every model-loading cell


FINDING = "Finding: "   # the first line a reader sees under a notebook's first screen (issue 67)


def finding(*sentences: str) -> None:
    """Print the notebook's finding, answer first: 'Finding: ' and one sentence per target or
    lens, each rendered from the stored run and carrying its key number. A finding with no
    number in it is no finding: ValueError, naming the sentence."""
    for text in sentences:
        if not re.search(r"\d", text):
            raise ValueError(f"a finding states its key number; got {text!r}")
    print(FINDING + "\n  ".join(sentences))


def check_unless(skip: str | None, claim: Claim) -> None:
    """``check(claim)``, or, when ``skip`` gives a reason (e.g. a SMOKE run too small to
    decide it), print that the check was skipped, why, and what was measured."""
    if not skip:
        check(claim)
        return
    print(f"skipped:  {claim.claim}\n  why:      {skip}\n  got:      {claim.got}")


MISSING = "-"   # a value that does not apply: never NaN on the page


def table(frame, columns=None, rows: int = 15, store: str | None = None, digits: int = 3,
          missing: str | None = None) -> None:
    """Print at most ``rows`` rows of ``frame`` (``columns`` only), rounded; when rows are
    left out, say how many and where the rest is (``store``, e.g. 'data/results/sweeps.jsonl').
    A missing value prints as '-', explained once under the table (``missing``: why it does not
    apply, e.g. 'prompt lookup on the GDN hybrid is not timed')."""
    shown = frame if columns is None else frame[list(columns)]
    head = shown.head(rows)
    print(head.round(digits).to_string(index=False, na_rep=MISSING))
    if len(shown) > rows:
        where = f" (all of them: {store})" if store else ""
        print(f"... {len(shown) - rows} more rows{where}")
    if head.isna().to_numpy().any():
        print(f"{MISSING}: {missing or 'no value: it does not apply to this row'}")


def describe(config) -> None:
    """Print a frozen config dataclass one field a line ('budgets: 1, 2, 4'), not its repr."""
    print(type(config).__name__)
    for f in fields(config):
        value = getattr(config, f.name)
        shown = ", ".join(map(str, value)) if isinstance(value, (tuple, list)) else value
        print(f"  {f.name}: {shown}")


def side_by_side(frame, index: str, by: str, values: dict):
    """A wide, short table: one row per ``index`` value, one column per (``by`` value, value)
    named '<by value> <short name>'; values: {column: short name}; rows and columns in order
    of first appearance. E.g. budgets as rows, the GDN modes side by side."""
    wide = frame.pivot_table(index=index, columns=by, values=list(values), aggfunc="first", sort=False, dropna=False)
    wide.columns = [f"{group} {values[col]}" for col, group in wide.columns]
    return wide.reset_index()


def store(name: str, smoke: bool) -> ResultsStore:
    """The notebook's results store; SMOKE runs write to data/results/smoke/ (not committed).
    Rows of different models share a store: each row's key holds the pair's digests."""
    return ResultsStore(name, RESULTS_DIR / "smoke") if smoke else ResultsStore(name)


def measured_at(name: str, smoke: bool = False, run: str | None = None) -> None:
    """Print the stamp of a timing store's rows ('measured at 4163d1d on <machine>, <date>, load
    1.0-1.3, threads 1'; ``run``: only that interleaved run's rows): the context of every
    tokens/s the notebook shows from it, never part of its key."""
    rows = [r for r in store(name, smoke).current_rows() if run is None or r.get("run") == run]
    print(f"{name}: {stamp_line(rows)}")


def cached_table(name: str, config: dict, smoke: bool, compute):
    """A DataFrame computed once per (config, semantics version) and stored as CSV under the
    results folder; a rerun reads it back (the notebook then only redraws)."""
    folder = RESULTS_DIR / "smoke" if smoke else RESULTS_DIR
    path = cached_table_path(name, config, folder)
    _migrate_legacy(name, config, folder, path)
    if path.is_file():
        return pd.read_csv(path)
    frame = compute()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    frame.to_csv(tmp, index=False, compression="gzip")
    stamp_path(path).write_text(json.dumps(stamp()) + "\n")  # what it was computed on (never a key)
    tmp.replace(path)
    return frame


LEGACY_CODE_ENV = "DDTREE_MIGRATE_FROM_CODE"  # scripts/migrate_semantics.py: the one-off move of the tables


def _migrate_legacy(name: str, config: dict, folder, path) -> None:
    """The one-off migration (``scripts/migrate_semantics.py`` sets ``LEGACY_CODE_ENV`` to the
    code hash that keyed the tables before ``experiments.plumbing.meaning``): the table stored under
    that key moves, unchanged, to its new name. Nothing happens without the variable."""
    code = os.environ.get(LEGACY_CODE_ENV)
    legacy = Path(folder) / f"{name}-{stable_hash({'config': config, 'code': code}, 12)}.csv.gz"
    if code and not path.is_file() and legacy.is_file():
        legacy.replace(path)
        print(f"migrated {legacy.name} -> {path.name}")
