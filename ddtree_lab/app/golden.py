"""The golden check: recompute a small fixed sample of every store's deterministic rows and
compare them with the stored rows.

Stores are keyed by meaning (``experiments.plumbing.meaning``), not by the bytes of the source, so a
change that moves a result without bumping ``SEMANTICS`` would leave stale rows on show. The
golden check is how the lab learns of it: per store, a fixed sample (``sample``: per target,
T = 0 / T > 0 and tree / chain, one row of the richest method, cheapest first) is recomputed with the
shipped models on one thread and its tokens, acceptance lengths, tree sizes, entropies and loop tags (or
the teacher-forced acceptances) compared with the stored ones: integers exactly, the mean
entropy to a relative 1e-6 (another machine's BLAS rounds differently; a token that moves is
never within any tolerance). Rows of a budget chosen by a timed cost model ("auto") are not
deterministic and never sampled.

    check(EXPERIMENTS) -> [StoreCheck]          (tests/test_golden.py, ``ddtree-lab status``)
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import torch

from transformers.utils import logging as hf_logging

from ..common import RESULTS_DIR
from ..experiments.plumbing.results import ResultsStore
from ..experiments.studies.concurrency import GRIDS, run_group
from ..experiments.studies.dflash2 import load_drafters, run_study_config
from ..experiments.studies.official import run_with_official
from ..experiments.studies.teacher_forced import tf_runner
from ..train.pair import load_pair
from .registry import EXPERIMENTS, owner_of

METHOD_ORDER = {"ddtree": 0, "dflash": 1, "official": 2, "ar": 3}
ENTROPY_RTOL = 1e-6


def _group(cfg, unit, pair):
    return run_group(cfg, unit, pair, GRIDS["full"])


@dataclass(frozen=True)
class Kind:
    """How a store's row is recomputed: ``load(arch)`` the models, shared by every kind with
    the same loader; ``part(models)`` the pair a row ran with (None: all of them; its
    ``.digests`` name it), ``runner(cfg, unit, pair) -> metrics``, ``fields`` compared (None: every list)."""
    load: object
    runner: object
    fields: tuple | None
    part: object = None

    def of(self, loaded):
        return loaded if self.part is None else self.part(loaded)


LOOP_FIELDS = ("round_looping", "round_copyable")  # the loop lens's round tags (``train.loops``): a lens change shows
GEN_FIELDS = ("tokens", "acceptance_lengths", "tree_sizes", "entropy") + LOOP_FIELDS
KINDS = {"generation": Kind(load_pair, run_with_official, GEN_FIELDS),
         "study": Kind(load_drafters, run_study_config, GEN_FIELDS),
         "group": Kind(load_pair, _group, ("tokens", "acceptance_lengths", "tree_sizes") + LOOP_FIELDS),
         "teacher_forced": Kind(load_pair, tf_runner, None),
         "teacher_forced_dflash2": Kind(load_drafters, tf_runner, None, part=lambda d: d.pairs["dflash2"])}


@dataclass
class StoreCheck:
    """One store's golden result: rows checked, and what moved ('row ...: field stored -> now')."""
    store: str
    checked: int = 0
    moved: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.moved


def _budget_rank(budget) -> float:
    return abs(math.log2(budget) - 4) if isinstance(budget, int) and budget > 0 else 0.0


def _cost(row: dict) -> tuple:
    c = row["config"]
    return (METHOD_ORDER.get(c.get("method"), 9), c.get("max_new_tokens", 0), c.get("concurrency", 1),
            _budget_rank(c.get("budget")), json.dumps(row["prompt"]), json.dumps(c, sort_keys=True))


def sample(rows: list[dict]) -> list[dict]:
    """The fixed golden sample of a store's rows: per arch, a tree row and a chain row at T = 0
    and a tree row at T > 0 (a chain row where the store holds no tree); within each, the
    richest method (DDTree; else DFlash, the reference loop, AR), fewest new tokens, smallest
    batch, budget nearest 16, smallest prompt. Rows of budget "auto" are left out (timed, not fixed)."""
    groups, has_tree = {}, any(r["config"].get("method") == "ddtree" for r in rows)
    for r in rows:
        c = r["config"]
        if c.get("budget") == "auto":
            continue
        sampled, tree = float(c.get("temperature", 0.0)) > 0, c.get("method") == "ddtree"
        if sampled and not tree and has_tree:
            continue  # at T > 0 the tree row alone (its walk samples as the chain's does)
        key = (c["arch"], sampled, tree)
        if key not in groups or _cost(r) < _cost(groups[key]):
            groups[key] = r
    return [groups[k] for k in sorted(groups)]


def compare(stored: dict, now: dict, fields: tuple | None) -> list[str]:
    """What moved between a stored row's metrics and a recomputed one's (empty: nothing)."""
    names = fields or sorted(k for k, v in stored.items() if isinstance(v, list))
    out = []
    for name in names:
        a, b = stored.get(name), now.get(name)
        same = (math.isclose(a, b, rel_tol=ENTROPY_RTOL, abs_tol=1e-12) if isinstance(a, float) and isinstance(b, float)
                else a == b)
        if not same:
            out.append(f"{name}: stored {_short(a)} -> now {_short(b)}")
    return out


def _short(value) -> str:
    text = json.dumps(value, default=float)
    return text if len(text) <= 60 else text[:57] + "..."


def check_store(name: str, kind: Kind, models: dict, directory=RESULTS_DIR) -> StoreCheck:
    """Recompute ``name``'s golden sample (the store under ``directory``); ``models``:
    {(loader, arch): loaded models}, filled on demand and shared across stores."""
    result = StoreCheck(name)
    rows = ResultsStore(name, directory).current_rows()
    for arch in sorted({r["config"]["arch"] for r in rows} - {a for k, a in models if k is kind.load}):
        models[kind.load, arch] = kind.load(arch)
    shipped = [r for r in rows if r["models"] == kind.of(models[(kind.load, r["config"]["arch"])]).digests]
    for row in sample(shipped):
        now = kind.runner(row["config"], row["prompt"], kind.of(models[(kind.load, row["config"]["arch"])]))
        result.checked += 1
        result.moved += [f"{row['config']} prompt {row['prompt']}: {m}" for m in compare(row["metrics"], now, kind.fields)]
    return result


def check(experiments=EXPERIMENTS, stores: tuple | None = None, progress=None) -> list[StoreCheck]:
    """Every golden store of ``experiments`` (``stores``: only these names), on one thread (the
    stores were computed so); ``progress(name)`` before each."""
    threads, models, out = torch.get_num_threads(), {}, []
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()  # no 'Loading weights' bar per model
    try:
        for e in experiments:
            for name, kind in e.golden:
                if stores is None or name in stores:
                    if progress:
                        progress(name)
                    out.append(check_store(name, KINDS[kind], models))
    finally:
        torch.set_num_threads(threads)
    return out


def report(results: list[StoreCheck]) -> str:
    """What a developer reads when the sample moved: the stores, what moved, what to do."""
    bad = [r for r in results if not r.ok]
    if not bad:
        return f"golden sample reproduces: {sum(r.checked for r in results)} rows of {len(results)} stores"
    names = sorted({owner_of(r.store).name for r in bad})
    lines = [f"the golden sample moved in {len(bad)} store(s): {', '.join(r.store for r in bad)}"]
    for r in bad:
        lines += [f"  {r.store}: {m}" for m in r.moved[:3]] + ([f"  {r.store}: ... {len(r.moved) - 3} more"]
                                                               if len(r.moved) > 3 else [])
    lines += ["a change moved stored results. If it should: bump SEMANTICS in ddtree_lab/experiments/plumbing/meaning.py with a dated "
              "line saying what it changed, then recompute these stores:",
              f"  ddtree-lab recompute {' '.join(names)}",
              "If it should not: the change is a bug (a fast path that changes one token is a bug)."]
    return "\n".join(lines)
