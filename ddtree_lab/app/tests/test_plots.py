"""plots.py: summary numbers checked exactly on a hand-built results frame; every figure
builds, saves under a small size, and marks what it claims to mark."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from ddtree_lab.app import plots
from ddtree_lab.experiments.plumbing.summary import summarize
from ddtree_lab.core import tree as tree_mod
from helpers import results_frame

MAX_PNG_BYTES = 200_000


def _one(summary, **where):
    sel = summary
    for k, v in where.items():
        sel = sel[sel[k].apply(lambda x, v=v: x == v)]
    assert len(sel) == 1, f"expected one row for {where}, got {len(sel)}"
    return sel.iloc[0]


@pytest.fixture(scope="module")
def summary():
    return summarize(results_frame())


@pytest.fixture
def figdir(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "FIGURES_DIR", tmp_path / "figures")
    return tmp_path / "figures"


def _saved_ok(fig, name):
    path = plots.save_figure(fig, name)
    assert path.is_file() and path.suffix == ".png"
    assert path.stat().st_size < MAX_PNG_BYTES, f"{name}.png is {path.stat().st_size} bytes"
    return path


# ----------------------------------------------------------------------------- summarize

def test_summarize_shape_and_order(summary):
    # 2 AR + 3 DFlash + 12 DDTree + auto + T=1 configs
    assert len(summary) == 19
    assert (summary["n_prompts"] == 3).all()
    assert list(summary["method"].iloc[:3]) == ["ar", "dflash", "dflash"]  # gdn first, ar first
    gdn_wy = summary[(summary["arch"] == "gdn") & (summary["gdn_mode"] == "wy")
                     & (summary["method"] == "ddtree") & (summary["temperature"] == 0.0)]
    assert list(gdn_wy["budget"]) == [1, 3, 7, 15, "auto"]


def test_summarize_speedup_is_total_tokens_over_total_time(summary):
    ar_mla = _one(summary, arch="mla", method="ar")
    assert ar_mla["tokens_per_s"] == pytest.approx(6.0)  # 24 tokens / 4 s, not mean(8, 4, 8)
    assert ar_mla["speedup"] == pytest.approx(1.0)
    expected = {1: 2.0, 3: 2.5, 7: 4.0, 15: 3.125, "auto": 5.0}
    for budget, speedup in expected.items():
        r = _one(summary, arch="gdn", gdn_mode="wy", method="ddtree", budget=budget, temperature=0.0)
        assert r["speedup"] == pytest.approx(speedup), budget
    assert _one(summary, arch="mla", method="ddtree", budget=15)["speedup"] == pytest.approx(32 / 6)
    assert _one(summary, arch="mla", method="dflash")["speedup"] == pytest.approx(20 / 6)
    hot = _one(summary, arch="gdn", method="ddtree", budget=7, temperature=1.0)
    assert hot["tokens_per_s"] == pytest.approx(16.0) and math.isnan(hot["speedup"])


def test_summarize_matches_ar_and_divergence(summary):
    bad = _one(summary, arch="gdn", gdn_mode="naive", method="ddtree", budget=15)
    assert bad["matches_ar"] == pytest.approx(2 / 3)
    assert bad["first_divergence"] == pytest.approx((8 + 5 + 8) / 3)
    good = summary[(summary["temperature"] == 0.0) & ~((summary["gdn_mode"] == "naive") & (summary["budget"] == 15))]
    assert (good["matches_ar"] == 1.0).all() and (good["first_divergence"] == 8.0).all()
    hot = _one(summary, arch="gdn", method="ddtree", budget=7, temperature=1.0)
    assert math.isnan(hot["matches_ar"]) and math.isnan(hot["first_divergence"])


def test_summarize_tau_and_tree_size(summary):
    r = _one(summary, arch="gdn", gdn_mode="wy", method="ddtree", budget=7, temperature=0.0)
    assert r["tau_prompt_mean"] == pytest.approx(1.0 + 3 / 2 + 0.1)  # mean over prompts of 2.5 + 0.1 p
    assert r["mean_tree_size"] == pytest.approx(7.0)
    auto = _one(summary, arch="gdn", gdn_mode="wy", budget="auto")
    assert auto["mean_tree_size"] == pytest.approx(35 / 5)
    assert math.isnan(_one(summary, arch="gdn", method="ar")["mean_tree_size"])


# ----------------------------------------------------------------------------- budget curves

def test_curve_peaks(summary):
    assert plots.curve_peaks(summary, "gdn", "tokens_per_s") == {
        "wy": (7, pytest.approx(32.0)), "naive": (3, pytest.approx(16.0))}
    assert plots.curve_peaks(summary, "gdn", "speedup", gdn_modes=["naive"]) == {"naive": (3, pytest.approx(2.0))}
    assert plots.curve_peaks(summary, "mla", "speedup") == {plots.PLAIN: (15, pytest.approx(32 / 6))}
    assert plots.curve_peaks(summary, "gdn", "tokens_per_s", temperature=1.0) == {"wy": (7, pytest.approx(16.0))}


def test_plot_budget_curves_marks_peaks_auto_and_references(summary, figdir):
    fig = plots.plot_budget_curves(summary, "gdn", mark_budget=7)
    assert len(fig.axes) == 3
    speed_ax = fig.axes[1]
    notes = [t.get_text() for t in speed_ax.texts]
    assert "highest 32 @ 7" in notes and "highest 16 @ 3" in notes   # 'peak' only where intervals tell it apart
    stars = [l for l in speed_ax.lines if l.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [7.0] and stars[0].get_ydata()[0] == pytest.approx(40.0)
    labels = speed_ax.get_legend_handles_labels()[1]
    assert {"ddtree wy", "ddtree naive", "dflash wy", "dflash naive", "ar"} <= set(labels)
    assert "auto wy (at its mean tree, 7.0 nodes)" in labels
    assert any(l.startswith("budget 7 = 8-token") for l in labels)
    assert speed_ax.get_xscale() == "log"
    default = plots.plot_budget_curves(summary, "gdn")  # mark_budget 31 lies outside budgets 1-15: no line
    assert not any(l.startswith("budget 31") for l in default.axes[1].get_legend_handles_labels()[1])
    assert default.axes[1].get_xlim()[1] < 31
    _saved_ok(fig, "budget_gdn")


def test_auto_outside_the_range_is_said_not_drawn(summary):
    fig = plots.plot_budget_curves(summary[summary["budget"].isin([0, 1, 3, "auto"])], "gdn")
    (star,) = [l for l in fig.axes[0].lines if l.get_marker() == "*"]
    assert len(star.get_xdata()) == 0
    assert star.get_label() == "auto wy (at its mean tree, 7.0 nodes): outside the range shown"


@pytest.mark.parametrize("lo, hi, ticks", [(1, 256, [1, 4, 16, 64, 256]), (1, 15, [1, 2, 4, 8]),
                                           (16, 32, [16, 32]), (31, 32, [31, 32]), (16, 31, [16, 31]),
                                           (64, 256, [64, 128, 256]), (8, 8, [8])],
                         ids=lambda v: str(v))
def test_budget_ticks(lo, hi, ticks):
    assert plots.budget_ticks(lo, hi) == ticks


BUDGETS = [1, 2, 4, 8, 16, 31, 32, 64, 128, 256]


def wide_summary():
    """A summary with the notebooks' budgets (1 ... 256, 31 and 32 both), an auto row at a
    mean tree of 14.8 nodes, DFlash and AR: what the budget figures of notebook 05 draw."""
    import pandas as pd
    base = {"arch": "gdn", "gdn_mode": "wy", "block_size": 16, "temperature": 0.0, "max_new_tokens": 64}
    rows = [{**base, "method": "ar", "gdn_mode": "wy", "budget": 0, "block_size": 0, "tau": 1.0,
             "tokens_per_s": 185.0, "speedup": 1.0, "mean_tree_size": np.nan},
            {**base, "method": "dflash", "budget": 15, "tau": 7.0, "tokens_per_s": 258.0, "speedup": 1.39,
             "mean_tree_size": 15.0},
            {**base, "method": "ddtree", "budget": "auto", "tau": 7.4, "tokens_per_s": 258.0, "speedup": 1.4,
             "mean_tree_size": 14.8}]
    for b in BUDGETS:
        tps = 280 - 40 * abs(math.log2(b) - 4)
        rows.append({**base, "method": "ddtree", "budget": b, "tau": 1 + math.log2(b + 1) * 0.9,
                     "tokens_per_s": tps, "speedup": tps / 185.0, "mean_tree_size": float(b)})
    return pd.DataFrame(rows)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5


@pytest.mark.parametrize("lo, hi", [(1, 256), (16, 32), (31, 32), (16, 31), (64, 256), (1, 16), (2, 128)],
                         ids=lambda v: str(v))
def test_budget_figure_labels_never_collide_and_notes_stay_inside(lo, hi):
    """Every budget range the explorer can choose: x tick labels pairwise apart, every
    annotation inside its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    summary = wide_summary()
    keep = [b == "auto" or b == 0 or m == "dflash" or lo <= int(b) <= hi
            for b, m in zip(summary["budget"], summary["method"])]
    fig = plots.plot_budget_curves(summary[keep], "gdn")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        assert len(labels) >= 1
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not _overlaps(a, b), [t.get_text() for t in labels]
        inside = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            assert inside.x0 - 1 <= box.x0 and box.x1 <= inside.x1 + 1, text.get_text()
            assert inside.y0 - 1 <= box.y0 and box.y1 <= inside.y1 + 1, text.get_text()


def test_show_figure_saves_where_smoke_says_and_returns_nothing(tmp_path, monkeypatch):
    """SMOKE: the smoke folder; figures/ only from the main job (MAIN_JOB_ENV, set by
    notebooks.run_all at defaults); any other run (JupyterLab, a tweak): the ignored local folder."""
    import matplotlib.pyplot as plt
    monkeypatch.setattr(plots, "FIGURES_DIR", tmp_path / "figures")
    monkeypatch.setattr(plots, "SMOKE_FIGURES_DIR", tmp_path / "smoke")
    monkeypatch.setattr(plots, "LOCAL_FIGURES_DIR", tmp_path / "figures" / "local")
    monkeypatch.setenv(plots.MAIN_JOB_ENV, "1")
    fig = plots.plot_reliability([0.5], [0.5], [3])
    assert plots.show_figure(fig, "smoke_one", smoke=True) is None
    assert (tmp_path / "smoke" / "smoke_one.png").is_file() and not (tmp_path / "figures").exists()
    plots.show_figure(fig, "real_one", smoke=False)
    assert (tmp_path / "figures" / "real_one.png").read_bytes() == plots.figure_png(fig)
    monkeypatch.delenv(plots.MAIN_JOB_ENV)   # a notebook run in JupyterLab, with PROMPT or BUDGET changed
    plots.show_figure(fig, "tweaked", smoke=False)
    assert (tmp_path / "figures" / "local" / "tweaked.png").is_file() and not (tmp_path / "figures" / "tweaked.png").exists()
    pyfig, _ = plt.subplots()
    plots.show_figure(pyfig, "pyplot_one", smoke=True)
    assert not plt.fignum_exists(pyfig.number)  # closed: the inline backend cannot show it twice


def test_plot_budget_curves_one_mode_one_metric(summary, figdir):
    fig = plots.plot_budget_curves(summary, "mla", metrics=("speedup",), gdn_modes=["wy"], mark_budget=None)
    (ax,) = fig.axes
    curves = [l for l in ax.lines if l.get_label() == "ddtree"]
    assert len(curves) == 1 and list(curves[0].get_xdata()) == [1, 3, 7, 15]
    assert "highest 5.33 @ 15" in [t.get_text() for t in ax.texts]   # no intervals given: never "peak"
    _saved_ok(fig, "budget_mla")


# ----------------------------------------------------------------------------- trees

def test_tree_layout_small():
    x, y = plots.tree_layout([-1, 0, 0, 1])
    assert x == [0.0, 1.0, 1.0, 2.0]
    assert y == [-0.5, 0.0, -1.0, 0.0]


def test_draw_built_tree_with_path(figdir):
    torch.manual_seed(0)
    tree = tree_mod.build_tree(torch.randn(5, 30) * 2, root_token=3, budget=63)
    choice = tree.tokens.clone()
    path = tree.path_to(int(tree.depths.argmax()))
    for parent, child in zip(path, path[1:]):
        choice[parent] = tree.tokens[child]
    accepted, _ = tree_mod.accept(tree, choice)
    assert accepted == path
    labels = [f"t{t} $x " for t in tree.tokens.tolist()]
    fig = plots.draw_tree(tree, labels=labels, path=accepted)
    ax = fig.axes[0]
    assert len(ax.texts) == len(tree)
    (edges,) = ax.collections
    assert len(edges.get_linewidths()) == tree.num_nodes
    _saved_ok(fig, "tree_built")


def test_draw_chain_and_truncation(figdir):
    chain = tree_mod.chain_tree(torch.arange(10), root_token=0, log_probs=torch.full((10,), -0.3))
    fig = plots.draw_tree(chain, path=[0, 1, 2, 3])
    assert len(fig.axes[0].texts) == 11
    _saved_ok(fig, "tree_chain")
    big = tree_mod.build_tree(torch.randn(6, 50), root_token=0, budget=200)
    deep = int(big.depths.argmax())
    fig = plots.draw_tree(big, path=big.path_to(deep), max_nodes=40)
    assert 40 <= len(fig.axes[0].texts) < len(big)
    assert "shown" in fig.axes[0].get_title()


# ----------------------------------------------------------------------------- studies

def test_error_scatter_and_reliability(figdir):
    rng = np.random.default_rng(0)
    x = np.arange(40)
    y = np.abs(rng.normal(size=40)) * 1e-6
    y[:3] = 0.0  # exact zeros are drawn at the floor, marked and counted in the legend
    fig = plots.plot_error_scatter(x, y, hue=np.where(x % 2, "fork", "wy"), title="leakage")
    assert fig.axes[0].get_yscale() == "log" and len(fig.axes[0].collections) == 3
    assert "exact 0 (drawn at the axis floor): 3" in [t.get_text() for t in fig.legends[0].get_texts()]
    _saved_ok(fig, "errors")
    pred = np.linspace(0.05, 0.95, 10)
    fig = plots.plot_reliability(pred, pred, np.r_[np.zeros(1), np.full(9, 50)])
    assert "ECE 0.000" in fig.axes[0].get_title()
    _saved_ok(fig, "reliability")


def test_use_style_sets_dpi():
    import matplotlib as mpl
    with mpl.rc_context():
        plots.use_style()
        assert mpl.rcParams["figure.dpi"] == plots.DPI


# ----------------------------------------------------------------------------- loops, T, real text

def _with_loop_tags(frame):
    """results_frame with loop tags: the second half of every DDTree/DFlash row's rounds loops."""
    def tag(m):
        m = dict(m)
        n = len(m["acceptance_lengths"])
        m["round_looping"] = [i >= n // 2 for i in range(n)]
        m["round_copyable"] = [i >= n // 3 for i in range(n)]
        m["ends_in_loop"] = True
        return m
    return frame.assign(_metrics=frame["_metrics"].map(tag))


def test_loop_split_draws_all_rounds_outside_loops_and_t1(summary):
    s = summarize(_with_loop_tags(results_frame()))
    fig = plots.plot_loop_split(s, "gdn", block_size=4)
    ax_tau, ax_loop = fig.axes[:2]
    labels = [line.get_label() for line in ax_tau.get_lines() if line.get_label().startswith("DDTree")]
    assert labels == ["DDTree T = 0", "DDTree T = 0 outside loops", "DDTree T = 1"]   # short: a legend smaller than the plot
    shares = [line.get_ydata() for line in ax_loop.get_lines() if not line.get_label().startswith("_")]
    assert all(np.allclose(y, 0.5) for y in shares)  # half of every row's rounds were tagged


def test_loop_split_draws_every_stored_temperature(figdir):
    import pandas as pd
    frame = results_frame()
    sampled = frame[frame.temperature == 1.0]
    frame = pd.concat([frame] + [sampled.assign(temperature=t) for t in (0.3, 0.6)], ignore_index=True)
    fig = plots.plot_loop_split(summarize(_with_loop_tags(frame)), "gdn", block_size=4)
    labels = [line.get_label() for line in fig.axes[0].get_lines() if line.get_label().startswith("DDTree")]
    assert labels == ["DDTree T = 0", "DDTree T = 0 outside loops", "DDTree T = 0.3", "DDTree T = 0.6", "DDTree T = 1"]
    assert "T = 0, 0.3, 0.6, 1" in fig._suptitle.get_text()
    _saved_ok(fig, "loops_temperatures")


def test_loop_split_modes_draws_all_rounds_and_outside_loops_per_mode(figdir):
    """Issue 67: 8 series on one short panel. All rounds and outside loops now have a panel each
    (one line per series, one y range), the loop share a third."""
    s = summarize(_with_loop_tags(results_frame()))
    s = s[s.temperature == 0]
    fig = plots.plot_loop_split_modes(s, title="gdn + mla, block 4")
    for ax in fig.axes[:2]:
        assert [line.get_label() for line in ax.get_lines()] == ["gdn naive", "gdn wy", "mla"]
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert [a.get_title() for a in fig.axes[:2]] == ["acceptance, all rounds", "acceptance, outside loops"]
    shares = [line.get_ydata() for line in fig.axes[2].get_lines()]
    assert len(shares) == 3 and all(np.allclose(y, 0.5) for y in shares)
    _saved_ok(fig, "loops_modes")
    with pytest.raises(ValueError, match="one temperature"):
        plots.plot_loop_split_modes(summarize(results_frame()))


def test_continuation_figure_leaves_out_thin_points(figdir):
    import pandas as pd
    rows = [{"arch": "gdn", "depth": d, "group": g, "predicted": 0.8, "observed": o, "count": c}
            for d in (1, 2, 3) for g, o, c in (("main_path", 0.9, 50), ("after_sibling", 0.5, 10 if d < 3 else 2))]
    table = pd.DataFrame(rows)
    fig = plots.plot_continuation(table, in_loops=table.assign(observed=1.0))
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["right after a rank >= 1 sibling: observed"].get_xdata()) == [1, 2]   # depth 3: 2 nodes only
    assert list(lines["main path: observed"].get_ydata()) == [0.9] * 3
    assert "main path, in loops: observed" in lines
    _saved_ok(fig, "continuation")


def test_teacher_forced_figure_puts_real_text_beside_free_running(summary):
    import pandas as pd
    tf = pd.DataFrame([{"arch": "mla", "block_size": 4, "method": "dflash", "budget": 3, "positions": 9, "tau": 1.2}]
                      + [{"arch": "mla", "block_size": 4, "method": "ddtree", "budget": b, "positions": 9, "tau": t}
                         for b, t in [(1, 1.1), (3, 1.3), (7, 1.5)]])
    fig = plots.plot_teacher_forced(tf, summary, block_size=4)
    labels = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert labels == ["mla: real text, teacher-forced (9 positions)", "mla: DFlash, real text, teacher-forced",
                      "mla: free-running, T = 0"]   # the dashed DFlash level named in the legend
    assert len(plots.figure_png(fig)) < MAX_PNG_BYTES


def test_sibling_gap_draws_predicted_and_observed_bars_per_arch():
    from ddtree_lab.app.plots import plot_sibling_gap
    gaps = pd.DataFrame([{"arch": a, "group": g, "predicted": p, "observed": o}
                         for a in ("gdn", "mla") for g, p, o in (("rank0", 0.9, 0.8), ("rank1+", 0.3, 0.1))])
    fig = plot_sibling_gap(gaps)
    bars = [r.get_height() for r in fig.axes[0].patches]
    assert len(bars) == 8 and sorted(bars)[-1] == 0.9 and 0.1 in bars


# ----------------------------------------------------------------------------- one palette

def _colors(fig, label):
    """RGBA colours of every line labelled ``label`` in the figure."""
    from matplotlib.colors import to_rgba
    return {to_rgba(l.get_color()) for ax in fig.axes for l in ax.lines if l.get_label() == label}


def test_one_colour_per_method_and_target_across_figures(summary):
    from matplotlib.colors import to_rgba
    dflash = to_rgba(plots.METHOD_STYLES["dflash"]["color"])
    table = pd.DataFrame([{"arch": "gdn", "temperature": 0.0, "concurrency": c, "best_budget": 4, "dflash_speedup": 1.2,
                           "best_speedup": 1.5, "auto_speedup": 1.4} for c in (1, 4)])
    conc = pd.DataFrame([{"arch": "gdn", "temperature": 0.0, "concurrency": 4, "method": m, "budget": b,
                          "tokens_per_s": 10.0, "speedup": 1.1, "mean_tree_size": 4.0}
                         for m, b in (("dflash", 0), ("ddtree", 4), ("ddtree", 16))])
    assert _colors(plots.plot_concurrency_speedup(table, ["gdn"]), "DFlash") == {dflash}
    assert _colors(plots.plot_concurrency_budgets(conc, "gdn", 0.0, 4), "DFlash") == {dflash}
    assert _colors(plots.plot_budget_curves(summary, "mla"), "dflash") == {dflash}
    mla = to_rgba(plots.TARGET_STYLES["mla"]["color"])
    rows = summary[(summary.method == "ddtree") & (summary.budget != "auto")].astype({"budget": int})
    assert _colors(plots.plot_target_curves(rows[rows.gdn_mode.isin(["wy"])], 4), "mla") == {mla}
    assert _colors(plots.plot_mode_curves(rows[rows.temperature == 0], {"tau": ("tau", "")}), "gdn naive") == {
        to_rgba(plots.METHOD_STYLES["naive"]["color"])}


def test_lenses_look_different_in_the_legend():
    """plot_loop_split (one mode): all rounds and outside loops drawn apart; no debug-like title."""
    s = summarize(_with_loop_tags(results_frame()))
    fig = plots.plot_loop_split(s, "gdn", block_size=4)
    legend = fig.legends[0]
    assert "offset" not in legend.get_title().get_text()   # issue 67: no 'series offset sideways' title
    styles = {h.get_linestyle() for h in legend.legend_handles if hasattr(h, "get_linestyle")}
    assert len(styles) > 1


# ----------------------------------------------------------------------------- issue 60: figures as listed

def test_figures_outside_the_main_job_go_to_an_ignored_folder():
    """figures/local/ (every run but the main job at defaults) is git-ignored: a tweak and rerun
    leaves git status clean."""
    import shutil
    import subprocess
    from ddtree_lab.common import ROOT
    assert plots.LOCAL_FIGURES_DIR == plots.FIGURES_DIR / "local"
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    out = subprocess.run(["git", "check-ignore", "-q", "figures/local/00_quickstart_tree.png"], cwd=ROOT)
    assert out.returncode == 0, "figures/local/ is not git-ignored"


def test_run_all_marks_only_the_main_job(monkeypatch):
    """run_all at defaults runs each notebook as the main job (figures/); a SMOKE run does not."""
    from ddtree_lab.app import notebooks
    calls = []
    monkeypatch.setattr(notebooks, "run_notebook", lambda p, **kw: calls.append(kw) or __import__("nbformat").v4.new_notebook())
    notebooks.run_all(smoke=False, only=("00",))
    notebooks.run_all(smoke=True, only=("00",))
    assert calls == [{"main_job": True, "SMOKE": False}, {"main_job": False, "SMOKE": True}]


def test_a_token_with_no_text_is_drawn_by_its_id():
    """00's tree: a token that decodes to '' was an edge to nothing."""
    torch.manual_seed(0)
    tree = tree_mod.build_tree(torch.randn(3, 12) * 2, root_token=3, budget=7)
    labels = [""] * len(tree.tokens)
    fig = plots.draw_tree(tree, labels=labels)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == len(tree.tokens) and all(texts)
    assert texts[0] == f"#{int(tree.tokens[0])}"


def test_training_curves_give_each_drafter_kind_its_panel():
    """00: DFlash 2's curves were drawn in DFlash's colour, under its label, in its panel."""
    log = pd.DataFrame({"step": [0, 10], "tokens": [0, 1e6], "train_loss": [3.0, 2.0], "val_loss": [3.2, 2.4]})
    curves = {f"{a}-{k}": log for a in ("gdn", "mla") for k in ("target", "drafter", "drafter2")}
    fig = plots.plot_training_curves(curves)
    assert [ax.get_title() for ax in fig.axes] == ["targets", "DFlash drafters", "DFlash 2 drafters"]
    assert fig.axes[1].get_ylim() == fig.axes[2].get_ylim()   # the drafters compare: one y range
    assert all(len(ax.lines) == 4 for ax in fig.axes)          # per target: train and held out


def test_tied_budgets_draw_a_band_and_no_line_jumps_between_them():
    """07: a line through the best budget alone jumped between budgets the noise cannot tell apart."""
    table = pd.DataFrame([{"arch": "gdn", "temperature": 0.0, "concurrency": c, "best_budget": b, "tied_budgets": t}
                          for c, b, t in ((1, 16, (4, 8, 16)), (2, 4, (4, 8, 16)), (4, 16, (4, 16)), (8, 4, (4,)))])
    fig = plots.plot_best_budget(table)
    ax = fig.axes[0]
    joined = [l for l in ax.lines if len(l.get_xdata()) > 1 and l.get_linestyle() not in ("None", "none", "")]
    assert joined == []                                         # the best budgets are markers, never joined
    bars = ax.collections[0].get_segments()
    assert [(seg[0][1], seg[1][1]) for seg in bars] == [(4, 16), (4, 16), (4, 16), (4, 4)]   # the tied budgets


def test_verify_cost_draws_naive_apart_from_wy_and_names_each_mode_once():
    """04: the naive line hidden under wy, and 'fork' twice in the legend."""
    cost = pd.DataFrame({"budget": [1, 16, 64, 256], "naive_ms": [7.3, 8.6, 14.1, 50.9], "fork_ms": [8.1, 10.5, 16.1, 50.1],
                         "wy_ms": [7.0, 8.6, 13.8, 47.7], "stock_ms": [10.3, 11.5, 17.2, 37.4],
                         "fork_state_bytes": [2e5, 2e6, 6e6, 2.5e7], "wy_nxn_bytes": [5e3, 6e4, 4e5, 6e6]})
    fig = plots.plot_verify_cost(cost)
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sum("fork" in n for n in names) == 1 and sum("wy" in n for n in names) == 1
    lines = {l.get_label(): l.get_xdata() for l in fig.axes[0].lines}
    assert not np.allclose(lines["naive"], lines["wy"])          # offset sideways: both visible


def test_sibling_gap_writes_every_bar_value_on_a_log_axis():
    """06: rank-1+ bars of a few percent were unreadable beside rank-0 bars near 1."""
    gaps = pd.DataFrame([{"arch": a, "group": g, "predicted": p, "observed": o}
                         for a in ("gdn", "mla") for g, p, o in (("rank0", 0.63, 0.85), ("rank1+", 0.043, 0.024))])
    ax = plots.plot_sibling_gap(gaps).axes[0]
    assert ax.get_yscale() == "log"
    assert {"0.024", "0.043", "0.85", "0.63"} <= {t.get_text() for t in ax.texts}


def test_dflash2_panels_share_one_y_range():
    """08: six panels, each with its own y range."""
    rows = [{"arch": a, "temperature": t, "method": "ddtree", "drafter": "dflash", "tree": "unary", "budget": b,
             "tau": 2 + b / 64 + t + (a == "mla"), "speedup": 1.0} for a in ("gdn", "mla") for t in (0.0, 1.0)
            for b in (4, 64)]
    fig = plots.plot_dflash2_budgets(pd.DataFrame(rows), "tau")
    assert len({ax.get_ylim() for ax in fig.axes}) == 1


def test_loop_share_axis_is_cut_to_its_data():
    """The loop-share panels plotted about 0.05 on a 0-1 axis."""
    from matplotlib.figure import Figure
    ax = Figure().subplots()
    ax.plot([1, 2, 4], [0.05, 0.04, 0.06])
    plots.share_top(ax)
    assert ax.get_ylim() == (0, pytest.approx(0.075))
    ax.plot([1, 2], [0.9, 0.95])
    plots.share_top(ax)
    assert ax.get_ylim()[1] == 1.0
