"""``compare-drafters``: drafters of one target on the same prompts, interleaved, lossless,
tau pooled over rounds (all and outside loops), speed over AR and over the first drafter."""
from __future__ import annotations

import pytest
import torch

from ddtree_lab.app.cli import main
from ddtree_lab.train.loops import loop_split
from ddtree_lab.experiments.studies.compare_drafters import (compare_display, compare_drafters, compare_table,
                                                            spread_prompts)
from helpers import toy_pair

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def frame():
    target, a = toy_pair("mla-toy", seed=0)
    _, b = toy_pair("mla-toy", seed=5)
    prompts = {i: [int(t) for t in torch.randint(2, 60, (6,), generator=torch.Generator().manual_seed(i))]
               for i in range(6)}
    return compare_drafters(target, {"a": a, "b": b}, prompts, max_new_tokens=12, progress=False)


def test_every_drafter_runs_every_prompt_losslessly_in_rotating_order(frame):
    assert len(frame) == 6 * (1 + 2 * 2)
    assert frame.equals_ar.all()
    firsts = [rows[rows.method != "ar"].drafter.iloc[0] for _, rows in frame.groupby("prompt", sort=True)]
    assert firsts == ["a", "b"] * 3


def test_table_pools_rounds_and_pairs_speeds(frame):
    table = compare_table(frame)
    assert list(zip(table.drafter, table.method)) == [("a", "dflash"), ("a", "ddtree-16"),
                                                      ("b", "dflash"), ("b", "ddtree-16")]
    rows = frame[(frame.drafter == "b") & (frame.method == "dflash")]
    accepted = [a for r in rows.acceptance_lengths for a in r]
    flags = [f for r in rows.loop_flags for f in r]
    assert table.tau.iloc[2] == pytest.approx(loop_split(accepted, flags)["tau"], rel=1e-12)
    assert table.lossless.tolist() == ["6/6"] * 4
    assert table.speed_over_a.iloc[:2].isna().all() and table.speed_over_a.iloc[2:].notna().all()
    ar = frame[frame.method == "ar"].set_index("prompt").seconds
    b = rows.set_index("prompt").seconds
    assert table.speed_over_ar.iloc[2] == pytest.approx(float((ar / b).median()), rel=1e-12)
    assert compare_display(table)["speed over a"].iloc[0] == "-"


def test_spread_prompts_cover_the_set():
    assert spread_prompts(12) == [0, 15, 30, 44, 59, 74, 89, 104, 119, 133, 148, 163]
    assert spread_prompts(1) == [0]
    with pytest.raises(ValueError, match=r"count must be in \[1, 164\]"):
        spread_prompts(0)


def test_the_command_needs_one_target(tmp_path):
    with pytest.raises(SystemExit, match="--arch .* or --target"):
        main(["compare-drafters", "--drafter", "shipped"])
