"""One-off migration (issue 57): move every store from the key of code a4e81e3463096ec6 (a hash
of core's source) to the key of meaning (``experiments.plumbing.meaning``, version 1). Nothing is
recomputed; the golden check (``tests/test_golden.py``) proves the move.

- JSON-lines stores: each row's key is recomputed with ``results.row_key`` (config, prompt,
  models, run, semantics 1); "code" gives way to "semantics"; the stamp gains what the old rows
  knew: their date (from the pass id), threads 1 (scripts/recompute.sh ran every step with
  ``--threads 1`` and OMP_NUM_THREADS=1) and machine "a machine not recorded (stored before stamps)". A row of any
  other code is refused (every row of the committed stores is of the one code).
- Timing CSV tables (and loop_compile.csv's "code" column): the same stamp columns; the
  revision and date are those of the recompute that wrote them (the commit that last touched
  the file, its "on <rev>" where its message names the code it ran on).
- Cached tables (``{name}-{hash}.csv.gz``): the notebooks that read them run once on the
  stores with ``DDTREE_MIGRATE_FROM_CODE`` set (``app.lab._migrate_legacy``): each table moves to
  its new name unchanged.

    python scripts/migrate_semantics.py          # idempotent: a moved row or table is left alone
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.common import RESULTS_DIR  # noqa: E402
from ddtree_lab.experiments.plumbing.results import STAMP_FIELDS, row_key  # noqa: E402

OLD_CODE, SEMANTICS = "a4e81e3463096ec6", 1
BEFORE = "a machine not recorded (stored before stamps)"
TABLE_NOTEBOOKS = ("02", "03", "04", "06", "08")  # the notebooks that read cached tables
TIMING_CSVS = ("bench.csv", "bench_batch.csv", "bench_compile.csv", "bench_tree.csv", "bench_verify.csv",
               "exactness.csv", "loop_compile.csv", "recipe_cost.csv", "verify_floor.csv")


def moved_row(row: dict) -> dict:
    """``row`` keyed by meaning (a row already moved is returned as it is)."""
    if "semantics" in row:
        return row
    if row.get("code") != OLD_CODE:
        raise ValueError(f"row {row.get('key')} is of code {row.get('code')!r}, not {OLD_CODE}: not migrated")
    p = row["pass"]
    date = f"{p[:4]}-{p[4:6]}-{p[6:8]}T{p[9:11]}:{p[11:13]}:{p[13:15]}Z"
    out = {k: v for k, v in row.items() if k != "code"}
    out.update(key=row_key(row["config"], row["prompt"], row["models"], row.get("run", ""), SEMANTICS),
               semantics=SEMANTICS, machine=BEFORE, date=date, threads=1)
    return out


def migrate_store(path: Path) -> int:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    moved = [moved_row(r) for r in rows]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=float) + "\n" for r in moved))
    tmp.replace(path)
    return len(moved)


def written_at(path: Path) -> tuple[str, str]:
    """(revision, date) of the run that wrote ``path``: the last commit that touched it (a cached
    table: any table of its name), or the revision its message says it ran on ('... on 4163d1d')."""
    named = str(path) if not path.name.endswith(".csv.gz") else str(path.parent / (path.name.split("-")[0] + "-*.csv.gz"))
    out = subprocess.run(["git", "log", "-1", "--format=%h|%aI|%s", "--", named], cwd=ROOT,  # a moved table: its name
                         capture_output=True, text=True, check=True).stdout.strip()
    rev, date, subject = out.split("|", 2)
    named = re.search(r"\bon ([0-9a-f]{7,})\)", subject)
    return (named.group(1) if named else rev), date


def migrate_csv(path: Path) -> None:
    frame = pd.read_csv(path)
    if "machine" in frame:
        return
    rev, date = written_at(path)
    fill = {"git": rev, "machine": BEFORE, "date": date, "load_avg_1min": float("nan"), "threads": 1}
    for col in STAMP_FIELDS:
        if col not in frame:
            frame[col] = fill[col]
    if "code" in frame:
        frame = frame.drop(columns="code").assign(semantics=SEMANTICS)
    frame.to_csv(path, index=False)


def stamp_tables() -> None:
    """A stamp beside every cached table that has none: the recompute that wrote it."""
    from ddtree_lab.experiments.plumbing.results import stamp_path
    for path in sorted(RESULTS_DIR.glob("*.csv.gz")):
        if not stamp_path(path).is_file():
            rev, date = written_at(path)
            stamp_path(path).write_text(json.dumps({"git": rev, "machine": BEFORE, "date": date,
                                                    "load_avg_1min": None, "threads": 1}) + "\n")


def migrate_tables() -> None:
    from ddtree_lab.app.notebooks import notebook_paths, run_notebook
    os.environ["DDTREE_MIGRATE_FROM_CODE"] = OLD_CODE
    for nb in notebook_paths():
        if nb.name[:2] in TABLE_NOTEBOOKS:
            print(f"running {nb.name} to move its tables", flush=True)
            run_notebook(nb)


def main() -> None:
    for path in sorted(RESULTS_DIR.glob("*.jsonl")):
        print(f"{path.name}: {migrate_store(path)} rows keyed by meaning")
    for name in TIMING_CSVS:
        migrate_csv(RESULTS_DIR / name)
        print(f"{name}: stamped")
    migrate_tables()
    stamp_tables()
    left = [p.name for p in RESULTS_DIR.glob("*.csv.gz")]
    print(f"cached tables now: {left}")


if __name__ == "__main__":
    main()
