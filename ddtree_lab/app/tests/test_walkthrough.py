"""The README's own-model walk-through (issue 58), run as written: every ``ddtree-lab`` line of
its block, in order, in an empty directory. Each command ends with one line saying what it
wrote; the target keeps its tokenizer, the drafter its manifest, its run state sits beside it
in ``runs/my-drafter.run/`` (git-ignored), the bench scores no goal and every T = 0 row equals AR. A few minutes:
slow."""
from __future__ import annotations

import re
import shlex

import pandas as pd
import pytest
import torch

from ddtree_lab.app import cli, readme


def walkthrough() -> list[list[str]]:
    """The commands of the README's walk-through block, each as argv (its ``#`` comment left out)."""
    block = re.search(r"without a checkpoint\*\*.*?```bash\n(.*?)```", readme.README.read_text(), re.S).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_walkthrough_is_four_commands_from_a_target_built_in_one():
    commands = walkthrough()
    assert [c[:2] for c in commands] == [["ddtree-lab", "tiny-target"], ["ddtree-lab", "train-drafter"],
                                         ["ddtree-lab", "bench"], ["ddtree-lab", "sweep"]]


@pytest.mark.slow
def test_the_readmes_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    before = torch.get_num_threads()
    try:
        for argv in walkthrough():
            cli.main(argv[1:])
            last = capsys.readouterr().out.strip().splitlines()[-1]
            print(" ".join(argv), "->", last)
            assert last.startswith("wrote "), argv
    finally:
        torch.set_num_threads(before)
    assert (tmp_path / "runs" / "my-target" / "tokenizer.json").is_file()
    assert (tmp_path / "runs" / "my-drafter" / "manifest.json").is_file()
    assert (tmp_path / "runs" / "my-drafter.run" / "train_state.pt").is_file()
    bench = pd.read_csv(next((tmp_path / "results" / "pairs").glob("attention-*/bench.csv")))
    assert (bench[bench.temperature == 0].matches_ar == 1).all() and "accept_rule" in bench
