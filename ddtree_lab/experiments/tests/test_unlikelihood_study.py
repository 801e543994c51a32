"""Issue 70's study: the lenses, the stored table (data/results/unlikelihood.csv) and notebook 12's
sentences, whose every number must be the table's."""
import json
import re

import pandas as pd
import pytest

from ddtree_lab.app import claims
from ddtree_lab.app import unlikelihood_report as ur
from ddtree_lab.common import ROOT
from ddtree_lab.experiments.plumbing.results import STAMP_FIELDS
from ddtree_lab.experiments.studies import unlikelihood as ul
from ddtree_lab.train.checkpoints import CKPT_DIR


def test_tail_lens_wants_an_exactly_periodic_tail_of_48_tokens():
    text = list(range(100, 180))
    assert ul.ends_in_repeating_tail(text + [5, 6, 7] * 16)          # 48 tokens of period 3
    assert not ul.ends_in_repeating_tail(text + [5, 6, 7] * 15)      # 45: too short
    assert not ul.ends_in_repeating_tail(text)
    assert not ul.ends_in_repeating_tail(text + list(range(25)) * 2)  # period 25 > 24
    broken = text + [5, 6, 7] * 16
    broken[-20] = 9
    assert not ul.ends_in_repeating_tail(broken)                      # the plain lens allows no drift


def test_loop_metrics_count_loops_and_repetition():
    outs = {0: list(range(128)), 1: list(range(80)) + [1, 2] * 24}
    m = ul.loop_metrics(outs)
    assert m["prompts"] == 2 and m["loop_share_lens"] == 0.5 and m["loop_share_tail"] == 0.5
    assert m["rep4_median"] == pytest.approx((0.0 + (1 - 82 / 125)) / 2)


def test_upsert_replaces_the_row_of_its_run(tmp_path):
    path = tmp_path / "t.csv"
    row = {"run": "gdn-shipped", "arch": "gdn", "candidates": "shipped", "alpha": 0.0, "steps": 0, "lr": 0.0,
           "solution_loss": 2.7}
    ul.upsert(row, path)
    ul.upsert({**row, "run": "gdn-x", "candidates": "ngram", "steps": 5}, path)
    frame = ul.upsert({**row, "solution_loss": 2.5}, path)
    assert list(frame.run) == ["gdn-shipped", "gdn-x"] and frame.solution_loss.tolist() == [2.5, 2.7]
    assert set(STAMP_FIELDS) <= set(pd.read_csv(path).columns)


@pytest.fixture(scope="module")
def table():
    assert ul.TABLE.is_file(), "data/results/unlikelihood.csv is missing: ddtree-lab run unlikelihood"
    return pd.read_csv(ul.TABLE)


def test_the_stored_table_is_whole_and_stamped(table):
    assert set(ul.COLUMNS + list(STAMP_FIELDS)) <= set(table.columns)
    assert table.run.is_unique and {"gdn", "mla"} <= set(table.arch)
    claims.check(claims.unlikelihood_deltas_consistent(table))
    for r in table.itertuples():
        assert bool(r.meets_goal) == (r.loop_share_tail <= ul.GOAL_LOOPS and r.delta_loss <= ul.GOAL_DELTA)
        assert bool(r.meets_goal_lens) == (r.loop_share_lens <= ul.GOAL_LOOPS and r.delta_loss <= ul.GOAL_DELTA)
    samples = json.loads(ul.SAMPLES.read_text())
    assert set(table.run) <= set(samples)


def _numbers(text: str) -> list[str]:
    return re.findall(r"[+-]?\d+\.\d+|\d+%", text)


def test_notebook_12_sentences_take_every_number_from_the_table(table):
    source = (ROOT / "notebooks" / "12_unlikelihood.ipynb").read_text()
    assert "ur.load()" in source and "ur.finding(" in source
    for arch in sorted(set(table.arch)):
        s, b = ur.shipped(table, arch), ur.best(table, arch)
        text = ur.finding(table, arch)
        rows = [s] + ([b] if b is not None else [])
        allowed = {f"{r.solution_loss:.3f}" for r in rows} | {f"{r.loop_share_tail:.0%}" for r in rows}
        allowed |= {f"{r.loop_share_lens:.0%}" for r in rows} | {f"{r.rep4_median:.2f}" for r in rows}
        allowed |= {f"{r.delta_loss:+.3f}" for r in rows} | {f"{ul.GOAL_LOOPS:.0%}", f"+{ul.GOAL_DELTA:.2f}"}
        allowed |= {f"{b.alpha:g}", f"{b.lr:g}"} if b is not None else set()
        stray = [n for n in _numbers(text) if n not in allowed and n.lstrip("+") not in allowed]
        assert not stray, (arch, stray, text)


def test_a_saved_fine_tune_is_the_one_the_table_measured(table):
    saved = sorted((CKPT_DIR / "unlikelihood").glob("*-target/manifest.json"))
    for path in saved:
        measured = json.loads(path.read_text())["measured"]
        row = table[table.run == measured["run"]].iloc[0]
        assert bool(row.meets_goal) and row.solution_loss == pytest.approx(measured["solution_loss"], rel=1e-9)


def test_a_later_run_never_replaces_a_better_saved_one(tmp_path, monkeypatch):
    monkeypatch.setattr(ul, "saved_dir", lambda arch: tmp_path / f"{arch}-target")
    assert ul.better_than_saved({"arch": "mla", "loop_share_tail": 0.2, "delta_loss": 0.05})   # nothing saved
    (tmp_path / "mla-target").mkdir()
    (tmp_path / "mla-target" / "manifest.json").write_text(json.dumps(
        {"measured": {"loop_share_tail": 0.17, "delta_loss": 0.08}}))
    assert not ul.better_than_saved({"arch": "mla", "loop_share_tail": 0.2, "delta_loss": 0.01})
    assert ul.better_than_saved({"arch": "mla", "loop_share_tail": 0.1, "delta_loss": 0.09})
