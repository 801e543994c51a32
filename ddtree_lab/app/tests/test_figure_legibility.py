"""Every figure legible in a 1200 px notebook column (issue #26 item 3).

Each figure function of plots.py (and the explorers' figures) is drawn on a small synthetic
frame, then checked: (a) tick labels shown >= 9 pt, where a PNG W px wide is shown scaled by
min(1, 1200 / W); (b) at most 3 panels a row; (c) no legend box covers a plotted point (a
Line2D vertex or a scatter offset inside its axes); (d) no '^' in a tick label (no 2^k, no
10^k). Three mutants (5 pt ticks, 4 panels a row, a legend over data) must fail them.
"""
import math
import struct

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ddtree_lab.app import plots, widgets
from ddtree_lab.core import tree as tree_mod
from ddtree_lab.experiments.plumbing.summary import summarize
from helpers import results_frame

MIN_SHOWN_PT, MAX_PER_ROW = 9.0, 3


# ----------------------------------------------------------------------------- the checks

def shown_scale(fig) -> float:
    """min(1, 1200 / width) of the PNG the notebook shows (width read from its IHDR)."""
    width = struct.unpack(">I", plots.figure_png(fig)[16:20])[0]
    return min(1.0, plots.NOTEBOOK_PX / width)


def _tick_labels(fig):
    for ax in fig.axes:
        for t in ax.get_xticklabels() + ax.get_yticklabels():
            if t.get_visible() and t.get_text():
                yield t


def small_ticks(fig) -> list[str]:
    """(a) tick labels shown under 9 pt."""
    scale = shown_scale(fig)
    return [f"{t.get_text()!r} {t.get_fontsize() * scale:.1f} pt" for t in _tick_labels(fig)
            if t.get_fontsize() * scale < MIN_SHOWN_PT - 1e-6]


def crowded_rows(fig) -> list[int]:
    """(b) the panel counts of rows holding more than 3 panels (panels whose vertical spans overlap)."""
    boxes = [ax.get_position() for ax in fig.axes if ax.get_visible()]
    counts = [sum(b.y0 < a.y1 and a.y0 < b.y1 for b in boxes) for a in boxes]
    return [c for c in counts if c > MAX_PER_ROW]


def _points(ax) -> np.ndarray:
    """Display coordinates [n, 2] of every drawn data point of ``ax``: Line2D vertices and
    scatter offsets, finite and inside the axes (clipped ones are not drawn)."""
    pts = [line.get_transform().transform(line.get_xydata()) for line in ax.lines if len(line.get_xydata())]
    pts += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections
            if len(c.get_offsets()) and c.get_offset_transform() is not None]
    if not pts:
        return np.zeros((0, 2))
    pts = np.concatenate(pts)
    box = ax.get_window_extent()
    ok = np.isfinite(pts).all(1) & (pts[:, 0] >= box.x0 - 1) & (pts[:, 0] <= box.x1 + 1) \
        & (pts[:, 1] >= box.y0 - 1) & (pts[:, 1] <= box.y1 + 1)
    return pts[ok]


def covered_points(fig) -> list[str]:
    """(c) legends (figure and axes) whose window extent holds a plotted point."""
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    bad = []
    for leg in legends:
        box = leg.get_window_extent()
        for ax in fig.axes:
            pts = _points(ax)
            inside = (pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)
            if inside.any():
                bad.append(f"legend covers {int(inside.sum())} point(s) of {ax.get_title()!r}")
    return bad


def power_ticks(fig) -> list[str]:
    """(d) tick labels written as powers (2^k, 10^k)."""
    return [t.get_text() for t in _tick_labels(fig) if "^" in t.get_text()]


def problems(fig) -> dict[str, list]:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    found = {"ticks": small_ticks(fig), "rows": crowded_rows(fig), "legend": covered_points(fig),
             "powers": power_ticks(fig)}
    return {k: v for k, v in found.items() if v}


# ----------------------------------------------------------------------------- synthetic frames

def _loop_summary():
    def tag(m):
        n = len(m["acceptance_lengths"])
        return {**m, "round_in_loop": [i >= n // 2 for i in range(n)], "ends_in_loop": True}
    frame = results_frame()
    return summarize(frame.assign(_metrics=frame["_metrics"].map(tag)))


def _dflash2_summary():
    rows = []
    for arch in ("gdn", "mla"):
        for t in (0.0, 0.5, 1.0):
            for drafter, tree in (("dflash", "unary"), ("dflash2", "unary"), ("dflash2", "conditional")):
                rows += [{"arch": arch, "temperature": t, "method": "ddtree", "drafter": drafter, "tree": tree,
                          "budget": b, "tau": 2 + math.log2(b) * 0.4, "speedup": 1 + math.log2(b) * 0.2}
                         for b in (4, 16, 64, 256)]
            rows += [{"arch": arch, "temperature": t, "method": "dflash", "drafter": d, "tree": "unary", "budget": 0,
                      "tau": 2.5, "speedup": 1.4} for d in ("dflash", "dflash2")]
    return pd.DataFrame(rows)


def _concurrency():
    table = pd.DataFrame([{"arch": a, "temperature": t, "concurrency": c, "best_budget": b, "dflash_speedup": 1.5,
                           "best_speedup": 2 / math.sqrt(c), "auto_speedup": 1.9 / math.sqrt(c)}
                          for a in ("gdn", "mla") for t in (0.0, 1.0) for c, b in ((1, 64), (4, 16), (16, 4))])
    summary = pd.DataFrame([{"arch": "gdn", "temperature": 0.0, "concurrency": 4, "method": m, "budget": b,
                             "tokens_per_s": 100 + 5 * i, "speedup": 1 + 0.1 * i, "mean_tree_size": 12.0}
                            for i, (m, b) in enumerate([("ar", 0), ("dflash", 0), ("ddtree", 4), ("ddtree", 16),
                                                        ("ddtree", 64), ("ddtree", "auto")])])
    return table, summary


def _tree_rows():
    modes = [("gdn", m) for m in ("naive", "fork", "wy")] + [("mla", "wy")]
    return pd.DataFrame([{"arch": a, "gdn_mode": m, "method": "ddtree", "block_size": 16, "temperature": 0.0,
                          "budget": b, "tau": 2 + math.log2(b) * (0.1 if m == "naive" else 0.4),
                          "speedup": 1 + math.log2(b) * 0.2, "matches_ar": 0.5 if m == "naive" else 1.0}
                         for a, m in modes for b in (1, 4, 16, 64, 256)])


def _figures():
    """{name: a zero-argument builder} for every figure function (and the explorers' figures)."""
    summary, loops = summarize(results_frame()), _loop_summary()
    table, conc = _concurrency()
    rng = np.random.default_rng(0)
    errors = pd.DataFrame({"setting": np.repeat(["float64", "float32", "bfloat16"], 20),
                           "err": np.r_[np.zeros(20), rng.random(40) * 1e-5]})
    cont = pd.DataFrame([{"arch": a, "depth": d, "group": g, "predicted": 0.8, "observed": 0.7, "count": 50}
                         for a in ("gdn", "mla") for d in (1, 2, 3) for g in ("main_path", "after_sibling")])
    tf = pd.DataFrame([{"arch": "mla", "block_size": 4, "method": "dflash", "budget": 3, "positions": 9, "tau": 1.2}]
                      + [{"arch": "mla", "block_size": 4, "method": "ddtree", "budget": b, "positions": 9, "tau": t}
                         for b, t in [(1, 1.1), (3, 1.3), (7, 1.5)]])
    gaps = pd.DataFrame([{"arch": a, "group": g, "predicted": p, "observed": o}
                         for a in ("gdn", "mla") for g, p, o in (("rank0", 0.9, 0.8), ("rank1+", 0.3, 0.1))])
    logs = {f"{a}-{k}": pd.DataFrame({"step": [0, 10, 20], "tokens": [0, 1e6, 2e6], "train_loss": [3, 2, 1.5],
                                      "val_loss": [3.1, 2.2, 1.8]}) for a in ("gdn", "mla") for k in ("target", "drafter")}
    curve = pd.DataFrame([{"arch": a, "rejected": k, "prompt": p, "max_logit_error": 0.0 if a == "mla" else 0.1 * k,
                           "tv_t1": 0.0 if a == "mla" else 0.01 * k} for a in ("gdn", "mla") for k in range(8)
                          for p in range(2)])
    div = pd.DataFrame({"arch": "gdn", "block_size": [4, 4, 16, 16], "first_divergence": [10, None, 30, 50]})
    ref = pd.DataFrame([{"arch": a, "method": m, "budget": b, "tau": 2.0, "tokens_per_s": 100.0 + i,
                         "matches_ar": 0.5 if m == "official" and a == "gdn" else 1.0}
                        for a in ("gdn", "mla") for i, (m, b) in
                        enumerate([("ar", 0), ("official", 0), ("dflash", 0), ("ddtree", 16), ("ddtree", 64)])])
    sib = pd.DataFrame([{"arch": a, "proposal": p, "main_path": 0.8, "after_sibling": 0.4, "ratio": 0.5}
                        for a in ("gdn", "mla") for p in ("marginal", "unary", "conditional")])
    cost = pd.DataFrame({"budget": [1, 16, 64, 256], "naive_ms": [1, 2, 3, 4], "fork_ms": [2, 3, 4, 6],
                         "wy_ms": [1, 2, 3, 5], "stock_ms": [1, 1.5, 2, 3], "fork_state_bytes": [1e6, 1e7, 4e7, 2e8],
                         "wy_nxn_bytes": [1e3, 1e5, 2e6, 3e7]})
    tree_rows = _tree_rows()
    exact = pd.Series([3, 2, 1, 0], index=pd.MultiIndex.from_product([[0, 1], [16, 64]], names=["prompt", "budget"]))
    torch.manual_seed(0)
    tree = tree_mod.build_tree(torch.randn(5, 30) * 2, root_token=3, budget=63)
    grid = pd.DataFrame([{"arch": a, "source": src, "share": sh, "steps": st, "labels": lab, "tf_dflash_tau": x,
                          "decode_dflash_tau": y} for a in ("gdn", "mla") for src, sh, st, lab, x, y in
                         [("previous", 0.0, 3000, "hard", 1.16, 2.8), ("shipped", 0.5, 3000, "soft", 1.42, 2.4),
                          ("trained", 0.25, 6000, "mixed", 1.45, 2.7), ("trained", 0.0, 3000, "soft", 1.2, 2.3)]])
    nodes = pd.DataFrame({"arch": np.repeat(["gdn", "mla"], 200), "q_cond": rng.random(400),
                          "accepted": rng.random(400) < 0.5, "reached": True})
    phases = pd.DataFrame([{"arch": a, "method": m, "budget": b, "total_ms": t, **{f"{p}_ms": v for p, v in zip(
        ("draft", "tree", "verify", "accept", "commit"), ph)}} for a in ("mla", "gdn") for m, b, t, ph in
        [("official", 7, 15.0, [np.nan] * 5), ("dflash", 7, 17.7, [3.4, 0.2, 12.7, 0.1, 0.2]),
         ("ddtree", 16, 20.0, [3.4, 0.7, 14.6, 0.2, 0.3])]]).assign(
        target_fwd_ms=10.0, drafter_fwd_ms=3.0, rest_ms=2.0)
    return {
        "plot_budget_curves": lambda: plots.plot_budget_curves(summary, "gdn", mark_budget=7),
        "plot_loop_split": lambda: plots.plot_loop_split(loops, "gdn", block_size=4),
        "plot_loop_split_modes": lambda: plots.plot_loop_split_modes(loops[loops.temperature == 0]),
        "plot_continuation": lambda: plots.plot_continuation(cont, in_loops=cont),
        "plot_teacher_forced": lambda: plots.plot_teacher_forced(tf, summary, block_size=4),
        "draw_tree": lambda: plots.draw_tree(tree),
        "plot_error_scatter": lambda: plots.plot_error_scatter(np.arange(1, 41), np.r_[np.zeros(3), rng.random(37)],
                                                          hue=np.arange(40) % 3, xlog=True),
        "plot_error_strip": lambda: plots.plot_error_strip(errors, ["float64", "float32", "bfloat16"], "err", "strip"),
        "plot_sibling_gap": lambda: plots.plot_sibling_gap(gaps),
        "plot_reliability": lambda: plots.plot_reliability(np.linspace(0.05, 0.95, 10), np.linspace(0.05, 0.95, 10),
                                                      np.full(10, 20)),
        "plot_best_budget": lambda: plots.plot_best_budget(table),
        "plot_concurrency_speedup": lambda: plots.plot_concurrency_speedup(table, ["gdn", "mla"]),
        "plot_concurrency_budgets": lambda: plots.plot_concurrency_budgets(conc, "gdn", 0.0, 4),
        "plot_training_curves": lambda: plots.plot_training_curves(logs),
        "plot_chain_leak": lambda: plots.plot_chain_leak(curve, div, 64),
        "plot_reference_loop": lambda: plots.plot_reference_loop(ref, ["gdn", "mla"]),
        "plot_dflash2_budgets@six_panels": lambda: plots.plot_dflash2_budgets(_dflash2_summary(), "tau"),
        "plot_dflash2_budgets@speedup_four_panels": lambda: plots.plot_dflash2_budgets(
            _dflash2_summary()[lambda d: d.temperature < 1], "speedup"),
        "plot_after_sibling": lambda: plots.plot_after_sibling(sib),
        "plot_mode_curves": lambda: plots.plot_mode_curves(tree_rows, {"tau": ("tau", "acceptance")}),
        "plot_leakage_vs_budget": lambda: plots.plot_leakage_vs_budget(tree_rows[tree_rows.arch == "gdn"], exact),
        "plot_verify_cost": lambda: plots.plot_verify_cost(cost),
        "plot_target_curves": lambda: plots.plot_target_curves(tree_rows[tree_rows.gdn_mode.isin(["wy"])], 16),
        "plot_drafter_grid": lambda: plots.plot_drafter_grid(grid, {"gdn": 1.42, "mla": 1.37}),
        "plot_expected_acceptance": lambda: plots.plot_expected_acceptance(torch.linspace(0.5, 3.0, 256), 1.2, 16, "gdn"),
        "plot_tree_shape": lambda: plots.plot_tree_shape(pd.DataFrame(
            {"max_depth": [12, 6, 3, 1.5, 1], "mean_depth": [6, 3, 2, 1, 1], "root_children": [1, 2, 12, 60, 64]},
            index=pd.Index([0.25, 0.5, 1.0, 2.0, 4.0], name="temperature"))),
        "plot_reliability_by_target": lambda: plots.plot_reliability_by_target(nodes),
        "plot_round_cost": lambda: plots.plot_round_cost(phases),
        "explorer@gdn_all_modes_T0": lambda: widgets.render(results_frame(), "gdn", temperature=0.0),
        "dflash2_explorer@gdn_T0": lambda: plots.plot_dflash2_budgets(_dflash2_summary(), "tau", 0.0, "gdn"),
    }


FIGURES = _figures()


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_is_legible_at_notebook_width(name):
    assert problems(FIGURES[name]()) == {}


def test_every_figure_function_is_covered():
    """A new figure function of plots.py must get a builder in FIGURES (key: its name, '@' a case)."""
    drawn = {n for n in dir(plots) if n.startswith("plot_") or n == "draw_tree"}
    assert drawn <= {name.split("@")[0] for name in FIGURES}, sorted(drawn - {n.split("@")[0] for n in FIGURES})


# ----------------------------------------------------------------------------- mutants

def _panels(n: int, width: float = 9.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width, 3), dpi=plots.DPI, layout="constrained")
    axes = list(fig.subplots(1, n, squeeze=False)[0])
    for ax in axes:
        ax.plot([1, 2, 3], [1, 2, 3], marker="o", label="data")
    return fig, axes


def test_mutant_five_point_ticks_fails():
    fig, (ax,) = _panels(1)
    ax.tick_params(labelsize=5)
    assert set(problems(fig)) == {"ticks"}


def test_mutant_too_wide_figure_shrinks_its_ticks():
    fig, (ax,) = _panels(1, width=16)   # 1760 px shown at 68 %: 9.5 pt ticks look 6.5 pt
    ax.tick_params(labelsize=9.5)
    assert "ticks" in problems(fig)


def test_mutant_four_panels_a_row_fails():
    fig, _ = _panels(4)
    assert set(problems(fig)) == {"rows"}


def test_mutant_legend_over_data_fails():
    fig, (ax,) = _panels(1)
    ax.plot(np.linspace(1, 3, 50), np.full(50, 2.0), label="through the middle")
    ax.legend(loc="center")
    assert set(problems(fig)) == {"legend"}


def test_mutant_power_of_two_ticks_fail():
    fig, (ax,) = _panels(1)
    ax.set_xscale("log", base=2)
    assert set(problems(fig)) == {"powers"}
