"""A resumable results store: one JSON line per finished (config, prompt) row.

Rows carry the config, the metrics, the digests of the target's and the drafter's weights
(``Pair.digests``), the git revision, the package versions and a code version (hash of the
modules that compute results). A re-run skips rows whose key (config + prompt + code
version + both digests) is already stored; an interrupted run loses no finished
row (each row is appended and fsynced on its own; a torn last line is ignored); a changed
config, code or model never reuses a stale row, because it changes the key. Rows written
before the key held the digests carry no ``models`` field: they are never reused or shown.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import torch
import transformers

from ...common import RESULTS_DIR, ROOT, stable_hash

CORE_DIR = ROOT / "ddtree_lab" / "core"
# the modules whose code decides a stored result, given the models' weights (which the key
# holds by digest, so the presets in models.py need not be hashed); a new module that
# computes stored results is added here
COMPUTE_MODULES = ("adapter.py", "allocate.py", "batched.py", "cache.py", "compiled.py", "conditional.py", "decode.py", "drafter.py",
                   "gdn_layer.py", "harness.py", "spec.py",
                   "gdn_tree.py", "sampling.py", "tree.py", "verify.py")


def code_version(modules: tuple = COMPUTE_MODULES) -> str:
    """sha256 (16 hex) of the modules that compute results (``modules``: file names in core/)."""
    return stable_hash(b"".join(name.encode() + b"\0" + (CORE_DIR / name).read_bytes() for name in modules))


def cached_table_path(name: str, config: dict, folder: Path = RESULTS_DIR) -> Path:
    """Where ``app.lab.cached_table`` keeps the table ``name`` of ``config`` at the current code
    version: ``folder/{name}-{key}.csv.gz`` (readers of a stored table find it here)."""
    return Path(folder) / f"{name}-{stable_hash({'config': config, 'code': code_version()}, 12)}.csv.gz"


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__}


def row_key(config: dict, prompt_id, code: str, models: dict, run: str = "") -> str:
    """The identity of a row: config, prompt, code version, ``models`` (``Pair.digests``) and
    ``run``, the name of the interleaved pass it belongs to (a curve that divides timings
    takes every point, AR included, from one run)."""
    return stable_hash({"config": config, "prompt": prompt_id, "code": code, "models": models, "run": run}, 24)


class ResultsStore:
    """data/results/<name>.jsonl; ``add`` appends one finished row atomically. ``modules``:
    the core modules whose code version keys the rows (a store of batched runs adds the
    batch modules)."""

    def __init__(self, name: str, directory: Path = RESULTS_DIR, modules: tuple = COMPUTE_MODULES):
        self.path = Path(directory) / f"{name}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.code = code_version(modules)
        self.pass_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"  # this process's pass
        self._meta = {"git": git_revision(), "versions": versions(), "pass": self.pass_id}

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

    def add(self, config: dict, prompt_id, metrics: dict, models: dict, run: str = "") -> None:
        """Append one finished row; ``models``: the pair's digests (``Pair.digests``); ``run``:
        the named interleaved run it belongs to (every row also records this process's pass)."""
        row = {"key": row_key(config, prompt_id, self.code, models, run), "config": config, "prompt": prompt_id,
               "metrics": metrics, "models": models, "run": run, **self._meta, "code": self.code,
               "load_avg_1min": os.getloadavg()[0]}  # what else ran beside a timing row
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

    def frame(self, models: dict | None = None, current_code_only: bool = True) -> pd.DataFrame:
        """One row per stored result: config columns, prompt, flattened scalar metrics.

        models: {arch: digests} keeps only the rows of those models (``Pair.digests`` per
        arch); None keeps every row that records its models.
        """
        recs = []
        for r in self.rows():
            if current_code_only and r["code"] != self.code or "models" not in r:
                continue
            if models is not None and models.get(r["config"].get("arch")) != r["models"]:
                continue
            scalars = {k: v for k, v in r["metrics"].items() if not isinstance(v, (list, dict))}
            recs.append({**r["config"], "prompt": r["prompt"], **scalars, "_metrics": r["metrics"],
                         "run": r.get("run", ""), "pass": r.get("pass", "")})
        return pd.DataFrame(recs)
