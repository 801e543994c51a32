"""``verify_cost`` tables on the toy targets: documented columns, positive finite times, and,
with the timer replaced by scripted times, every ratio the median / 95% interval / sign test
of its own pairs (6 repeats: the smallest n with an interval), every _ms a median and every
_min_ms a minimum; the stock forward of the flattened tree timed beside the modes, depths those of the trees,
the fork state exactly (N+1) x GDN layers x H x dk x dv x itemsize and growing memory, goal
lines PASS/MISS against the table's own numbers."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.studies import full_size_cost
from ddtree_lab.experiments.studies import verify_cost
from ddtree_lab.experiments.studies.verify_cost import (GDN_COLUMNS, GOALS, MLA_COLUMNS, gdn_breakdown, gdn_cost_table,
                                               goal_lines, mla_cost_table)
from ddtree_lab.experiments.plumbing.measure import random_tree

torch.set_num_threads(1)
BUDGETS = (1, 4, 16)
RATIOS = ("fork/naive", "wy/naive", "naive/stock", "fork/stock", "wy/stock", "commit/fork", "commit/wy")
REPEATS = 6


@pytest.fixture(scope="module")
def gdn():
    return build_target("gdn-toy")


@pytest.fixture(scope="module")
def gdn_table(gdn):
    return gdn_cost_table(gdn, budgets=BUDGETS, prefix_len=8, repeats=REPEATS)


def assert_positive_times(table):
    ms = [c for c in table.columns if c.endswith("_ms")]
    bad = {c: table[c].tolist() for c in ms if not all(math.isfinite(x) and x > 0 for x in table[c])}
    print("time columns:", ms, "bad:", bad)
    assert ms and not bad


def test_gdn_table(gdn, gdn_table):
    assert list(gdn_table.columns) == list(GDN_COLUMNS)
    assert gdn_table["budget"].tolist() == list(BUDGETS)
    assert_positive_times(gdn_table)
    c = gdn.config
    per_node = (c.layer_types.count("linear_attention") * c.linear_num_value_heads * c.linear_key_head_dim
                * c.linear_value_head_dim * next(gdn.parameters()).element_size())
    expected = [(b + 1) * per_node for b in BUDGETS]
    print("fork_state_bytes:", gdn_table["fork_state_bytes"].tolist(), "expected:", expected)
    assert gdn_table["fork_state_bytes"].tolist() == expected
    assert (gdn_table[["wy_nxn_bytes", "peak_naive_bytes", "peak_fork_bytes", "peak_wy_bytes"]] > 0).all().all()


def test_gdn_table_values_are_consistent(gdn, gdn_table):
    for ratio in RATIOS:
        lo, mid, hi, p = (gdn_table[c] for c in (f"{ratio}_lo", ratio, f"{ratio}_hi", f"{ratio}_p"))
        print(ratio, list(zip(lo.round(3), mid.round(3), hi.round(3))))
        assert (lo > 0).all() and p.between(0, 1).all(), ratio
    depths = [int(random_tree(gdn.config.vocab_size, b).depths.max()) for b in BUDGETS]
    assert gdn_table["depth"].tolist() == depths
    for col in ("wy_nxn_bytes", "peak_fork_bytes"):
        assert gdn_table[col].is_monotonic_increasing and gdn_table[col].iloc[-1] > gdn_table[col].iloc[0], col
    assert (gdn_table["peak_fork_bytes"] > gdn_table["peak_wy_bytes"]).all()  # fork holds N+1 states


def test_goal_lines(gdn_table):
    lines = goal_lines(gdn_table, budget=BUDGETS[-1])
    print("\n".join(lines))
    assert len(lines) == 4 and all(line.startswith(("PASS", "MISS")) for line in lines)
    row = gdn_table.set_index("budget").loc[BUDGETS[-1]]
    for line, (name, op, limit, _, _) in zip(lines, GOALS):
        met = row[name] <= limit if op == "<=" else row[name] < limit
        assert line.split()[:2] == ["PASS" if met else "MISS", name], line
    with pytest.raises(ValueError, match="not in the table"):
        goal_lines(gdn_table, budget=64)


def test_gdn_breakdown(gdn):
    table = gdn_breakdown(gdn, budget=BUDGETS[-1], prefix_len=8, repeats=1)
    print(table)
    assert list(zip(table["mode"], table["part"])) == [("naive", "verify"), ("fork", "verify"), ("fork", "commit"),
                                                       ("wy", "verify"), ("wy", "commit")]
    assert (table["total_ms"] > 0).all() and (table["tree_conv_ms"][table["part"] == "verify"] > 0).all()


def test_mla_table():
    table = mla_cost_table(build_target("mla-toy"), budgets=BUDGETS, prefix_len=8, repeats=REPEATS)
    print(table)
    assert list(table.columns) == list(MLA_COLUMNS)
    assert table["budget"].tolist() == list(BUDGETS)
    assert_positive_times(table)
    assert (table[["verify/root", "verify/hf"]] > 0).all().all()
    assert table["hf_ms"].nunique() == 1  # one stock-decode reference for every budget


def test_gdn_table_rejects_an_attention_only_target():
    with pytest.raises(ValueError, match="GDN target"):
        gdn_cost_table(build_target("mla-toy"), budgets=(1,), repeats=1)


def test_full_size_cost_rows_pair_every_mode_with_the_stock_forward(gdn):
    from ddtree_lab.experiments.studies.full_size_cost import cost_rows
    rows = cost_rows(gdn, (1, 4), prefix_len=8, repeats=REPEATS, measure_memory=False)
    for row in rows:
        for m in ("naive", "fork", "wy"):
            assert {f"{m}/stock{s}" for s in ("", "_lo", "_hi", "_p")} <= row.keys(), (m, row)
            assert row[f"{m}/stock_lo"] > 0 and 0 <= row[f"{m}/stock_p"] <= 1, (m, row)


# ----------------------------------------------------------------------------- scripted times: known answers
# r = 1..6 per repeat. Ratios 1..6 (one tie with 1, dropped): median 3.5, interval [r_(1), r_(6)]
# = [1, 6] (n = 6: k = 1), sign test 2 / 2**5. Ratios 2r: 7, [2, 12], 2 / 2**6. A constant ratio c:
# c, [c, c], 2 / 2**6 (1.0 if c == 1: every pair a tie). A swapped ratio, a ratio of medians, a
# mean for a median or a median for a minimum fails these.
R = 6
ONE_TO_SIX = (3.5, 1.0, 6.0, 2 / 2 ** 5)


def assert_ratio(row, name, median, lo, hi, p):
    got = tuple(row[f"{name}{s}"] for s in ("", "_lo", "_hi", "_p"))
    print(name, got)
    assert got == pytest.approx((median, lo, hi, p)), name


def test_gdn_table_columns_from_scripted_times(gdn, monkeypatch):
    """naive 2 ms, stock 1 ms, wy = naive, fork = r x naive, commits a tenth of their verify."""
    def scripted(model, cache, tree, repeats, stock):
        assert repeats == R
        fork = [2.0 * r for r in range(1, R + 1)]
        return {("naive", "verify"): [2.0] * R, ("fork", "verify"): fork, ("wy", "verify"): [2.0] * R,
                ("stock", "verify"): [1.0] * R, ("fork", "commit"): [0.1 * t for t in fork],
                ("wy", "commit"): [0.2] * R, ("naive", "commit"): [None] * R, ("stock", "commit"): [None] * R}
    monkeypatch.setattr(verify_cost, "_time_gdn_modes", scripted)
    row = gdn_cost_table(gdn, budgets=(4,), prefix_len=8, repeats=R).iloc[0]
    assert_ratio(row, "fork/naive", *ONE_TO_SIX)
    assert_ratio(row, "wy/naive", 1.0, 1.0, 1.0, 1.0)
    assert_ratio(row, "naive/stock", 2.0, 2.0, 2.0, 2 / 2 ** 6)
    assert_ratio(row, "fork/stock", 7.0, 2.0, 12.0, 2 / 2 ** 6)
    for name in ("commit/fork", "commit/wy"):
        assert_ratio(row, name, 0.1, 0.1, 0.1, 2 / 2 ** 6)
    assert (row["fork_ms"], row["fork_min_ms"], row["naive_ms"], row["stock_min_ms"]) == (7.0, 2.0, 2.0, 1.0)
    assert row["commit_fork_ms"] == pytest.approx(0.7) and row["commit_fork_min_ms"] == pytest.approx(0.2)


def test_mla_table_columns_from_scripted_times(monkeypatch):
    """Each repeat times the root-only verify (1 ms), the budget-4 verify (r ms), the HF decode (0.5 ms)."""
    calls = itertools.count()

    def scripted(fn):
        repeat, slot = divmod(next(calls), 3)  # repeat 0 warms up
        return (1.0, float(repeat), 0.5)[slot], fn()
    monkeypatch.setattr(verify_cost, "timed", scripted)
    row = mla_cost_table(build_target("mla-toy"), budgets=(4,), prefix_len=8, repeats=R).iloc[0]
    assert_ratio(row, "verify/root", *ONE_TO_SIX)
    assert_ratio(row, "verify/hf", 7.0, 2.0, 12.0, 2 / 2 ** 6)
    assert (row["verify_ms"], row["verify_min_ms"], row["hf_ms"], row["hf_min_ms"]) == (3.5, 1.0, 0.5, 0.5)


def test_full_size_cost_rows_from_scripted_times(gdn, monkeypatch):
    """Stock 1 ms; naive r ms, fork 2r ms, wy r / 2 ms in the r-th repeat."""
    from collections import Counter
    calls, base = Counter(), {"naive": 1.0, "fork": 2.0, "wy": 0.5}

    def scripted_verify(model, cache, tree, mode):
        calls[mode] += 1
        return base[mode] * (calls[mode] - 1)  # the first call warms up
    monkeypatch.setattr(full_size_cost, "time_verify", scripted_verify)
    monkeypatch.setattr(full_size_cost, "stock_flat_timer", lambda model, prefix: lambda tree: 1.0)
    (row,) = full_size_cost.cost_rows(gdn, (4,), prefix_len=8, repeats=R, measure_memory=False)
    assert_ratio(row, "naive/stock", *ONE_TO_SIX)
    assert_ratio(row, "fork/stock", 7.0, 2.0, 12.0, 2 / 2 ** 6)
    assert_ratio(row, "wy/stock", 1.75, 0.5, 3.0, 2 * 6 / 2 ** 5)  # 4 above 1, 1 below, 1 tie
    assert (row["fork_ms"], row["fork_min_ms"], row["stock_ms"]) == (7.0, 2.0, 1.0)
