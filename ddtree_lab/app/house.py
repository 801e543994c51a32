"""The house's commands over the registry (``app.registry``): run, show, recompute and status
of an experiment's stores (``COMMANDS``: what their subcommands run; the parsers are in ``app/cli.py``):

    ddtree-lab run NAME            run an experiment (resumable)
    ddtree-lab show [NAME]         its table and the stamp of its timings (no NAME: the list)
    ddtree-lab recompute NAME... | --all      replace the named stores, nothing else
    ddtree-lab status [--no-golden]           every store: rows, revisions, golden sample

A recompute moves the experiment's files aside into ``data/results/recompute-backup/NAME/``
before it runs its steps, and deletes them only when every step succeeded: an
interrupted recompute keeps both the old files and the rows it finished, and a rerun resumes it
(the backup is made once).
"""
from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import pandas as pd

from ..common import RESULTS_DIR
from ..core.threads import set_threads
from ..experiments.plumbing.results import STAMP_FIELDS, ResultsStore, stamp_line, stamp_path
from ..experiments.plumbing.summary import summarize
from ..experiments.plumbing.sweep import AXES, PLUGIN_AXES
from ..experiments.studies.concurrency import concurrency_table, summarize_concurrency
from ..experiments.studies.teacher_forced import tf_summary
from . import golden
from .registry import EXPERIMENTS, Experiment, Step
from ..experiments.studies.expert_auto import table as auto_table

BACKUP_DIR = RESULTS_DIR / "recompute-backup"


def files_of(e: Experiment, directory: Path = RESULTS_DIR) -> list[Path]:
    """The files ``e`` owns that exist now (stores and tables; patterns expanded)."""
    names = [f"{s}.jsonl" for s in e.stores] + list(e.tables)
    names += [t.replace(".csv.gz", ".stamp.json") for t in e.tables if t.endswith(".csv.gz")]  # their stamps
    return sorted(p for p in Path(directory).iterdir() if p.is_file() and any(fnmatch.fnmatch(p.name, n) for n in names))


def run(e: Experiment, runner=None) -> None:
    """Run ``e``'s steps in order, in this process, on one thread (stored rows are skipped:
    each store resumes); the first step that fails raises. ``runner(step)``: how a step is
    called (default: ``step()``; a test passes its own)."""
    set_threads(1, "decode")
    for step in e.run:
        print(f"{e.name}: {step}", flush=True)
        (runner or Step.__call__)(step)


def recompute(e: Experiment, directory: Path = RESULTS_DIR, runner=None) -> Path:
    """Replace ``e``'s stored files by a fresh run: the old ones wait in the backup folder
    until every step succeeded (a rerun after an interruption resumes). -> the backup folder."""
    backup = Path(directory) / BACKUP_DIR.name / e.name
    if not backup.is_dir():
        backup.mkdir(parents=True)
        for path in files_of(e, directory):
            path.replace(backup / path.name)
    run(e, runner)
    shutil.rmtree(backup)
    return backup


def _stamps(e: Experiment, directory: Path) -> pd.DataFrame:
    """Every stored row's stamp of ``e`` (stores' rows and CSV tables' rows)."""
    frames = [pd.DataFrame([{k: r.get(k) for k in STAMP_FIELDS} for r in ResultsStore(s, directory).current_rows()])
              for s in e.stores]
    for path in files_of(e, directory):
        if path.suffix == ".csv":
            table = pd.read_csv(path)
            frames.append(table[[c for c in STAMP_FIELDS if c in table]])
        elif path.name.endswith(".csv.gz") and stamp_path(path).is_file():
            frames.append(pd.DataFrame([json.loads(stamp_path(path).read_text())]))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def status_rows(golden_results: list | None = None, directory: Path = RESULTS_DIR) -> pd.DataFrame:
    """One row per experiment: its files, rows, the revisions it was measured at, and its golden
    sample ("reproduces" / "MOVED" / "not sampled" / "not checked" when ``golden_results`` is None)."""
    by_store = {r.store: r for r in golden_results or []}
    out = []
    for e in EXPERIMENTS:
        rows = sum(len(ResultsStore(s, directory).current_rows()) for s in e.stores)
        rows += sum(len(pd.read_csv(p, low_memory=False)) for p in files_of(e, directory) if p.name.endswith((".csv", ".csv.gz")))
        stamps = _stamps(e, directory)
        golden = [by_store[s] for s, _ in e.golden if s in by_store]
        verdict = ("not sampled" if not e.golden else "not checked" if golden_results is None
                   else "MOVED" if any(not g.ok for g in golden) else f"reproduces ({sum(g.checked for g in golden)} rows)")
        out.append({"experiment": e.name, "files": len(files_of(e, directory)), "rows": rows,
                    "measured at": ", ".join(sorted(set(stamps.git.dropna().astype(str)))) if "git" in stamps else "-",
                    "golden": verdict})
    return pd.DataFrame(out)


def show(e: Experiment, directory: Path = RESULTS_DIR) -> str:
    """``e``'s table as text, with the stamp of its rows ('measured at ...')."""
    parts = [f"{e.name}: {e.what}"]
    for s in e.stores:
        frame = ResultsStore(s, directory).frame()
        parts.append(f"\n{s} ({len(frame)} rows):\n" + (_table(s, e.show, frame) if len(frame) else "no rows yet: "
                                                          f"ddtree-lab run {e.name}"))
    for path in files_of(e, directory):
        if path.suffix == ".jsonl":
            continue  # a store: tabled above
        if path.suffix == ".csv":
            table = pd.read_csv(path).drop(columns=list(STAMP_FIELDS), errors="ignore")
            parts.append(f"\n{path.name} ({len(table)} rows):\n" + table.head(15).round(3).to_string(index=False))
        elif path.suffix == ".json":
            parts.append(f"\n{path.name}: " + json.dumps(json.loads(path.read_text()), default=str)[:600])
        else:
            parts.append(f"\n{path.name}: a cached table ({len(pd.read_csv(path, low_memory=False))} rows; its notebook draws it)")
    stamps = _stamps(e, directory)
    parts.append("\n" + stamp_line(stamps) if len(stamps) else "\nno stamped rows")
    return "\n".join(parts)


def _table(store: str, how: str, frame: pd.DataFrame) -> str:
    if how == "cases":
        return f"{len(frame)} stored cases (per-case routing: the experiment's CSV tables summarise them)"
    if how == "expert_auto":
        return auto_table(frame).round(3).to_string(index=False)
    if how == "teacher_forced":
        table = tf_summary(frame)
    elif how == "concurrency":
        table = concurrency_table(summarize_concurrency(frame))
    else:
        table = summarize(frame, AXES + tuple(a for a in PLUGIN_AXES if a in frame))  # one row per tree rule too
    cols = [c for c in ("arch", "method", "gdn_mode", "budget", "block_size", "temperature", "concurrency", "tree",
                        "drafter", "tau", "tokens_per_s", "speedup", "matches_ar", "positions") if c in table]
    text = table[cols].round(3).to_string(index=False)
    lines = text.splitlines()
    return "\n".join(lines[:31]) + (f"\n... {len(lines) - 31} more rows (ddtree-lab show prints 30)" if len(lines) > 31 else "")


# ----------------------------------------------------------------------------- the commands (parsed in app/cli.py)

def _cmd_run(args):
    run(args.name)
    print(f"{args.name.name}: stored under data/results/ ({', '.join(p.name for p in files_of(args.name))})")


def _cmd_show(args):
    if args.name is None:
        for e in EXPERIMENTS:
            print(f"{e.name:16s} {e.what}")
        return
    print(show(args.name))


def _cmd_recompute(args):
    chosen = list(EXPERIMENTS) if args.all else args.names
    if not chosen:
        raise SystemExit("recompute: name the experiments to recompute (ddtree-lab show lists them), or --all")
    for e in chosen:
        recompute(e)
        print(f"{e.name}: recomputed ({', '.join(p.name for p in files_of(e))})")
    print("then: ddtree-lab readme (the README's and docs/results.md's tables from the new stores)")


def _cmd_status(args):
    results = None if args.no_golden else golden.check(progress=lambda n: print(f"golden: {n} ...", flush=True))
    print(status_rows(results).to_string(index=False))
    if results is not None:
        print(golden.report(results))
        if not all(r.ok for r in results):
            raise SystemExit(1)


COMMANDS = {"run": _cmd_run, "show": _cmd_show, "recompute": _cmd_recompute, "status": _cmd_status}
