"""Every figure legible in a 1200 px notebook column (issue #26 item 3, issue 60 item 5).

Each figure function of plots.py (and the explorers' figures) is drawn on a small synthetic
frame, then checked: (a) tick labels shown >= 9 pt, where a PNG W px wide is shown scaled by
min(1, 1200 / W); (b) at most 3 panels a row; (c) no legend box covers a plotted point (a
Line2D vertex or a scatter offset inside its axes); (d) no '^' in a tick label (no 2^k, no
10^k); (e) at most 1600 px wide; (f) no plot squeezed under 200 px wide (by a legend beside
it); (g) no series hidden under another (its points within 2 px of a later line's); (h) no
two legend entries, and no two series of one panel, drawn alike; (i) every series and line
style in a legend; (j) the data filling at least a fifth of each panel's height; (k) panels
of one quantity (the same y label) on one y range; (l) no bar too short to read (under 8% of
its panel's tallest) without its value written on it; (m) no two texts of a panel overlapping.
A mutant per check (each fault issue 60 lists) must fail it.
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


MAX_PX, MIN_AXES_PX, NEAR_PX, MIN_FILL, MIN_BAR = 1600, 200, 2.0, 0.2, 0.08


def png_width(fig) -> int:
    return struct.unpack(">I", plots.figure_png(fig)[16:20])[0]


def too_wide(fig) -> list[int]:
    """(e) the PNG's width when it is over 1600 px."""
    width = png_width(fig)
    return [width] if width > MAX_PX else []


def _shown_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison]


def narrow_axes(fig) -> list[str]:
    """(f) panels shown under 200 px wide."""
    scale = shown_scale(fig)
    return [f"{ax.get_title()!r} {ax.get_window_extent().width * scale:.0f} px" for ax in _shown_axes(fig)
            if ax.get_window_extent().width * scale < MIN_AXES_PX]


def _series(ax) -> list:
    """The panel's data lines: Line2D with >= 2 finite points, error-bar caps left out."""
    out = []
    for line in ax.lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if line.get_linestyle() in ("None", "none", " ", "") and line.get_marker() in ("_", "|", "None", None, ""):
            continue
        if len(xy) >= 2 and np.isfinite(xy).all(1).sum() >= 2:
            out.append(line)
    return out


def _look(artist) -> tuple:
    """How a line is drawn: colour (rgb), line style and dash pattern, marker."""
    from matplotlib.colors import to_rgb
    dashes = getattr(artist, "_unscaled_dash_pattern", (None, None))
    pattern = tuple(np.round(dashes[1], 2)) if dashes and dashes[1] is not None else None
    ls = artist.get_linestyle()
    marker = artist.get_marker()
    marker = None if marker in ("None", None, "") else marker
    face = tuple(np.round(to_rgb(artist.get_markerfacecolor()), 3)) if marker else None
    return (tuple(np.round(to_rgb(artist.get_color()), 3)), "None" if ls in ("None", "none", " ", "") else ls, pattern,
            marker, face)


def hidden_series(fig) -> list[str]:
    """(g) lines most of whose points (>= 60%) lie within 2 px of a point of a line drawn over them."""
    bad = []
    for ax in _shown_axes(fig):
        lines = sorted(_series(ax), key=lambda l: l.get_zorder())
        pts = [l.get_transform().transform(np.asarray(l.get_xydata(), float)) for l in lines]
        for i, (line, p) in enumerate(zip(lines, pts)):
            over = [q for q in pts[i + 1:]]
            if not over:
                continue
            q = np.concatenate(over)
            near = np.array([np.hypot(*(q - v).T).min() <= NEAR_PX for v in p])
            if near.mean() >= 0.6:
                bad.append(f"{line.get_label()!r} hidden in {ax.get_title()!r}")
    return bad


def _legend_handles(fig) -> list:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [(t.get_text(), h) for leg in legends for t, h in zip(leg.get_texts(), leg.legend_handles)]


def look_alikes(fig) -> list[str]:
    """(h) two legend entries drawn alike, or two series of one panel drawn alike."""
    from matplotlib.lines import Line2D
    bad, seen = [], {}
    for text, handle in _legend_handles(fig):
        if isinstance(handle, Line2D):
            look = _look(handle)
            if look in seen:
                bad.append(f"legend: {seen[look]!r} and {text!r} look alike")
            seen.setdefault(look, text)
    for ax in _shown_axes(fig):
        looks = {}
        for line in _series(ax):
            if _look(line) in looks:
                bad.append(f"{ax.get_title()!r}: {looks[_look(line)]!r} and {line.get_label()!r} look alike")
            looks.setdefault(_look(line), line.get_label())
    return bad


def unlisted_series(fig) -> list[str]:
    """(i) series whose look no legend entry shows (a figure without a legend may draw one look)."""
    from matplotlib.lines import Line2D
    handles = [(text, _look(h)) for text, h in _legend_handles(fig) if isinstance(h, Line2D)]
    listed = {look for _, look in handles}
    by_label = {(text, look[1:]) for text, look in handles}   # the same entry in each panel's own colour (a target)
    looks = {(_look(line), line.get_label()) for ax in _shown_axes(fig) for line in _series(ax)}
    if not _legend_handles(fig):
        return [f"{len({lk for lk, _ in looks})} line styles and no legend"] if len({lk for lk, _ in looks}) > 1 else []
    return [f"{label!r} is in no legend" for look, label in sorted(looks, key=str)
            if look not in listed and (label, look[1:]) not in by_label]


def _data_extent(ax) -> tuple[float, float] | None:
    """(lowest, highest) display y of the panel's data: lines, scatter offsets, bars (clipped to the axes)."""
    box, ys = ax.get_window_extent(), []
    for line in ax.lines:
        xy = np.asarray(line.get_xydata(), float)
        if len(xy):
            ys.append(line.get_transform().transform(xy)[:, 1])
    for c in ax.collections:
        off = c.get_offsets()
        if len(off) and c.get_offset_transform() is not None:
            ys.append(c.get_offset_transform().transform(off)[:, 1])
        elif hasattr(c, "get_paths"):
            ys += [c.get_transform().transform(p.vertices)[:, 1] for p in c.get_paths() if len(p.vertices)]
    for patch in ax.patches:
        e = patch.get_window_extent()
        ys.append(np.array([e.y0, e.y1]))
    if not ys:
        return None
    y = np.clip(np.concatenate(ys), box.y0, box.y1)
    y = y[np.isfinite(y)]
    return (float(y.min()), float(y.max())) if len(y) else None


def unscaled_axes(fig) -> list[str]:
    """(j) panels whose data fill less than a fifth of their height (a 0.05 share on a 0-1 axis)."""
    bad = []
    for ax in _shown_axes(fig):
        extent = _data_extent(ax)
        height = ax.get_window_extent().height
        if extent and extent[1] > extent[0] and (extent[1] - extent[0]) < MIN_FILL * height:
            bad.append(f"{ax.get_title()!r}: data fill {(extent[1] - extent[0]) / height:.0%} of the height")
    return bad


def unshared_panels(fig) -> list[str]:
    """(k) panels with the same y label (one quantity, compared) on different y ranges."""
    by_label = {}
    for ax in _shown_axes(fig):
        if ax.get_ylabel():
            by_label.setdefault(ax.get_ylabel(), set()).add(tuple(np.round(ax.get_ylim(), 9)))
    return [f"{label!r}: {len(r)} y ranges" for label, r in by_label.items() if len(r) > 1]


def short_bars(fig) -> list[str]:
    """(l) bars under 8% of the panel's tallest (shown) with no value written on them."""
    bad = []
    for ax in _shown_axes(fig):
        bars = [p for p in ax.patches if type(p).__name__ == "Rectangle" and p.get_height() > 0]
        if len(bars) < 2 or not ax.get_ylabel():
            continue
        heights = np.array([p.get_window_extent().height for p in bars])
        labelled = len(ax.texts) >= len(bars)
        tiny = (heights < MIN_BAR * heights.max()).sum()
        if tiny and not labelled:
            bad.append(f"{ax.get_title()!r}: {tiny} bars under {MIN_BAR:.0%} of the tallest, no values written")
    return bad


def overlapping_texts(fig) -> list[str]:
    """(m) texts of one panel whose boxes overlap (labels written over each other)."""
    renderer = fig.canvas.get_renderer()
    bad = []
    for ax in _shown_axes(fig):
        texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                a, b = boxes[i], boxes[j]
                if a.x0 < b.x1 - 1 and b.x0 < a.x1 - 1 and a.y0 < b.y1 - 1 and b.y0 < a.y1 - 1:
                    bad.append(f"{texts[i].get_text()!r} over {texts[j].get_text()!r}")
    return bad


def problems(fig) -> dict[str, list]:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    found = {"ticks": small_ticks(fig), "rows": crowded_rows(fig), "legend": covered_points(fig),
             "powers": power_ticks(fig), "wide": too_wide(fig), "narrow": narrow_axes(fig),
             "hidden": hidden_series(fig), "alike": look_alikes(fig), "unlisted": unlisted_series(fig),
             "unscaled": unscaled_axes(fig), "unshared": unshared_panels(fig), "bars": short_bars(fig),
             "texts": overlapping_texts(fig)}
    return {k: v for k, v in found.items() if v}


# ----------------------------------------------------------------------------- synthetic frames

def _varied_tau(frame):
    """results_frame with each row's stored tau as its acceptance lengths: tau differs by config
    (results_frame's lengths are 2 everywhere, which would draw every tau line on one level)."""
    return frame.assign(_metrics=[{**m, "acceptance_lengths": [m["tau"]] * len(m["acceptance_lengths"])}
                                  for m in frame["_metrics"]])


def _loop_summary():
    def tag(m):
        n = len(m["acceptance_lengths"])
        return {**m, "round_looping": [i >= n // 2 for i in range(n)], "round_copyable": [i >= n // 3 for i in range(n)],
                "ends_in_loop": True}
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
                      "tau": tau, "speedup": speedup} for d, tau, speedup in (("dflash", 2.5, 1.4), ("dflash2", 2.9, 1.6))]
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
    summary, loops = summarize(_varied_tau(results_frame())), _loop_summary()
    table, conc = _concurrency()
    rng = np.random.default_rng(0)
    errors = pd.DataFrame({"setting": np.repeat(["float64", "float32", "bfloat16"], 20),
                           "err": np.r_[np.zeros(20), rng.random(40) * 1e-5]})
    cont = pd.DataFrame([{"arch": a, "depth": d, "group": g, "predicted": p - 0.05 * d, "observed": o - 0.1 * d,
                          "count": 50} for a in ("gdn", "mla") for d in (1, 2, 3)
                         for g, p, o in (("main_path", 0.9, 1.0), ("after_sibling", 0.6, 0.7))])
    tf = pd.DataFrame([{"arch": "mla", "block_size": 4, "method": "dflash", "budget": 3, "positions": 9, "tau": 1.2}]
                      + [{"arch": "mla", "block_size": 4, "method": "ddtree", "budget": b, "positions": 9, "tau": t}
                         for b, t in [(1, 1.1), (3, 1.3), (7, 1.5)]])
    gaps = pd.DataFrame([{"arch": a, "group": g, "predicted": p, "observed": o}
                         for a in ("gdn", "mla") for g, p, o in (("rank0", 0.9, 0.8), ("rank1+", 0.3, 0.1))])
    logs = {f"{a}-{k}": pd.DataFrame({"step": [0, 10, 20], "tokens": [0, 1e6, 2e6], "train_loss": [3 + d, 2 + d, 1.5 + d],
                                      "val_loss": [3.6 + d, 2.7 + d, 2.3 + d]})
            for a, d in (("gdn", 0.0), ("mla", 0.2)) for k in ("target", "drafter", "drafter2")}
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
        "plot_continuation": lambda: plots.plot_continuation(cont, in_loops=cont.assign(observed=cont.observed - 0.15)),
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
        "explorer@gdn_all_modes_T0": lambda: widgets.render(_varied_tau(results_frame()), "gdn", temperature=0.0),
        "dflash2_explorer@gdn_T0": lambda: plots.plot_dflash2_budgets(_dflash2_summary(), "tau", 0.0, "gdn"),
    }


def _seed_figures():
    """Notebook 10's figures (``app.projection_plots``, issue 61) on small synthetic tables."""
    from ddtree_lab.app import projection_plots as pp
    budgets = [1, 2, 4, 8, 16, 32, 64]
    union = pd.DataFrame([{"budget": b, "kind": k, "layer": 1, "experts": e}
                          for b in budgets for k, e in (("tree", 3 + np.log2(b) * 0.6), ("chain", 3.2 + np.log2(b) * 0.7),
                                                        ("independent", 8 * (1 - 0.75 ** (b + 1))))]
                         + [{"budget": 0, "kind": "token", "layer": 1, "experts": 2.0}])
    pairs = pd.DataFrame([{"measure": "pairs", "layer": l, "pair": p, "rho": r + 0.05 * l, "shared": 1.0}
                          for l in (1, 2, 3) for p, r in (("sibling", 0.4), ("path", 0.35), ("random", 0.3),
                                                          ("unrelated", 0.2))]
                         + [{"measure": "union", "layer": -1, "pair": p, "rho": r, "shared": 1.5}
                            for p, r in (("path", 0.68), ("sibling", 0.86))])
    published = pd.DataFrame({"stack": ["eager"] * 3 + ["lucebox"] * 3, "calibration": [True, False, False] * 2,
                              "predicted_speedup": [6.1, 5.6, 7.0, 3.9, 3.8, 2.5], "published_speedup": [6.1, 4.8, 6.9,
                                                                                                         3.9, 3.7, 2.4]})
    rows = []
    for stack, scale in (("transformers-eager", 1.0), ("kernel-floor", 0.5)):
        for routing, drop in (("independent", 0.6), ("fitted to published unions", 0.9)):
            rows += [{"method": "ar", "budget": 0, "predicted_speedup": 1.0},
                     {"method": "dflash", "budget": 15, "predicted_speedup": 4.0 * scale * drop}]
            rows += [{"method": "ddtree", "budget": b, "predicted_speedup": scale * (2 + np.log2(b)) * drop ** np.log2(b)}
                     for b in budgets]
            for r in rows[-len(budgets) - 2:]:
                r.update(model="K", accelerator="h200", stack=stack, routing=routing, published_speedup=np.nan)
    projection = pd.DataFrame(rows)
    curve = projection[(projection["stack"] == "kernel-floor") & (projection.routing == "fitted to published unions")]
    bounds = {r: projection[(projection["stack"] == "kernel-floor") & (projection.routing == r)]
              for r in ("independent", "fitted to published unions")}
    region = pd.DataFrame([{"fixed_ms": f, "routing": r, "tree_gain": f"{g} (x / y)", "chain_tau": t,
                            "best_budget": int(2 ** (1 + i + j)), "winner": "chain" if (i + j) % 4 == 0 else "tree"}
                           for i, f in enumerate((0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0))
                           for j, (r, g) in enumerate((("independent", "lab"), ("fitted", "lab"), ("fitted", "pub")))
                           for t in (3.6, 5.3, 5.5)])
    return {"plot_expert_union": lambda: pp.plot_expert_union(union, pairs, 8),
            "plot_predictions": lambda: pp.plot_predictions(published),
            "plot_projection": lambda: pp.plot_projection(projection, "K", "h200"),
            "plot_rho_scaled": lambda: pp.plot_rho_scaled(curve, 0.5, bounds, "K: best budget 4"),
            "plot_bounds": lambda: pp.plot_bounds(region)}


def _rule_figures():
    """Notebook 09's figures (rules of one's own beside DDTree) on a small synthetic summary."""
    rules = {"DDTree": 0.45, "static_63": 0.3, "top2_per_depth": 0.35, "sibling_capped": 0.4}
    rows = [{"arch": a, "method": "ar", "rule": "AR", "budget": 0, "tau": 1.0, "tokens_per_s": 40.0 + 5 * i}
            for i, a in enumerate(("gdn", "mla"))]
    rows += [{"arch": a, "method": "ddtree", "rule": r, "budget": b, "tau": 2 + slope * math.log2(b),
              "tokens_per_s": 50 + 10 * slope * math.log2(b) + 5 * i}
             for i, a in enumerate(("gdn", "mla")) for r, slope in rules.items() for b in (4, 16, 64)]
    summary = pd.DataFrame(rows)
    torch.manual_seed(1)
    tree = tree_mod.build_tree(torch.randn(7, 30) * 2, root_token=3, budget=16)
    rounds = {("gdn", "static_63", 16): (tree, [0, 1, 2], [f"t{t}" for t in tree.tokens.tolist()])}
    return {"plot_rules_by_budget": lambda: plots.plot_rules_by_budget(summary),
            "plot_rule_round": lambda: plots.plot_rule_round(rounds, summary, "gdn", "static_63", 16)}


FIGURES = _figures() | _seed_figures() | _rule_figures()


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
    assert "rows" in problems(fig)   # (and each panel squeezed: "narrow")


def test_mutant_legend_over_data_fails():
    fig, (ax,) = _panels(1)
    ax.plot(np.linspace(1, 3, 50), np.full(50, 2.0), label="through the middle")
    ax.legend(loc="center")
    assert set(problems(fig)) == {"legend"}


def test_mutant_power_of_two_ticks_fail():
    fig, (ax,) = _panels(1)
    ax.set_xscale("log", base=2)
    assert set(problems(fig)) == {"powers"}


# ----------------------------------------------------------------------------- issue 60's faults, one mutant each

def test_mutant_a_too_wide_figure_fails():
    fig, _ = _panels(1, width=16)   # 1760 px
    assert "wide" in problems(fig)


def test_mutant_naive_hidden_under_wy_fails():
    """04's verify time: naive and wy cost about the same; drawn on the same x, wy covers naive."""
    fig, (ax,) = _panels(1)
    ax.lines[0].remove()
    budgets = [1, 8, 16, 32, 64, 128, 256]
    ax.plot(budgets, [7.3, 8.0, 8.6, 10.4, 14.1, 22.3, 50.9], marker="^", label="naive")
    ax.plot(budgets, [7.0, 7.9, 8.6, 10.3, 13.8, 22.2, 47.7], marker="h", label="wy")
    plots.log10_axis(ax, "x")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    assert set(problems(fig)) == {"hidden"}


def test_mutant_fork_twice_in_the_legend_fails():
    """04: 'fork' (time) and 'fork: per-node states' (memory) drawn alike in one legend."""
    fig, (a, b) = _panels(2)
    for ax in (a, b):
        ax.lines[0].remove()
    a.plot([1, 2, 3], [1, 2, 3], color="C4", marker="D", label="fork")
    b.plot([1, 2, 3], [3, 1, 2], color="C4", marker="D", label="fork: per-node states")
    plots.legend_below(fig)
    assert set(problems(fig)) == {"alike"}


def test_mutant_two_drafters_drawn_alike_in_one_panel_fails():
    """00's training curves: DFlash 2's curve in DFlash's colour and label, one panel."""
    fig, (ax,) = _panels(1)
    ax.plot([1, 2, 3], [3, 2.5, 2.2], color="C0", marker="o", label="data")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    assert set(problems(fig)) == {"alike"}


def test_mutant_a_line_style_in_no_legend_fails():
    fig, (ax,) = _panels(1)
    ax.axhline(2.5, ls="--", color="C1")   # a DFlash level no legend names
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    assert set(problems(fig)) == {"unlisted"}


def test_mutant_a_small_share_on_a_unit_axis_fails():
    """The loop-share panels: about 0.05 drawn on a 0-1 axis."""
    fig, (ax,) = _panels(1)
    ax.lines[0].set_ydata([0.05, 0.04, 0.06])
    ax.set_ylim(0, 1)
    assert set(problems(fig)) == {"unscaled"}


def test_mutant_panels_of_one_metric_on_their_own_ranges_fail():
    """08: six speedup panels, each with its own y range."""
    fig, axes = _panels(3)
    for k, ax in enumerate(axes):
        ax.lines[0].set_ydata(np.array([1, 2, 3]) * (k + 1))
        ax.relim()
        ax.autoscale_view()
        ax.set_ylabel("speedup")
    assert set(problems(fig)) == {"unshared"}
    plots.share_y(axes)
    assert problems(fig) == {}


def test_mutant_a_plot_squeezed_by_its_legend_fails():
    """02: the per-node scatter about 110 px wide beside a legend wider than the plot."""
    fig, (ax,) = _panels(1, width=5.4)
    for k in range(6):
        ax.scatter([1, 2], [k, k + 1], label=f"depth {k}: a long legend entry beside the plot")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    assert "narrow" in problems(fig)


def test_mutant_unreadable_short_bars_fail():
    """06: rank-1+ bars of a few percent beside rank-0 bars near 1, on a linear axis, no values."""
    fig, (ax,) = _panels(1)
    ax.lines[0].remove()
    ax.bar([0, 0.2, 1, 1.2], [0.63, 0.85, 0.043, 0.024], width=0.18)
    ax.set_ylabel("accept probability")
    assert set(problems(fig)) == {"bars"}
    for bar in ax.patches:
        ax.annotate(f"{bar.get_height():.3f}", (bar.get_x() + 0.09, bar.get_height()), ha="center", va="bottom",
                    fontsize=7)
    assert problems(fig) == {}   # written on the bars, a short bar reads


def test_mutant_labels_written_over_each_other_fail():
    """06: the drafter grid's point labels overlapping."""
    fig, (ax,) = _panels(1)
    ax.annotate("0.25 x 6k 5L", (2, 2), xytext=(4, 4), textcoords="offset points")
    ax.annotate("0.25 x 6k", (2.02, 2.02), xytext=(4, 4), textcoords="offset points")
    assert set(problems(fig)) == {"texts"}
    fig, (ax,) = _panels(1)
    plots.place_labels(ax, [2, 2.02, 2.04], [2, 2.02, 2.0], ["0.25 x 6k 5L", "0.25 x 6k", "0.25 x 12k"])
    assert "texts" not in problems(fig)
