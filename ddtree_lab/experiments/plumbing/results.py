"""A resumable results store: one JSON line per finished (config, prompt) row.

A row is keyed by what it means: its config (the generation spec), its prompt, the digests of
the target's and the drafter's weights (``Pair.digests``) and the semantics version
(``meaning.SEMANTICS``), never by the bytes of the source: a comment or a
refactor in core/ reuses every row; a change that moves results bumps the version (the golden
check, ``app.golden``, catches one that did not). A re-run skips rows whose key is
already stored; an interrupted run loses no finished row (each row is appended and fsynced on
its own; a torn last line is ignored). Every row also carries a stamp that is never a key
(``stamp``: git revision, machine, load average, date, threads): what a timing was taken on.
Rows of another semantics version (or written before rows named their models) are never
reused or shown.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import torch
import transformers

from ...common import RESULTS_DIR, ROOT, stable_hash
from .meaning import SEMANTICS

STAMP_FIELDS = ("git", "machine", "date", "load_avg_1min", "threads")  # a timing's context: never a key


def cached_table_path(name: str, config: dict, folder: Path = RESULTS_DIR, semantics: int = SEMANTICS) -> Path:
    """Where ``app.lab.cached_table`` keeps the table ``name`` of ``config`` at the semantics
    version ``semantics``: ``folder/{name}-{key}.csv.gz`` (readers of a stored table find it here)."""
    return Path(folder) / f"{name}-{stable_hash({'config': config, 'semantics': semantics}, 12)}.csv.gz"


def stamp_path(table: Path) -> Path:
    """The stamp beside a cached table: ``name-key.csv.gz`` -> ``name-key.stamp.json``."""
    return Path(table).with_name(Path(table).name.split(".")[0] + ".stamp.json")


@functools.cache  # once per process: the revision of the code this process runs (not per stored row)
def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__}


@functools.cache  # once per process
def machine() -> str:
    """This machine in words: CPU model, cores, architecture (e.g. 'Intel Xeon ... x2, x86_64')."""
    model = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{model} x{os.cpu_count()}, {platform.machine()}"


def stamp() -> dict:
    """What a timing was taken on, now: git revision, machine, UTC date, 1-minute load
    average, torch threads (``STAMP_FIELDS``). Stored beside every row and timing table; never a key."""
    return {"git": git_revision(), "machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_avg_1min": os.getloadavg()[0], "threads": torch.get_num_threads()}


def stamp_line(stamps) -> str:
    """'measured at 4163d1d on <machine>, 2026-12-06, load 1.0-1.3, 1 thread': one line for the
    stamps of a table's rows (``stamps``: dicts or a DataFrame with ``STAMP_FIELDS`` columns)."""
    frame = pd.DataFrame(list(stamps) if not isinstance(stamps, pd.DataFrame) else stamps)
    if frame.empty or "git" not in frame:
        return "measured at: no stamp stored"
    def span(col, fmt=str):
        vals = sorted({fmt(v) for v in frame[col].dropna()}) if col in frame else []
        return ", ".join(vals) if len(vals) <= 3 else f"{vals[0]} ... {vals[-1]} ({len(vals)})"
    load = frame["load_avg_1min"].dropna() if "load_avg_1min" in frame else pd.Series(dtype=float)
    loads = f"load {load.min():.1f}-{load.max():.1f}" if len(load) else "load not stored"
    threads = span("threads", lambda t: str(int(t)))
    return (f"measured at {span('git')} on {span('machine')}, {span('date', lambda d: str(d)[:10])}, {loads}, "
            f"threads {threads or 'not stored'}")


def write_timing_table(frame: pd.DataFrame, path) -> Path:
    """Write a timing table as CSV with this moment's ``stamp`` in every row (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    frame.drop(columns=[c for c in STAMP_FIELDS if c in frame], errors="ignore").assign(**stamp()).to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def row_key(config: dict, prompt_id, models: dict, run: str = "", semantics: int = SEMANTICS) -> str:
    """The identity of a row: config, prompt, ``models`` (``Pair.digests``), ``run`` (the name
    of the interleaved pass it belongs to: a curve that divides timings takes every point, AR
    included, from one run) and the semantics version. No byte of the source."""
    return stable_hash({"config": config, "prompt": prompt_id, "semantics": semantics, "models": models, "run": run}, 24)


class ResultsStore:
    """data/results/<name>.jsonl; ``add`` appends one finished row atomically, keyed by
    meaning (``row_key``) at the semantics version ``semantics``."""

    def __init__(self, name: str, directory: Path = RESULTS_DIR, semantics: int = SEMANTICS):
        self.name = name
        self.path = Path(directory) / f"{name}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.semantics = semantics
        self.pass_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"  # this process's pass
        self._meta = {"versions": versions(), "pass": self.pass_id}

    def rows(self) -> list[dict]:
        """Every complete row (a torn last line from a crash is skipped)."""
        if not self.path.is_file():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    def done_keys(self) -> set[str]:
        return {r["key"] for r in self.rows()}

    def key(self, config: dict, prompt_id, models: dict, run: str = "") -> str:
        """``row_key`` at this store's semantics version."""
        return row_key(config, prompt_id, models, run, self.semantics)

    def current_rows(self) -> list[dict]:
        """The rows of this semantics version that name their models (what ``frame`` shows)."""
        return [r for r in self.rows() if r.get("semantics") == self.semantics and "models" in r]

    def add(self, config: dict, prompt_id, metrics: dict, models: dict, run: str = "") -> None:
        """Append one finished row; ``models``: the pair's digests (``Pair.digests``); ``run``:
        the named interleaved run it belongs to (every row also records this process's pass)."""
        row = {"key": self.key(config, prompt_id, models, run), "config": config, "prompt": prompt_id,
               "metrics": metrics, "models": models, "run": run, **self._meta, "semantics": self.semantics,
               **stamp()}  # what a timing row was taken on (never part of the key)
        line = json.dumps(row, default=float) + "\n"
        with open(self.path, "a") as f:
            if f.tell() and not self._ends_with_newline():
                f.write("\n")  # seal a torn line left by a crash
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def frame(self, models: dict | None = None) -> pd.DataFrame:
        """One row per stored result of this semantics version: config columns, prompt,
        flattened scalar metrics.

        models: {arch: digests} keeps only the rows of those models (``Pair.digests`` per
        arch); None keeps every row that records its models.
        """
        recs = []
        for r in self.current_rows():
            if models is not None and models.get(r["config"].get("arch")) != r["models"]:
                continue
            scalars = {k: v for k, v in r["metrics"].items() if not isinstance(v, (list, dict))}
            recs.append({**r["config"], "prompt": r["prompt"], **scalars, "_metrics": r["metrics"],
                         "run": r.get("run", ""), "pass": r.get("pass", "")})
        return pd.DataFrame(recs)
