"""The DFlash 2 study: its grid, the one-run sweep with both drafters, and the readings
(goals, sibling table, README block), each checked on rows with known answers."""
import pandas as pd
import pytest

from ddtree_lab.experiments.studies import dflash2 as d2
from ddtree_lab.experiments.plumbing.results import ResultsStore


class _Pair:
    def __init__(self, arch, drafter):
        self.arch, self.target_digest, self.drafter_digest = arch, f"t-{arch}", f"{drafter}-{arch}"
        self.tag = f"{arch}-{drafter}"


def _drafters(arch="mla"):
    return d2.Drafters(arch, {"dflash": _Pair(arch, "d1"), "dflash2": _Pair(arch, "d2")})


def test_study_grid_has_every_proposal_at_every_budget_and_one_shared_ar():
    grid = d2.study_grid(("mla",))
    assert len(grid) == sum(3 + 3 * len(b) for b in d2.BUDGETS.values())
    ar = [c for c in grid if c["method"] == "ar"]
    assert len(ar) == len(d2.BUDGETS) and all(c["drafter"] == "dflash" and c["tree"] == "unary" for c in ar)
    trees = {(c["drafter"], c["tree"]) for c in grid if c["method"] == "ddtree"}
    assert trees == set(d2.PROPOSALS)
    assert {c["budget"] for c in grid if c["method"] == "ddtree" and c["temperature"] == 0} == {4, 16, 64, 256}


def _metrics(tokens, acc, flags):
    return {"tokens": tokens, "acceptance_lengths": acc, "tree_sizes": [1] * len(acc), "timings": {"total": 1.0},
            "tau": sum(acc) / len(acc), "round_looping": flags, "round_copyable": [False] * len(acc),
            "ends_in_loop": False, "entropy": 0.1}


def test_the_run_uses_each_configs_own_drafter_and_keys_rows_by_both(tmp_path):
    seen = []

    def runner(cfg, prompt, drafters):
        seen.append((cfg["drafter"], drafters.pairs[cfg["drafter"]].drafter_digest))
        return _metrics([1, 2, 3], [1, 2], [False, False])
    store = ResultsStore("d2", tmp_path)
    grid = [c for c in d2.study_grid(("mla",)) if c["temperature"] == 0 and c["budget"] in (0, 7, 4)]
    frame = d2.run_sweep(grid, [0, 1], store, {"mla": _drafters()}, runner=runner, run=d2.RUN, progress=False)
    assert len(frame) == 2 * len(grid) and {d for d, _ in seen} == {"dflash", "dflash2"}
    assert all(dig.startswith("d1" if d == "dflash" else "d2") for d, dig in seen)
    assert set(frame.iloc[0]["_metrics"]) >= {"tokens"} and store.rows()[0]["models"]["drafter2"] == "d2-mla"
    s = d2.summary(frame)
    assert set(d2.D_AXES) <= set(s.columns) and len(s) == len(grid)


def test_pooled_tau_outside_loops_known_answer():
    rows = pd.DataFrame({"_metrics": [_metrics([0] * 9, [3, 1, 5], [False, True, False]),
                                      _metrics([0] * 4, [4], [True])]})
    assert d2.pooled_tau(rows) == pytest.approx(13 / 4)
    assert d2.pooled_tau(rows, outside_loops=True) == pytest.approx(8 / 2)


def _quality_and_lossless(cond_acc):
    ar = [{"arch": "mla", "method": "ar", "block_size": 0, "budget": 0, "gdn_mode": "wy", "prompt": p,
           "_metrics": _metrics([p, 1, 2], [1, 1, 1], [False] * 3)} for p in range(2)]
    base = [{"arch": "mla", "method": m, "block_size": 8, "budget": b, "gdn_mode": "wy", "prompt": p,
             "_metrics": _metrics([p, 1, 2], [2, 1], [False, False])} for p in range(2)
            for m, b in (("dflash", 7), ("ddtree", 64))]
    mine = [{"arch": "mla", "method": m, "tree": "conditional", "prompt": p, "max_new_tokens": 3,
             "_metrics": _metrics([p, 1, 2] if p == 0 else [9, 9, 9], cond_acc, [False] * len(cond_acc))}
            for p in range(2) for m in ("dflash", "ddtree")]
    # a T = 1 row of the same config must be left out (it would change the DDTree-64 tau)
    hot = [{"arch": "mla", "method": "ddtree", "block_size": 8, "budget": 64, "gdn_mode": "wy", "prompt": 0,
            "temperature": 1.0, "_metrics": _metrics([5, 5, 5], [9], [False])}]
    quality = pd.DataFrame(ar + base).assign(temperature=0.0)
    return pd.DataFrame(mine), pd.concat([quality, pd.DataFrame(hot)]).assign(max_new_tokens=3)


def test_goal_table_reads_tau_and_losslessness_against_the_quality_store():
    lossless, quality = _quality_and_lossless([3])
    g = d2.goal_table(lossless, quality).set_index("config")
    assert g.loc["ddtree64", "tau_outside_loops"] == pytest.approx(1.5)
    assert g.loc["ddtree64_conditional", "tau_outside_loops"] == pytest.approx(3.0)
    assert g.loc["ddtree64_conditional", "matches_ar"] == 0.5  # prompt 1 departs from AR: seen, not hidden
    assert g.loc["ddtree64", "matches_ar"] == 1.0
    text = d2.reading(pd.DataFrame(columns=["arch"]), g.reset_index())
    assert g.loc["ddtree64_conditional", "gain"] == pytest.approx(2.0)      # paired by prompt, with its interval
    assert "(2.0000x [2.00, 2.00]): the selector helps, above the 1.15x goal." in text
    worse = d2.goal_table(*_quality_and_lossless([1])).reset_index(drop=True)
    assert "the selector does not help" in d2.reading(pd.DataFrame(columns=["arch"]), worse)


def test_sibling_table_compares_after_sibling_with_the_main_path():
    def node(rnd, node, parent, depth, rank, main, accepted, q=0.5):
        return {"arch": "mla", "proposal": "p", "prompt": 0, "round": rnd, "node": node, "parent": parent,
                "depth": depth, "rank": rank, "main_path": main, "q_cond": q, "q_path": q, "reached": True,
                "accepted": accepted, "in_loop": False}
    # round 0: main path 1 -> 2 accepted (goes on); round 1: rank-1 sibling 2 accepted, its child 3 rejected
    rows = [node(0, 1, 0, 1, 0, True, True), node(0, 2, 1, 2, 0, True, True), node(0, 3, 2, 3, 0, True, False),
            node(1, 1, 0, 1, 0, True, False), node(1, 2, 0, 1, 1, False, True), node(1, 3, 2, 2, 0, False, False)]
    t = d2.sibling_table(pd.DataFrame(rows)).iloc[0]
    assert t.after_sibling == 0.0 and t.main_path == pytest.approx(0.5) and t.ratio == 0.0
    assert t.after_sibling_nodes == 1


def test_tau_grid_is_small_and_names_the_proposals():
    rows = [{"arch": "mla", "method": m, "drafter": d, "tree": tr, "budget": b, "temperature": 0.0, "tau": tau}
            for m, d, tr, b, tau in (("dflash", "dflash", "unary", 7, 2.0), ("dflash", "dflash2", "conditional", 7, 2.5),
                                     ("ddtree", "dflash", "unary", 16, 3.0), ("ddtree", "dflash2", "unary", 16, 3.1),
                                     ("ddtree", "dflash2", "conditional", 16, 3.6))]
    g = d2.tau_grid(pd.DataFrame(rows), 0.0)
    assert list(g.columns) == ["DFlash", "DFlash 2 unary", "DFlash 2 conditional"]
    assert g.loc[("mla", 16), "DFlash 2 conditional"] == 3.6 and g.loc[("mla", "linear"), "DFlash"] == 2.0


def test_plots_draw_one_panel_per_target_and_temperature():
    from ddtree_lab.app.plots import plot_after_sibling, plot_dflash2_budgets
    rows = [{"arch": a, "method": "ddtree", "drafter": d, "tree": tr, "budget": b, "temperature": t,
             "tau": 2.0 + b / 100, "speedup": 1.1} for a in ("gdn", "mla") for t in (0.0, 1.0)
            for d, tr in d2.PROPOSALS for b in (4, 16)]
    fig = plot_dflash2_budgets(pd.DataFrame(rows), "speedup")
    assert len(fig.axes) == 4
    assert len(plot_dflash2_budgets(pd.DataFrame(rows), temperature=1.0, arch="mla").axes) == 1
    with pytest.raises(ValueError, match="no rows to draw"):
        plot_dflash2_budgets(pd.DataFrame(rows), temperature=0.3)
    sib = pd.DataFrame([{"arch": "mla", "proposal": p, "main_path": 0.9, "after_sibling": s, "ratio": s / 0.9}
                        for p, s in (("marginal", 0.6), ("conditional", 0.85))])
    assert len(plot_after_sibling(sib).axes) == 1


def _toy_drafters():
    """Drafters on the toy GDN target: its DFlash drafter and a DFlash 2 drafter started from it."""
    from types import SimpleNamespace

    from helpers import toy_dflash2
    target, d2_drafter = toy_dflash2("gdn-toy")
    from helpers import toy_pair
    _, d1_drafter = toy_pair("gdn-toy")
    return d2.Drafters("gdn", {"dflash": SimpleNamespace(target=target, drafter=d1_drafter),
                               "dflash2": SimpleNamespace(target=target, drafter=d2_drafter)})


def test_overlap_is_a_probability_and_one_draw_of_p_from_itself_is_always_accepted():
    """overlap_at: every value in [0, 1], every proposal at every (depth, T); and the overlap
    of a distribution with itself is 1 (the measure, checked on p = q)."""
    import torch
    drafters = _toy_drafters()
    text = torch.randint(0, 63, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    rows = pd.DataFrame(d2.overlap_at(drafters, text, 12, temperatures=(0.5, 1.0), depths=3, block_size=4))
    assert len(rows) == 3 * 2 * 3 and rows.overlap.between(0, 1 + 1e-12).all()
    assert set(rows.proposal) == {"DFlash marginal", "DFlash 2 unary", "DFlash 2 conditional"}
    p = torch.softmax(torch.randn(64, dtype=torch.float64), -1)
    assert abs(float(torch.minimum(p, p).sum()) - 1) < 1e-12


def test_t1_reading_blames_the_shape_only_when_one_draw_is_as_good():
    overlap = pd.DataFrame([{"arch": "gdn", "proposal": p, "temperature": 1.0, "depth": d, "overlap": v}
                            for p, v in (("DFlash 2 conditional", 0.5), ("DFlash 2 unary", 0.5)) for d in (1, 2)])
    shapes = pd.DataFrame([{"arch": "gdn", "proposal": "DFlash marginal", "root_children": 30.0, "max_depth": 2.5},
                           {"arch": "gdn", "proposal": "DFlash 2 conditional", "root_children": 9.0, "max_depth": 6.0}])
    assert "the tree's shape:" in d2.t1_reading(overlap, shapes)
    worse = overlap.assign(overlap=[0.2, 0.2, 0.5, 0.5])  # the conditional q itself is a worse first draw
    assert "do not single out" in d2.t1_reading(worse, shapes)
