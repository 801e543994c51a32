"""One way to run an experiment: a registry of every experiment the lab stores.

Each ``Experiment`` has a name, the files it owns under data/results/ (JSON-lines stores,
CSV tables, cached tables ``name-*.csv.gz``), the commands that (re)compute them (run from the
repository root, one thread, timings alone), how its golden sample is recomputed
(``app.golden``) and how it is tabled (``show``). The CLI reads it:

    ddtree-lab run NAME          run (resumable: stored rows are skipped)
    ddtree-lab show NAME         its table and the stamp of its timings
    ddtree-lab recompute NAME... | --all      replace its stores (the old ones kept until it ends)
    ddtree-lab status            every store: rows, revisions, whether its golden sample reproduces

The scripts under scripts/ that are not experiments, and why, are in ``NOT_EXPERIMENTS``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

LAB = (sys.executable, "-m", "ddtree_lab", "--threads", "1")


def notebooks(*numbers: str) -> tuple:
    """The command that runs the numbered notebooks (their stores resume, their figures redraw)."""
    return LAB + ("notebooks", *numbers)


def module(study: str, *args: str) -> tuple:
    """The command that runs a study module (``python -m ddtree_lab.experiments.studies.NAME ARGS``)."""
    return (sys.executable, "-m", f"ddtree_lab.experiments.studies.{study}", *args)


def script(name: str, *args: str) -> tuple:
    return (sys.executable, f"scripts/{name}", *args)


@dataclass(frozen=True)
class Experiment:
    """name; what (one line); stores: ResultsStore names (data/results/NAME.jsonl); tables: other
    files under data/results/ (``name-*.csv.gz``: a cached table of any config); run: commands
    (argv tuples); golden: {store: golden kind} (``golden.KINDS``) of the stores whose sample the
    fast lane recomputes; show: how ``ddtree-lab show`` tables it (``show.SHOW``)."""
    name: str
    what: str
    stores: tuple = ()
    tables: tuple = ()
    run: tuple = ()
    golden: tuple = ()   # ((store, kind), ...)
    show: str = "csv"


EXPERIMENTS = (
    Experiment("quality", "the 164-prompt lossless and tau table of the shipped pairs", ("quality",),
               ("quality-gdn-mla.json",), (LAB + ("quality",),), (("quality", "generation"),), "summary"),
    Experiment("dflash2", "DDTree over DFlash 2: budget x temperature, lossless rows, teacher-forced",
               ("dflash2", "teacher_forced_dflash2"), (), (LAB + ("dflash2",),),
               (("dflash2", "study"), ("teacher_forced_dflash2", "teacher_forced_dflash2")), "summary"),
    Experiment("exactness", "tree vs path logits per mode and precision", (), ("exactness.csv",),
               (script("exactness.py"),)),
    Experiment("bench", "AR vs DFlash vs DDTree, held out, paired (timing)", ("bench",), ("bench.csv",),
               (LAB + ("bench",),), (("bench", "generation"),), "summary"),
    Experiment("concurrency", "budget x concurrency of batched AR / DFlash / DDTree (timing)", ("concurrency",), (),
               (LAB + ("concurrency",),), (("concurrency", "group"),), "concurrency"),
    Experiment("bench_tree", "build_tree cost by budget (timing)", (), ("bench_tree.csv",), (script("bench_tree.py"),)),
    Experiment("bench_verify", "verify cost per GDN mode and MLA (timing)", (), ("bench_verify.csv",),
               (script("bench_verify.py"),)),
    Experiment("bench_compile", "compiled vs eager verify (timing)", (), ("bench_compile.csv",),
               (script("bench_compile.py"),)),
    Experiment("bench_batch", "batched verify cost (timing)", (), ("bench_batch.csv",), (script("bench_batch.py"),)),
    Experiment("round_cost", "what a round costs, lab vs reference loop, and the verify floor (timing)",
               ("round_cost",), ("verify_floor.csv",), (script("bench_round.py"),),
               (("round_cost", "generation"),), "summary"),
    Experiment("loop_compile", "the compiled loop vs eager and the compiled reference loop (timing)", (),
               ("loop_compile.csv",), (script("bench_loop_compile.py"),)),
    Experiment("recipe_cost", "a training step of the drafter recipe (timing)", (), ("recipe_cost.csv",),
               (script("recipe_cost.py"),)),
    Experiment("leakage", "notebook 02: GDN state leakage, per node and by budget; crop rollback", ("leakage",),
               ("leakage_per_node-*.csv.gz", "crop_rollback-*.csv.gz"), (notebooks("02"),),
               (("leakage", "generation"),), "summary"),
    Experiment("precision", "notebook 03: MLA tree verify error by precision", (), ("precision_per_node-*.csv.gz",),
               (notebooks("03"),)),
    Experiment("gdn_cost", "notebook 04: GDN verify cost per mode (timing)", (), ("gdn_cost-*.csv.gz",),
               (notebooks("04"),)),
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
               (module("expert_union"),), (), "cases"),
    Experiment("expert_auto", "expert-aware auto vs node-count auto and fixed budgets on the MLA target (timing)",
               ("expert_auto",), (), (module("expert_auto"),), (), "expert_auto"),
    Experiment("family_leak", "notebook 11: the naive verify against each node's own path, every hybrid class "
               "(tiny, random, float64)", (), ("family_leak.csv",), (module("families", "leak"),)),
    Experiment("families", "notebook 11: naive vs exact tau by budget on one trained tiny target per recurrent "
               "family", ("families",), ("families.csv",), (module("families", "tau"),)),
    Experiment("family_cost", "notebook 11: each family's one-pass tree form vs the stock mixer on the same tokens "
               "(timing)", (), ("family_cost.csv",), (module("families", "cost"),)),
    Experiment("gpu_projection", "the round-cost model on named accelerators: published points predicted, Kimi K2.6 "
               "and Qwen3.6-27B projected (a projection)", (), ("gpu_projection.csv",),
               (module("gpu_projection"),)),
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
