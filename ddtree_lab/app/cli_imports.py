"""What the CLI's commands import: torch, transformers, pandas and the lab's layers, seconds of
imports that ``app/cli.py`` loads (``cli._load_commands``, into its own namespace) only once
argparse has accepted a command, so ``ddtree-lab --help``, ``--version`` and an argument error
answer at once."""
import torch

from ..core.models import load_target
from ..core.threads import set_threads
from ..train import data
from ..train.checkpoints import CKPT_DIR, check_manifest, ckpt_path
from ..train.drafters import default_runs_dir, load_drafter, train_drafter, train_drafter2
from ..train.pair import load_pair, load_tokenizer_for, pair_from_dirs, pairs_of_one_target
from ..train.targets import tiny_target, train_target
from ..experiments.plumbing.results import ResultsStore, write_timing_table
from ..experiments.plumbing.summary import summarize
from ..experiments.plumbing.sweep import expand_grid, grid_rows, run_sweep
from ..experiments.studies import concurrency as conc
from ..experiments.studies.bench import bench_grid, run_bench
from ..experiments.studies.compare_drafters import (compare_display, compare_drafters, compare_table,
                                                    spread_prompts)
from ..experiments.studies.dflash2 import Drafters, drafters_from_dirs, load_drafters, run_dflash2
from ..experiments.studies.official import run_with_official
from ..experiments.studies.quality import run_quality
from ..experiments.studies.unlikelihood import run_unlikelihood
from ..train.unlikelihood import UnlikelihoodConfig
from . import house
from .readme import BLOCKS, TABLES_JSON, write_readme

__all__ = ["BLOCKS", "CKPT_DIR", "Drafters", "ResultsStore", "TABLES_JSON", "bench_grid",
           "check_manifest", "ckpt_path", "compare_display", "compare_drafters", "compare_table", "conc", "data",
           "default_runs_dir", "drafters_from_dirs", "expand_grid", "grid_rows", "house", "load_drafter",
           "load_drafters", "load_pair", "load_target", "load_tokenizer_for", "pair_from_dirs", "pairs_of_one_target",
           "run_bench", "run_dflash2", "run_quality", "run_sweep", "run_unlikelihood", "UnlikelihoodConfig",
           "run_with_official", "set_threads", "spread_prompts",
           "summarize", "tiny_target", "torch", "train_drafter", "train_drafter2", "train_target",
           "write_readme", "write_timing_table"]
