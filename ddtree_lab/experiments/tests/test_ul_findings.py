"""Whether the findings hold on a target that writes code (issue 70 item 4, ``studies.ul_findings``):
the smoke run measures both pairs end to end into a folder of its own, and the stored table's
findings are the ones its stores give (the sibling collapse aside: it is measured apart)."""
from __future__ import annotations

import pandas as pd
import pytest

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.experiments.studies import ul_findings as ulf


def test_both_pairs_drafters_are_committed():
    assert all(d.joinpath("manifest.json").is_file() for _, d in ulf.pair_dirs().values())


def test_the_grid_holds_ar_the_chain_lookup_and_the_budgets():
    labels = [ulf.label(c["method"], c["budget"]) for c in ulf.configs(ulf.FindingsGrid())]
    assert labels == ["ar", "chain", "lookup", "ddtree-4", "ddtree-16", "ddtree-64"]


def test_the_smoke_run_measures_both_pairs_losslessly(tmp_path, monkeypatch):
    monkeypatch.setattr(ulf, "RESULTS_DIR", tmp_path)
    table = ulf.study(smoke=True)
    assert list(table.pair) == ["looping", "fine-tuned"] and (table.matches_ar == 1.0).all()
    assert (tmp_path / "smoke" / ulf.TABLE_CSV).is_file()
    assert (tmp_path / "smoke" / ulf.RUN / "looping").is_dir()


def test_the_stored_findings_are_what_the_stores_give():
    stored = pd.read_csv(RESULTS_DIR / ulf.TABLE_CSV).set_index("pair")
    grid = ulf.FindingsGrid()
    for name in ulf.pair_dirs():
        frame = ResultsStore(ulf.RUN, RESULTS_DIR / ulf.RUN / name).frame()
        frame = frame[(frame.run == ulf.RUN) & (frame.prompt < grid.num_prompts)]
        got = ulf.findings(frame, {"ratio": 0.0, "lo": 0.0, "hi": 0.0})
        for key in ("chain_tau", "best_budget", "tree_over_chain_tau", "tree_over_chain_speed", "lookup_tau",
                    "lookup_over_best_drafter_speed", "matches_ar"):
            assert got[key] == pytest.approx(stored.loc[name, key], rel=1e-5), (name, key)
