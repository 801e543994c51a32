"""``verify_cost`` tables on the toy targets: documented columns, positive finite times, the
fork state exactly (N+1) x GDN layers x H x dk x dv x itemsize, goal lines PASS/MISS."""
from __future__ import annotations

import math

import pytest
import torch

from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.verify_cost import (GDN_COLUMNS, MLA_COLUMNS, gdn_breakdown, gdn_cost_table, goal_lines,
                                    mla_cost_table)

torch.set_num_threads(1)
BUDGETS = (1, 4)


@pytest.fixture(scope="module")
def gdn():
    return build_target("gdn-toy")


@pytest.fixture(scope="module")
def gdn_table(gdn):
    return gdn_cost_table(gdn, budgets=BUDGETS, prefix_len=8, repeats=1)


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


def test_goal_lines(gdn_table):
    lines = goal_lines(gdn_table, budget=BUDGETS[-1])
    print("\n".join(lines))
    assert len(lines) == 4 and all(line.startswith(("PASS", "MISS")) for line in lines)
    with pytest.raises(ValueError, match="not in the table"):
        goal_lines(gdn_table, budget=64)


def test_gdn_breakdown(gdn):
    table = gdn_breakdown(gdn, budget=BUDGETS[-1], prefix_len=8, repeats=1)
    print(table)
    assert list(zip(table["mode"], table["part"])) == [("naive", "verify"), ("fork", "verify"), ("fork", "commit"),
                                                       ("wy", "verify"), ("wy", "commit")]
    assert (table["total_ms"] > 0).all() and (table["tree_conv_ms"][table["part"] == "verify"] > 0).all()


def test_mla_table():
    table = mla_cost_table(build_target("mla-toy"), budgets=BUDGETS, prefix_len=8, repeats=1)
    print(table)
    assert list(table.columns) == list(MLA_COLUMNS)
    assert table["budget"].tolist() == list(BUDGETS)
    assert_positive_times(table)
    assert (table[["verify/root", "verify/hf"]] > 0).all().all()


def test_gdn_table_rejects_an_attention_only_target():
    with pytest.raises(ValueError, match="GDN target"):
        gdn_cost_table(build_target("mla-toy"), budgets=(1,), repeats=1)
