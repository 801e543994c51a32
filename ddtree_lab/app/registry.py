"""One way to run an experiment: a registry of every experiment the lab stores.

Each ``Experiment`` has a name, a line saying what it is (``experiment`` reads it from
templates/registry/experiments.toml, where a writer edits it), the files it owns under
data/results/ (JSON-lines stores, CSV tables, cached tables ``name-*.csv.gz``), the steps that
(re)compute them (in-process calls of the lab's functions, one thread, timings alone), how its
golden sample is recomputed (``app.golden``) and how it is tabled (``show``). The CLI reads it:

    ddtree-lab run NAME          run (resumable: stored rows are skipped)
    ddtree-lab show NAME         its table and the stamp of its timings
    ddtree-lab recompute NAME... | --all      replace its stores (the old ones kept until it ends)
    ddtree-lab status            every store: rows, revisions, whether its golden sample reproduces

A step is a function of the package named by its import path (imported when it runs, so the
registry loads at once) with keyword arguments: a study's function, a bench's ``run``, the
notebooks' runner, or ``cli.command`` (a CLI subcommand's own handler with its defaults, so
``ddtree-lab bench`` and ``ddtree-lab run bench`` are one code path). Nothing starts a
subprocess, except the notebooks' kernels. The scripts under scripts/ are command lines of
these functions; those that are not experiments, and why, are in ``NOT_EXPERIMENTS``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..common import RESULTS_DIR, ROOT
from .templating import texts

CHECKPOINTS, RESULTS = (ROOT / "data" / "checkpoints").as_posix(), RESULTS_DIR.as_posix()


@dataclass(frozen=True)
class Step:
    """One in-process call: ``function`` ("package.module:name") with ``kwargs``."""
    function: str
    kwargs: dict = field(default_factory=dict)

    def __call__(self):
        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)(**self.kwargs)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.function}({args})"


def command(name: str, **options) -> Step:
    """The CLI subcommand ``name`` with its defaults, ``options`` changed (``cli.command``)."""
    return Step("ddtree_lab.app.cli:command", {"name": name, **options})


def notebooks(*numbers: str) -> Step:
    """The numbered notebooks, one at a time (their stores resume, their figures redraw)."""
    return Step("ddtree_lab.app.notebooks:run_all", {"only": numbers, "jobs": 1})


def study(name: str, function: str = "study", **kwargs) -> Step:
    """A study module's function (``experiments/studies/NAME.py``)."""
    return Step(f"ddtree_lab.experiments.studies.{name}:{function}", kwargs)


def bench(name: str, **kwargs) -> Step:
    """A bench's ``run`` (``experiments/benches/NAME.py``; its command line: scripts/NAME.py)."""
    return Step(f"ddtree_lab.experiments.benches.{name}:run", kwargs)


@dataclass(frozen=True)
class Experiment:
    """name; what (one line); stores: ResultsStore names (data/results/NAME.jsonl); tables: other
    files under data/results/ (``name-*.csv.gz``: a cached table of any config); run: ``Step``s;
    golden: {store: golden kind} (``golden.KINDS``) of the stores whose sample the fast lane
    recomputes; show: how ``ddtree-lab show`` tables it (``show.SHOW``)."""
    name: str
    what: str
    stores: tuple = ()
    tables: tuple = ()
    run: tuple = ()
    golden: tuple = ()   # ((store, kind), ...)
    show: str = "csv"


def experiment(name: str, *fields, **kwargs) -> Experiment:
    """The ``Experiment`` ``name``, its line ``what`` from templates/registry/experiments.toml
    (``[what]``, by name), its other fields as ``Experiment``'s after ``what``."""
    return Experiment(name, texts("registry/experiments")["what"][name], *fields, **kwargs)


EXPERIMENTS = (
    experiment("quality", ("quality",), ("quality-gdn-mla.json",), (command("quality"),),
               (("quality", "generation"),), "summary"),
    experiment("dflash2", ("dflash2", "teacher_forced_dflash2"), (), (command("dflash2"),),
               (("dflash2", "study"), ("teacher_forced_dflash2", "teacher_forced_dflash2")), "summary"),
    experiment("exactness", (), ("exactness.csv",), (bench("exactness"),)),
    experiment("bench", ("bench",), ("bench.csv",), (command("bench"),), (("bench", "generation"),), "summary"),
    experiment("concurrency", ("concurrency",), (), (command("concurrency"),), (("concurrency", "group"),),
               "concurrency"),
    experiment("compare_drafters", (), tuple(f"compare_drafters-{arch}.csv" for arch in ("gdn", "mla")),
               tuple(command("compare-drafters", arch=arch, drafter=["shipped", f"{CHECKPOINTS}/{arch}-drafter2"],
                             prompts=6, max_new_tokens=64, out=f"{RESULTS}/compare_drafters-{arch}.csv")
                   for arch in ("gdn", "mla"))),
    experiment("bench_tree", (), ("bench_tree.csv",), (bench("bench_tree"),)),
    experiment("bench_verify", (), ("bench_verify.csv",), (bench("bench_verify"),)),
    experiment("bench_compile", (), ("bench_compile.csv",), (bench("bench_compile"),)),
    experiment("bench_batch", (), ("bench_batch.csv",), (bench("bench_batch"),)),
    experiment("round_cost", ("round_cost",), ("verify_floor.csv",), (bench("bench_round"),),
               (("round_cost", "generation"),), "summary"),
    experiment("loop_compile", (), ("loop_compile.csv",), (bench("bench_loop_compile"),)),
    experiment("recipe_cost", (), ("recipe_cost.csv",), (bench("recipe_cost"),)),
    experiment("leakage", ("leakage",), ("leakage_per_node-*.csv.gz", "crop_rollback-*.csv.gz"), (notebooks("02"),),
               (("leakage", "generation"),), "summary"),
    experiment("precision", (), ("precision_per_node-*.csv.gz",), (notebooks("03"),)),
    experiment("gdn_cost", (), ("gdn_cost-*.csv.gz",), (notebooks("04"),)),
    experiment("sweep", ("sweep",), (), (command("sweep", store="sweep", prompts=4, max_new_tokens=64),),
               (), "summary"),
    experiment("sweeps", ("sweeps",), (), (notebooks("03", "04", "05"),), (("sweeps", "generation"),), "summary"),
    experiment("teacher_forced", ("teacher_forced",), (), (notebooks("05"),), (("teacher_forced", "teacher_forced"),),
               "teacher_forced"),
    experiment("calibration", (), ("calibration-*.csv.gz",), (notebooks("06"),)),
    experiment("dflash2_tables", (),
               ("dflash2_overlap-*.csv.gz", "dflash2_shapes-*.csv.gz", "dflash2_calibration-*.csv.gz"),
               (notebooks("08"),)),
    experiment("your_tree", ("your_tree",), ("your_tree_lossless-*.csv.gz", "your_tree_power-*.csv.gz"),
               (notebooks("09"),)),
    experiment("expert_union", ("expert_union",), ("expert_union.csv", "expert_pairs.csv"),
               (study("expert_union"),), (), "cases"),
    experiment("expert_auto", ("expert_auto",), (), (study("expert_auto"),), (), "expert_auto"),
    experiment("family_leak", (), ("family_leak.csv",), (study("families", "leak"),)),
    experiment("families", ("families",), ("families.csv",), (study("families", "tau"),)),
    experiment("family_cost", (), ("family_cost.csv",), (study("families", "cost"),)),
    experiment("published_unions", (), ("expert_union_published.csv", "routing_fit.json"),
               (study("published_unions"),)),
    experiment("gpu_projection", (), ("gpu_projection.csv", "projection_validation.csv"),
               (study("gpu_projection", "main"),)),
    experiment("k26_bounds", (), ("k26_bounds.csv",), (study("k26_bounds"),)),
    experiment("auto_calibration", (), ("auto_calibration.json",), (study("auto_calibration"),)),
    experiment("auto_chain", ("auto_chain",), ("auto_chain.csv",), (study("auto_chain"),)),
    experiment("ul_findings", (), ("ul_findings.csv",), (study("ul_findings"),)),
    experiment("unlikelihood", (), ("unlikelihood.csv", "unlikelihood_samples.json", "unlikelihood_rules.csv"),
               (study("unlikelihood", "store_candidate_rules"),) + tuple(command("unlikelihood", **run) for run in (
                   {"arch": "gdn", "alpha": 0.7, "steps": 150, "lr": 2e-4, "candidates": "ngram"},
                   {"arch": "mla", "alpha": 1.5, "steps": 150, "lr": 2e-4, "candidates": "ngram"},
                   {"arch": "gdn", "alpha": 1.5, "steps": 150, "lr": 2e-4, "candidates": "ngram"},
                   {"arch": "gdn", "alpha": 1.5, "steps": 150, "lr": 2e-4, "candidates": "lens"},
                   {"arch": "mla", "alpha": 1.0, "steps": 150, "lr": 2e-4, "candidates": "ngram"},
                   {"arch": "gdn", "alpha": 0.5, "steps": 250, "lr": 1e-4, "candidates": "ngram"},
                   {"arch": "mla", "alpha": 1.5, "steps": 150, "lr": 2e-4, "candidates": "lens"},
                   {"arch": "gdn", "alpha": 1.0, "steps": 250, "lr": 1e-4, "candidates": "lens"}))),
)

# scripts/*.py that are not experiments of the registry, and why: {script: why}
NOT_EXPERIMENTS = texts("registry/experiments")["not_experiments"]


def by_name(name: str) -> Experiment:
    """The experiment ``name``; ValueError listing the names otherwise."""
    for e in EXPERIMENTS:
        if e.name == name:
            return e
    raise ValueError(f"no experiment {name!r}; experiments: {', '.join(e.name for e in EXPERIMENTS)}")


def owner_of(store: str) -> Experiment:
    """The experiment that owns the JSON-lines store ``store``."""
    return next(e for e in EXPERIMENTS if store in e.stores)
