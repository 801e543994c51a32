"""One way to run an experiment: a registry of every experiment the lab stores.

Each ``Experiment`` has a name, the files it owns under data/results/ (JSON-lines stores,
CSV tables, cached tables ``name-*.csv.gz``), the steps that (re)compute them (in-process
calls of the lab's functions, one thread, timings alone), how its golden sample is recomputed
(``app.golden``) and how it is tabled (``show``). The CLI reads it:

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


EXPERIMENTS = (
    Experiment("quality", "the 164-prompt lossless and tau table of the shipped pairs", ("quality",),
               ("quality-gdn-mla.json",), (command("quality"),), (("quality", "generation"),), "summary"),
    Experiment("dflash2", "DDTree over DFlash 2: budget x temperature, lossless rows, teacher-forced",
               ("dflash2", "teacher_forced_dflash2"), (), (command("dflash2"),),
               (("dflash2", "study"), ("teacher_forced_dflash2", "teacher_forced_dflash2")), "summary"),
    Experiment("exactness", "tree vs path logits per mode and precision", (), ("exactness.csv",),
               (bench("exactness"),)),
    Experiment("bench", "AR vs DFlash vs DDTree, held out, paired (timing)", ("bench",), ("bench.csv",),
               (command("bench"),), (("bench", "generation"),), "summary"),
    Experiment("concurrency", "budget x concurrency of batched AR / DFlash / DDTree (timing)", ("concurrency",), (),
               (command("concurrency"),), (("concurrency", "group"),), "concurrency"),
    Experiment("compare_drafters", "`ddtree-lab compare-drafters`: the shipped DFlash drafter against the DFlash 2 "
               "drafter on each target, tau and speed over AR, interleaved (timing)", (),
               tuple(f"compare_drafters-{arch}.csv" for arch in ("gdn", "mla")),
               tuple(command("compare-drafters", arch=arch, drafter=["shipped", f"{CHECKPOINTS}/{arch}-drafter2"],
                             prompts=6, max_new_tokens=64, out=f"{RESULTS}/compare_drafters-{arch}.csv")
                   for arch in ("gdn", "mla"))),
    Experiment("bench_tree", "build_tree cost by budget (timing)", (), ("bench_tree.csv",), (bench("bench_tree"),)),
    Experiment("bench_verify", "verify cost per GDN mode and MLA (timing)", (), ("bench_verify.csv",),
               (bench("bench_verify"),)),
    Experiment("bench_compile", "compiled vs eager verify (timing)", (), ("bench_compile.csv",),
               (bench("bench_compile"),)),
    Experiment("bench_batch", "batched verify cost (timing)", (), ("bench_batch.csv",), (bench("bench_batch"),)),
    Experiment("round_cost", "what a round costs, lab vs reference loop, and the verify floor (timing)",
               ("round_cost",), ("verify_floor.csv",), (bench("bench_round"),),
               (("round_cost", "generation"),), "summary"),
    Experiment("loop_compile", "the compiled loop vs eager and the compiled reference loop (timing)", (),
               ("loop_compile.csv",), (bench("bench_loop_compile"),)),
    Experiment("recipe_cost", "a training step of the drafter recipe (timing)", (), ("recipe_cost.csv",),
               (bench("recipe_cost"),)),
    Experiment("leakage", "notebook 02: GDN state leakage, per node and by budget; crop rollback", ("leakage",),
               ("leakage_per_node-*.csv.gz", "crop_rollback-*.csv.gz"), (notebooks("02"),),
               (("leakage", "generation"),), "summary"),
    Experiment("precision", "notebook 03: MLA tree verify error by precision", (), ("precision_per_node-*.csv.gz",),
               (notebooks("03"),)),
    Experiment("gdn_cost", "notebook 04: GDN verify cost per mode (timing)", (), ("gdn_cost-*.csv.gz",),
               (notebooks("04"),)),
    Experiment("sweep", "`ddtree-lab sweep` at its defaults on 4 prompts of 64 tokens: AR, DFlash and DDTree by "
               "budget on both targets", ("sweep",), (), (command("sweep", store="sweep", prompts=4, max_new_tokens=64),),
               (), "summary"),
    Experiment("sweeps", "notebooks 03-05: budget sweeps of every mode", ("sweeps",), (),
               (notebooks("03", "04", "05"),), (("sweeps", "generation"),), "summary"),
    Experiment("teacher_forced", "notebook 05: acceptance teacher-forced on HumanEval solutions", ("teacher_forced",),
               (), (notebooks("05"),), (("teacher_forced", "teacher_forced"),), "teacher_forced"),
    Experiment("calibration", "notebook 06: drafter calibration per node", (), ("calibration-*.csv.gz",),
               (notebooks("06"),)),
    Experiment("dflash2_tables", "notebook 08: proposals' overlap, tree shapes, sibling calibration", (),
               ("dflash2_overlap-*.csv.gz", "dflash2_shapes-*.csv.gz", "dflash2_calibration-*.csv.gz"),
               (notebooks("08"),)),
    Experiment("your_tree", "notebook 09: tree rules of one's own beside DDTree by budget (timing), their lossless "
               "checks at T = 0.8 and the check's power (rules defined in the notebook: no golden sample)",
               ("your_tree",), ("your_tree_lossless-*.csv.gz", "your_tree_power-*.csv.gz"), (notebooks("09"),)),
    Experiment("expert_union", "the MoE target's expert union by budget (tree / chain / independent) and the "
               "routing correlation", ("expert_union",), ("expert_union.csv", "expert_pairs.csv"),
               (study("expert_union"),), (), "cases"),
    Experiment("expert_auto", "expert-aware auto vs node-count auto and fixed budgets on the MLA target (timing)",
               ("expert_auto",), (), (study("expert_auto"),), (), "expert_auto"),
    Experiment("family_leak", "notebook 11: the naive verify against each node's own path, every hybrid class "
               "(tiny, random, float64)", (), ("family_leak.csv",), (study("families", "leak"),)),
    Experiment("families", "notebook 11: naive vs exact tau by budget on one trained tiny target per recurrent "
               "family", ("families",), ("families.csv",), (study("families", "tau"),)),
    Experiment("family_cost", "notebook 11: each family's one-pass tree form vs the stock mixer on the same tokens "
               "(timing)", (), ("family_cost.csv",), (study("families", "cost"),)),
    Experiment("published_unions", "issue 69: the routing correlation fitted to published expert unions of real "
               "MoEs, each fit checked on the points it did not use", (),
               ("expert_union_published.csv", "routing_fit.json"), (study("published_unions"),)),
    Experiment("gpu_projection", "the round-cost model on named accelerators: published points predicted (and the "
               "cost model alone beside the trivial baseline), Kimi K2.6 and Qwen3.6-27B projected (a projection)",
               (), ("gpu_projection.csv", "projection_validation.csv"), (study("gpu_projection", "main"),)),
    Experiment("k26_bounds", "issue 69: Kimi K2.6's best budget and winner over fixed cost per forward x routing x "
               "chain tau x tree gain (a projection)", (), ("k26_bounds.csv",), (study("k26_bounds"),)),
    Experiment("auto_calibration", "issue 69: per-node acceptance by drafter path probability, on the top-1 path or "
               "off it, fitted on calibration prompts 10-18, checked on 0-9 (auto does not read it)", (),
               ("auto_calibration.json",), (study("auto_calibration"),)),
    Experiment("auto_chain", "issue 69: auto with the chain among its candidates against the chain and every fixed "
               "budget, both targets, interleaved (timing)", ("auto_chain",), ("auto_chain.csv",),
               (study("auto_chain"),)),
    Experiment("unlikelihood", "issue 70: unlikelihood fine-tunes of both targets, their greedy loop share and "
               "HumanEval-solution loss beside the shipped targets' (training: 15-40 min a run on this shared CPU)", (),
               ("unlikelihood.csv", "unlikelihood_samples.json", "unlikelihood_rules.csv"),
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

# scripts/*.py that are not experiments of the registry, and why
NOT_EXPERIMENTS = {
    "bench_gdn_tree.py": "a kernel micro-benchmark on random trees that prints and stores nothing the lab reads",
    "dflash_gdn_rollback.py": "a standalone reproduction for the transformers / dflash maintainers (prints only)",
    "drafter_candidates.py": "trains and ships drafters (training, not an experiment; a recompute follows it)",
    "drafter_grid.py": "the drafter training grid (hours of training, its own resumable store under training/grid)",
    "full_size_check.py": "full-width layers for a GPU (scripts/gpu_check.sh); its CPU --tiny run is a test",
    "tp_verify.py": "tensor parallelism under torchrun (several processes); its results live under full_size/",
    "gpu_projection_check.py": "the measured verify beside the GPU projection, for a GPU (scripts/gpu_check.sh); "
                               "its CPU --tiny run is a test",
    "migrate_semantics.py": "the one-off move of the stores to keys of meaning (issue 57)",
    "migrate_loop_tags.py": "the one-off retagging of every stored row's rounds by the loop lens (issue 60)",
    "draw_loop_rounds.py": "draws the rounds a person labels to measure the loop lens (data/loop_labels.json)",
}


def by_name(name: str) -> Experiment:
    """The experiment ``name``; ValueError listing the names otherwise."""
    for e in EXPERIMENTS:
        if e.name == name:
            return e
    raise ValueError(f"no experiment {name!r}; experiments: {', '.join(e.name for e in EXPERIMENTS)}")


def owner_of(store: str) -> Experiment:
    """The experiment that owns the JSON-lines store ``store``."""
    return next(e for e in EXPERIMENTS if store in e.stores)
