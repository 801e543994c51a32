"""``verify_cost`` tables on the toy targets: documented columns, positive finite times, every
ratio a paired median inside its own 95% interval (6 repeats: the smallest n with one),
the stock forward of the flattened tree timed beside the modes, minima below medians, depths those of the trees,
the fork state exactly (N+1) x GDN layers x H x dk x dv x itemsize and growing memory, goal
lines PASS/MISS against the table's own numbers."""
from __future__ import annotations

import math

import pytest
import torch

from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.verify_cost import (GDN_COLUMNS, GOALS, MLA_COLUMNS, gdn_breakdown, gdn_cost_table,
                                               goal_lines, mla_cost_table, random_tree)

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
        assert (lo <= mid).all() and (mid <= hi).all() and (lo > 0).all() and p.between(0, 1).all(), ratio
    for mode in ("naive", "fork", "wy", "stock", "commit_fork", "commit_wy"):
        assert (gdn_table[f"{mode}_min_ms"] <= gdn_table[f"{mode}_ms"]).all(), mode
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
    for ratio in ("verify/root", "verify/hf"):
        assert (table[f"{ratio}_lo"] <= table[ratio]).all() and (table[ratio] <= table[f"{ratio}_hi"]).all(), ratio
    assert (table["verify_min_ms"] <= table["verify_ms"]).all() and (table["hf_min_ms"] <= table["hf_ms"]).all()
    assert table["hf_ms"].nunique() == 1  # one stock-decode reference for every budget


def test_gdn_table_rejects_an_attention_only_target():
    with pytest.raises(ValueError, match="GDN target"):
        gdn_cost_table(build_target("mla-toy"), budgets=(1,), repeats=1)


def test_full_size_cost_rows_pair_every_mode_with_the_stock_forward(gdn):
    from ddtree_lab.experiments.full_size_cost import cost_rows
    rows = cost_rows(gdn, (1, 4), prefix_len=8, repeats=REPEATS, measure_memory=False)
    for row in rows:
        for m in ("naive", "fork", "wy"):
            assert row[f"{m}/stock_lo"] <= row[f"{m}/stock"] <= row[f"{m}/stock_hi"], (m, row)
