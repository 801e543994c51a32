"""The drafter grid (issue 27): points, recipes, the store, the Pareto front and the ship rule."""
from __future__ import annotations

import pandas as pd
import pytest

from ddtree_lab.experiments.studies.drafter_grid import (GridPoint, append_row, done_points, labels_of, pareto_front,
                                                         parse_point, point_label, same_recipe_spread, ship_line, ship_rule,
                                                         tf_floor)
from ddtree_lab.train.drafters import RECIPES, with_knobs


def test_points_parse_and_set_the_recipe_knobs():
    p = parse_point("0.25x6000")
    assert p == GridPoint(0.25, 6000, "soft") and p.name == "share0.25-steps6000"
    assert parse_point("0x3000h") == GridPoint(0.0, 3000, "hard")
    assert parse_point("0.5x3000m").name == "share0.5-steps3000-mixed"
    r = p.recipe()
    assert r.corpus_share == 0.25 and r.train.total_steps == 6000 and r.soft_top_k == RECIPES["default"].soft_top_k
    assert r.rollout_soft
    assert GridPoint(0.0, 3000, "hard").recipe().soft_top_k == 0
    mixed = GridPoint(0.5, 3000, "mixed").recipe()
    assert mixed.soft_top_k == RECIPES["default"].soft_top_k and not mixed.rollout_soft
    assert with_knobs(RECIPES["default"]) == RECIPES["default"]  # no knob: the preset itself


def test_a_point_can_set_the_drafters_depth():
    p = parse_point("0.25x6000@5")
    assert p == GridPoint(0.25, 6000, "soft", 5) and p.name == "share0.25-steps6000-layers5"
    assert p.recipe().num_layers == 5 and parse_point("0.25x6000").recipe().num_layers == RECIPES["default"].num_layers
    assert parse_point("0x3000h@2").name == "share0-steps3000-hard-layers2"
    assert point_label({"share": 0.25, "steps": 6000, "labels": "soft", "layers": 5}) == "0.25 x 6k 5L"
    assert point_label({"share": 0.25, "steps": 6000, "labels": "soft", "layers": RECIPES["default"].num_layers}) == "0.25 x 6k"
    with pytest.raises(ValueError, match="layers"):
        with_knobs(RECIPES["default"], layers=0)


@pytest.mark.parametrize("text", ["0.25", "ax100", "0.5x-3", "2x100", "0.5x100q", "0.5x100@0", "0.5x100@x"])
def test_bad_points_are_named(text):
    with pytest.raises(ValueError, match="share|steps|layers|SHARExSTEPS"):
        parse_point(text)


def test_hard_and_mixed_points_drop_the_soft_labels():
    train = {"tokens": 1, "soft_ids": 2, "soft_probs": 3}
    corpus = {"tokens": 4, "soft_ids": 5, "soft_probs": 6}
    assert labels_of(("r", train, "v", corpus), "soft")[1] is train
    _, t, _, c = labels_of(("r", train, "v", corpus), "hard")
    assert t == {"tokens": 1} and c == {"tokens": 4}
    _, t, _, c = labels_of(("r", train, "v", corpus), "mixed")
    assert t == {"tokens": 1} and c is corpus
    assert labels_of(("r", train, "v", None), "hard")[3] is None


def grid_rows():
    return pd.DataFrame([
        {"arch": "gdn", "point": "shipped", "source": "shipped", "share": 0.5, "steps": 3000, "labels": "soft",
         "tf_dflash_tau": 1.42, "decode_dflash_tau": 2.35},
        {"arch": "gdn", "point": "a", "share": 0.0, "steps": 3000, "labels": "soft", "tf_dflash_tau": 1.2, "decode_dflash_tau": 2.9, "source": "trained"},
        {"arch": "gdn", "point": "b", "share": 0.25, "steps": 6000, "labels": "soft", "tf_dflash_tau": 1.45, "decode_dflash_tau": 2.7, "source": "trained"},
        {"arch": "gdn", "point": "c", "share": 0.5, "steps": 3000, "labels": "soft", "tf_dflash_tau": 1.43, "decode_dflash_tau": 2.4, "source": "trained"},
        {"arch": "mla", "point": "a", "share": 0.0, "steps": 3000, "labels": "hard", "tf_dflash_tau": 1.1, "decode_dflash_tau": 2.6, "source": "trained"},
        {"arch": "mla", "point": "b", "share": 0.5, "steps": 3000, "labels": "soft", "tf_dflash_tau": 1.3, "decode_dflash_tau": 2.2, "source": "trained"}])


def test_pareto_front_keeps_the_undominated_points():
    g = grid_rows()
    assert pareto_front(g[(g.arch == "gdn") & (g.source == "trained")]).point.tolist() == ["a", "b"]  # b beats c
    assert point_label(g.iloc[4]) == "0 x 3k hard"


def test_ship_rule_prefers_the_floor_then_free_running():
    pick = ship_rule(grid_rows(), {"gdn": 1.42, "mla": 1.37}).set_index("arch")
    assert pick.loc["gdn", "point"] == "b" and pick.loc["gdn", "meets_floor"]  # not the shipped yardstick
    # no MLA point reaches 1.37: the best free-running one, flagged
    assert pick.loc["mla", "point"] == "a" and not pick.loc["mla", "meets_floor"]


def test_the_ship_line_says_whether_the_pick_is_the_shipped_drafter():
    pick = ship_rule(grid_rows().assign(drafter_sha256=["s", "a", "b", "c", "ma", "mb"]), {"gdn": 1.42, "mla": 1.37})
    gdn, mla = pick.iloc[0], pick.iloc[1]
    assert ship_line(gdn, 1.42, "b").endswith("meets the floor 1.42; shipped)")
    assert "misses the floor 1.37; not shipped yet" in ship_line(mla, 1.37, "mb")


def test_rows_append_and_mark_points_done(tmp_path):
    path = tmp_path / "grid" / "g.csv"
    assert done_points(path) == set()
    append_row({"arch": "gdn", "point": "a", "x": 1}, path)
    append_row({"arch": "mla", "point": "a", "y": 2}, path)  # a new column widens the file
    assert done_points(path) == {("gdn", "a"), ("mla", "a")}
    assert list(pd.read_csv(path).columns) == ["arch", "point", "x", "y"]


def test_same_recipe_spread_needs_both_trainings():
    g = pd.DataFrame({"arch": ["gdn", "gdn", "mla"], "point": ["previous", "share0-steps3000-hard", "previous"],
                      "decode_dflash_tau": [2.8, 3.0, 2.5]})
    spread = same_recipe_spread(g)
    assert spread["gdn"] == pytest.approx(0.2) and spread.isna()["mla"]


def test_the_floor_is_the_shipped_drafters_stored_teacher_forced_tau():
    g = grid_rows()
    gdn = g[g.arch == "gdn"]
    assert tf_floor(g) == {"gdn": 1.42}
    assert ship_rule(gdn).point.tolist() == ship_rule(gdn, {"gdn": 1.42}).point.tolist() == ["b"]
