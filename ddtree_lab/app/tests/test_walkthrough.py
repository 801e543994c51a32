"""The README's own-model walk-through (issue 58), run as written: every ``ddtree-lab`` line of
its block, in order, in an empty directory. Each command ends with one line saying what it
wrote; the target keeps its tokenizer, the drafter its manifest, its run state sits beside it
in ``runs/my-drafter.run/`` (git-ignored), the bench scores no goal and every T = 0 row equals AR.
Its sweep's DDTree tau rises with the budget and stays below the block size, and the tiny
target's greedy output does not loop from the start (issue 66: its unlikelihood phase). A few
minutes: slow."""
from __future__ import annotations

import contextlib
import io
import re
import shlex

import pandas as pd
import pytest
import torch

from ddtree_lab.app import cli, readme
from ddtree_lab.train.loops import is_looping
from ddtree_lab.train.targets import TINY_STEPS, TINY_UL
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.experiments.plumbing.summary import summarize


def walkthrough() -> list[list[str]]:
    """The commands of the README's walk-through block, each as argv (its ``#`` comment left out)."""
    block = re.search(r"without a checkpoint\*\*.*?```bash\n(.*?)```", readme.README.read_text(), re.S).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_walkthrough_is_four_commands_from_a_target_built_in_one():
    commands = walkthrough()
    assert [c[:2] for c in commands] == [["ddtree-lab", "tiny-target"], ["ddtree-lab", "train-drafter"],
                                         ["ddtree-lab", "bench"], ["ddtree-lab", "sweep"]]
    block = re.search(r"without a checkpoint\*\*.*?```bash\n(.*?)```", readme.README.read_text(), re.S).group(1)
    assert f"trained {TINY_STEPS} + {TINY_UL.steps} unlikelihood steps" in block   # what tiny-target does


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    """The walk-through run once in an empty directory, results into its own results folder ->
    (that directory, [(argv, the command's last line)])."""
    tmp = tmp_path_factory.mktemp("walkthrough")
    lasts, before = [], torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setattr(cli, "RESULTS_DIR", tmp / "results")
        try:
            for argv in walkthrough():
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    cli.main(argv[1:])
                lasts.append((argv, out.getvalue().strip().splitlines()[-1]))
                print(" ".join(argv), "->", lasts[-1][1])
        finally:
            torch.set_num_threads(before)
    return tmp, lasts


def _sweep(tmp) -> pd.DataFrame:
    return ResultsStore("sweeps", next((tmp / "results" / "pairs").glob("attention-*"))).frame()


@pytest.mark.slow
@pytest.mark.xdist_group("walkthrough")  # one worker: the walk-through (2 minutes) runs once for both tests
def test_the_readmes_walkthrough_runs_as_written(walked):
    tmp, lasts = walked
    assert all(last.startswith("wrote ") for _, last in lasts), lasts
    assert (tmp / "runs" / "my-target" / "tokenizer.json").is_file()
    assert (tmp / "runs" / "my-drafter" / "manifest.json").is_file()
    assert (tmp / "runs" / "my-drafter.run" / "train_state.pt").is_file()
    bench = pd.read_csv(next((tmp / "results" / "pairs").glob("attention-*/bench.csv")))
    assert (bench[bench.temperature == 0].matches_ar == 1).all() and "accept_rule" in bench
    sweep = _sweep(tmp)
    block = int(sweep[sweep.method == "ddtree"].block_size.iloc[0])
    tau = summarize(sweep[sweep.method == "ddtree"]).set_index("budget").tau
    print(tau.to_string())
    assert list(tau.index) == [4, 16, 64] and tau.is_monotonic_increasing and tau.nunique() == 3
    assert tau.max() < block   # no budget accepts whole blocks every round


@pytest.mark.slow
@pytest.mark.xdist_group("walkthrough")
def test_the_tiny_targets_greedy_output_does_not_loop_from_the_start(walked):
    """The walk-through shows trees, not a loop: no AR output of the sweep loops within its first
    block (the first block a tree drafts against). Its target is seed 0's, counted in steps on one
    thread, so the same model on every machine of this kind; not every seed's is loop-free (3 of
    8 measured: ``train.targets``)."""
    sweep = _sweep(walked[0])
    block = int(sweep[sweep.method == "ddtree"].block_size.iloc[0])
    for tokens in sweep[sweep.method == "ar"]._metrics.map(lambda m: m["tokens"]):
        assert not any(is_looping(tokens[:c]) for c in range(1, block + 1)), tokens
