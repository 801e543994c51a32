"""Figures for the lab: budget curves, draft trees, error scatters, reliability diagrams.

One fixed style (``STYLE``: seaborn whitegrid, readable fonts, dpi 110) applied inside every
plotting function, so a figure looks the same whatever the caller's rcParams. Figures are
built as ``matplotlib.figure.Figure`` objects (no pyplot state: nothing leaks, nothing is
auto-shown twice in a notebook) and every function returns its Figure. ``show_figure`` is
what a notebook calls: it saves ``<name>.png`` and shows the same PNG inline, whatever the
matplotlib backend; only the main job at defaults writes ``figures/`` (SMOKE: the smoke folder,
anything else: the git-ignored ``figures/local/``, ``figure_folder``).
Budget axes are log 2 with labels that never collide (``budget_axis``).

The figures draw ``experiments.summary.summarize`` output (one row per config).
"""
from __future__ import annotations

import base64
import functools
import io
import itertools
import math
import os
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython import get_ipython
from IPython.display import display
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from ..common import FIGURES_DIR, MAIN_JOB_ENV, RESULTS_DIR
from ..experiments.plumbing.sweep import EXACT_MODE, names_mode
from ..experiments.studies.calibration import calibration_table
from ..experiments.studies.concurrency import tied_of
from ..experiments.studies.drafter_grid import pareto_front, point_label, ship_rule
from .reading import peak_label

SMOKE_FIGURES_DIR = RESULTS_DIR / "smoke" / "figures"   # git-ignored: SMOKE never touches figures/
LOCAL_FIGURES_DIR = FIGURES_DIR / "local"   # git-ignored: any run but the main job (a tweak in JupyterLab)
DPI = 110
NOTEBOOK_PX = 1200                       # a JupyterLab column: wider PNGs are shown scaled down
MAX_WIDTH_IN = 10.5                      # every figure fits the column (1155 px at DPI): shown at 100 %
MAX_COLS = 3                             # panels per row
STYLE = {
    **sns.axes_style("whitegrid"),
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5, "legend.fontsize": 9, "figure.titlesize": 11, "legend.handlelength": 3.5,
    "figure.dpi": DPI, "savefig.dpi": DPI, "axes.prop_cycle": mpl.cycler(color=sns.color_palette("colorblind")),
}
PALETTE = sns.color_palette("colorblind")
# One colour and marker per method, the same in every notebook and explorer.
METHOD_STYLES = {
    "ar": {"color": "0.35", "marker": "x", "label": "AR"},
    "dflash": {"color": PALETTE[1], "marker": "s", "label": "DFlash"},
    "dflash2": {"color": "#808000", "marker": "d", "label": "DFlash 2 (selector path)"},
    "official": {"color": PALETTE[5], "marker": "v", "label": "reference loop"},
    "lookup": {"color": PALETTE[8], "marker": "<", "label": "prompt lookup"},   # the copy baseline: no drafter
    "ddtree": {"color": PALETTE[0], "marker": "o", "label": "DDTree"},   # MLA (no GDN mode); = the marginal tree
    "naive": {"color": PALETTE[3], "marker": "^", "label": "DDTree naive"},
    "fork": {"color": PALETTE[4], "marker": "D", "label": "DDTree fork"},
    "wy": {"color": PALETTE[9], "marker": "h", "label": "DDTree wy"},
    "stock": {"color": PALETTE[7], "marker": "X", "label": "stock"},
    "auto": {"color": PALETTE[2], "marker": "*", "label": "DDTree auto"},
    "marginal": {"color": PALETTE[0], "marker": "o", "label": "DFlash marginals"},   # the DDTree tree
    "unary": {"color": PALETTE[6], "marker": "p", "label": "DFlash 2, unary only"},
    "conditional": {"color": "0.1", "marker": "P", "label": "DFlash 2, conditional"},
}
# One colour and marker per target (figures that colour by target, never by method).
TARGET_STYLES = {"gdn": {"color": "#00796b", "marker": "o"}, "mla": {"color": "#b8336a", "marker": "D"},
                 "attention": {"color": "#5d4037", "marker": "s"}}   # a target of one's own (``models.LABELS``)
# The two acceptance lenses: visibly different in the legend (thick solid + filled vs thin dashed + open).
LENS_STYLES = {"tau": {"ls": "-", "lw": 2.4, "ms": 5},
               "tau_outside_loops": {"ls": (0, (3.5, 2)), "lw": 1.3, "ms": 6, "mfc": "white"}}
PLAIN = "ddtree"  # the series key of a target whose rows name no GDN mode (``shown_modes``): plain DDTree
MODE_COLORS = {m: METHOD_STYLES[m]["color"] for m in ("naive", "fork", "wy", PLAIN)}
METRIC_LABELS = {"tau": "τ (tokens per round)", "tokens_per_s": "tokens / s", "speedup": "speedup over AR",
                 "tau_outside_loops": "τ outside loops (tokens per round)"}
PATH_COLOR = PALETTE[1]


def method_style(key: str) -> dict:
    """{color, marker} of a method or GDN mode (``METHOD_STYLES``), for ``ax.plot(**...)``."""
    style = METHOD_STYLES[key]
    return {"color": style["color"], "marker": style["marker"]}


def target_style(arch: str) -> dict:
    """{color, marker} of a target (``TARGET_STYLES``)."""
    return dict(TARGET_STYLES[arch])


def styled(func):
    """Build the figure under ``STYLE`` (tick and legend sizes are read when artists are made)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with mpl.rc_context(STYLE):
            return func(*args, **kwargs)
    return wrapper


def spread(i: int, n: int, step: float = 0.07) -> float:
    """Multiplicative x offset of series i of n on a log axis (centred, 2 ** (step * k)), so
    series with equal values stay visible side by side."""
    return 2 ** (step * (i - (n - 1) / 2))


def legend_below(fig: Figure, note: str | None = None, ncols: int | None = None) -> None:
    """One figure legend below the panels (outside every axes: it covers no data), holding
    each distinct label of every panel once; ``note`` is its title: what a reader needs to read the marks (never a note on how
    they were drawn: series offset sideways need no title)."""
    seen = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", title=note,
                   ncols=ncols or min(3, len(seen)), title_fontsize=9)


def legend_right(ax, note: str | None = None) -> None:
    """The axes' legend to the right of it (outside the data); for an Axes the caller made."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0, title=note, title_fontsize=9)


def share_y(axes) -> None:
    """One y range for panels that compare the same quantity: the union of their ranges."""
    axes = list(axes)
    if len(axes) > 1:
        lo, hi = min(a.get_ylim()[0] for a in axes), max(a.get_ylim()[1] for a in axes)
        for a in axes:
            a.set_ylim(lo, hi)


def share_top(ax, floor: float = 0.05, ceiling: float = 1.0, head: float = 1.25) -> None:
    """A share axis (0 to ``ceiling``) cut to its data: 0 to ``head`` x the highest value drawn
    (at least ``floor``), so a loop share of 0.05 is not drawn flat on a 0-1 axis."""
    top = max((float(np.nanmax(line.get_ydata())) for line in ax.lines if len(line.get_ydata())), default=0.0)
    ax.set_ylim(0, min(ceiling, max(floor, head * top)))


def log10_axis(ax, axis: str = "y") -> None:
    """A log-10 axis labelled in plain numbers ('1e-06', '0.01', '10'), no minor labels."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(mpl.ticker.NullFormatter())


def use_style() -> None:
    """Apply the lab's fixed figure style globally (notebooks call it once)."""
    mpl.rcParams.update(STYLE)


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (bbox tight, dpi 110): what is saved and what is shown."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def save_figure(fig: Figure, name: str, folder: Path | None = None) -> Path:
    """Write ``<folder>/<name>.png`` (default ``FIGURES_DIR``) and return its path."""
    folder = Path(folder or FIGURES_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    path.write_bytes(figure_png(fig))
    return path


def figure_folder(smoke: bool) -> Path:
    """Where ``show_figure`` writes: ``SMOKE_FIGURES_DIR`` under SMOKE; ``figures/`` only in the
    main job at defaults (its kernels carry ``MAIN_JOB_ENV=1``: ``notebooks.run_all``); any other
    run (JupyterLab, a changed parameter) ``LOCAL_FIGURES_DIR``, git-ignored, so a tweak and
    rerun never rewrites a committed figure."""
    if smoke:
        return SMOKE_FIGURES_DIR
    return FIGURES_DIR if os.environ.get(MAIN_JOB_ENV) == "1" else LOCAL_FIGURES_DIR


def show_figure(fig: Figure, name: str, smoke: bool) -> None:
    """A notebook's one call per figure: save it as ``<name>.png`` (in ``figure_folder``:
    ``figures/`` only from the main job, else a git-ignored folder) and show that PNG inline.

    The PNG is published as display_data directly (no reliance on the inline backend, so it
    shows under any MPLBACKEND, in JupyterLab and in nbclient runs); a pyplot figure is then
    closed so the backend does not show it a second time. Returns None: no Out[] repr.
    """
    png = figure_png(fig)
    folder = figure_folder(smoke)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.png").write_bytes(png)
    _display_png(png, name)
    if fig.canvas.manager is not None:  # made by pyplot: registered, and shown again at cell end
        plt.close(fig)


def _display_png(png: bytes, name: str) -> None:
    """Publish ``png`` as an inline image when running in an IPython kernel (else nothing)."""
    if get_ipython() is None:
        return
    display({"image/png": base64.b64encode(png).decode("ascii"), "text/plain": f"[figure {name}.png]"}, raw=True)


def _new_axes(ax, n: int, panel: tuple[float, float]) -> tuple[Figure, list]:
    """(figure, n axes): a fresh figure of at most ``MAX_COLS`` panels a row (panel: inches
    (w, h), the width shrunk so the figure fits ``MAX_WIDTH_IN``), or the caller's Axes."""
    if ax is None:
        cols, rows = min(n, MAX_COLS), math.ceil(n / MAX_COLS)
        fig = Figure(figsize=(min(panel[0] * cols, MAX_WIDTH_IN), panel[1] * rows), layout="constrained")
        axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
        for extra in axes[n:]:
            extra.remove()
        return fig, axes[:n]
    axes = list(np.atleast_1d(ax))
    if len(axes) != n:
        raise ValueError(f"ax must hold {n} Axes (one per panel), got {len(axes)}")
    return axes[0].figure, axes


# ----------------------------------------------------------------------------- budget curves

def _most_common(values: pd.Series):
    """The most frequent value (ties: the smallest); None for an empty series."""
    counts = values.value_counts()
    if counts.empty:
        return None
    return min(counts.index[counts == counts.max()])


def shown_modes(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the gdn_mode a figure draws: ``PLAIN`` on a target whose mode says nothing
    (``sweep.names_mode``: attention-only, every row runs the exact mode), the stored name elsewhere."""
    return rows.assign(gdn_mode=rows["gdn_mode"].where(rows["arch"].map(names_mode), PLAIN)) if len(rows) else rows


def slice_summary(summary: pd.DataFrame, arch: str, block_size=None, temperature=None,
                  max_new_tokens=None) -> tuple[pd.DataFrame, dict]:
    """Rows of one arch at one (block size, temperature, length), AR rows kept, gdn_mode as
    drawn (``shown_modes``).

    A None choice takes the value most DDTree rows have (ties: the smallest). Returns
    (rows, choices actually used).
    """
    rows = shown_modes(summary[summary["arch"] == arch])
    spec = rows[rows["method"] == "ddtree"]
    choices = {"block_size": block_size, "temperature": temperature, "max_new_tokens": max_new_tokens}
    for col, value in choices.items():
        if value is None:
            choices[col] = value = _most_common((spec if len(spec) else rows)[col])
        if value is None:
            continue
        keep = rows[col] == value
        if col == "block_size":
            keep |= rows["method"] == "ar"
        rows, spec = rows[keep], spec[spec[col] == value]
    return rows, choices


def _modes(rows: pd.DataFrame, gdn_modes) -> list[str]:
    """GDN modes to draw: the requested ones present among DDTree rows (``PLAIN`` always)."""
    present = list(dict.fromkeys(rows.loc[rows["method"] == "ddtree", "gdn_mode"]))
    return [m for m in present if gdn_modes is None or m in gdn_modes or m == PLAIN]


def budget_curves(rows: pd.DataFrame, metric: str, gdn_modes=None) -> dict[str, pd.DataFrame]:
    """{gdn_mode: DataFrame(budget, value)} for the int-budget DDTree rows, budget ascending."""
    curves = {}
    for mode in _modes(rows, gdn_modes):
        sel = rows[(rows["method"] == "ddtree") & (rows["gdn_mode"] == mode) & (rows["budget"] != "auto")]
        curve = pd.DataFrame({"budget": sel["budget"].astype(int), "value": sel[metric].astype(float)})
        curves[mode] = curve.sort_values("budget").reset_index(drop=True)
    return curves


def curve_peaks(summary: pd.DataFrame, arch: str, metric: str = "tokens_per_s", gdn_modes=None,
                block_size=None, temperature=None, *, max_new_tokens=None) -> dict[str, tuple[int, float]]:
    """{gdn_mode: (budget, value)} at the maximum of each DDTree budget curve (NaNs skipped)."""
    rows, _ = slice_summary(summary, arch, block_size, temperature, max_new_tokens)
    return _peaks(budget_curves(rows, metric, gdn_modes))


def _peaks(curves: dict[str, pd.DataFrame]) -> dict[str, tuple[int, float]]:
    peaks = {}
    for mode, curve in curves.items():
        curve = curve.dropna()
        if len(curve):
            best = curve.loc[curve["value"].idxmax()]
            peaks[mode] = (int(best["budget"]), float(best["value"]))
    return peaks


def _mode_label(mode: str) -> str:
    return "ddtree" if mode == PLAIN else f"ddtree {mode}"


REFERENCE_DASHES = [(0, (5, 2)), (0, (6, 2, 1.5, 2)), (0, (2, 1.5)), (0, (8, 2, 1.5, 2, 1.5, 2)), (0, (3, 3)),
                    (0, (10, 3)), (0, (1.5, 1.5, 5, 1.5))]   # DFlash levels: one per mode or per set of equal modes


def _draw_references(ax, rows: pd.DataFrame, metric: str, modes: list[str]) -> None:
    """Horizontal levels in the method colours: DFlash per drawn mode (one dash pattern per
    mode, named in the label; modes whose levels are equal, e.g. a chain verified naive and
    exact, share one line named for all of them: a second line on the first would hide), AR dotted."""
    levels = {}
    for mode in modes:
        ref = rows[(rows["method"] == "dflash") & (rows["gdn_mode"] == mode)][metric].dropna()
        if len(ref):
            levels.setdefault(float(ref.iloc[0]), []).append(mode)
    groups = [c for r in range(1, len(modes) + 1) for c in itertools.combinations(modes, r)]   # one dash each
    for level, same in levels.items():
        label = "dflash" if same == [PLAIN] else "dflash " + " = ".join(m for m in same if m != PLAIN)
        dash = REFERENCE_DASHES[groups.index(tuple(same)) % len(REFERENCE_DASHES)]
        ax.axhline(level, ls=dash, lw=1.4, color=METHOD_STYLES["dflash"]["color"], label=label)
    ar = rows[rows["method"] == "ar"][metric].dropna()
    if len(ar):
        ax.axhline(ar.iloc[0], ls=":", lw=1.6, color=METHOD_STYLES["ar"]["color"], label="ar")


def budget_ticks(lo: int, hi: int, max_labels: int = 6) -> list[int]:
    """Labelled budgets for a log-2 axis over [lo, hi] that never collide: the powers of two
    inside, every k-th one so at most ``max_labels`` remain; a range inside one octave (no
    two powers of two, e.g. 31-32 or 16-31) is labelled at its two ends instead."""
    powers = [2 ** k for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1)]
    if len(powers) < 2:
        return sorted({int(lo), int(hi)})
    return powers[::math.ceil(len(powers) / max_labels)]


def budget_axis(ax, budgets, label: str = "budget (draft nodes)") -> None:
    """A log-2 x axis over ``budgets`` (ints > 0): labels from ``budget_ticks``, unlabelled
    minor ticks at the other budgets, limits fixed to the budgets' range plus a small pad
    (so nothing drawn outside the range, e.g. a reference line, stretches the axis)."""
    budgets = sorted({int(b) for b in budgets if int(b) > 0})
    ax.set_xscale("log", base=2)
    if budgets:
        lo, hi = budgets[0], budgets[-1]
        pad = 2 ** max(0.06 * math.log2(hi / lo), 0.15)   # room for offset series
        ax.set_xlim(lo / pad, hi * pad)
        ticks = budget_ticks(lo, hi)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xticks([b for b in budgets if b not in ticks], minor=True)
        ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    ax.set_xlabel(label)


def value_axis(ax, values) -> None:
    """A log x axis labelled at exactly ``values`` (plain '0.25', '4'), no minor labels:
    matplotlib's default log labels ('3x10^-1 4x10^-1') overlap on a short axis."""
    values = sorted({float(v) for v in values})
    ax.set_xscale("log")
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())


def mark_zeros_at_floor(ax, x, y, floor: float, label: str = "exact 0 (drawn at the axis floor)", **style) -> int:
    """On a log y axis: draw the points whose y is exactly 0 at ``floor`` as open triangles
    (in the legend as ``label``), set the axis floor there; returns how many were drawn.
    x, y: array-likes [n]."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    zero = y == 0
    if zero.any():
        ax.scatter(x[zero], np.full(int(zero.sum()), floor), marker="v", facecolors="none",
                   edgecolors=style.pop("color", "0.2"), s=style.pop("s", 22), label=f"{label}: {int(zero.sum())}",
                   zorder=3, **style)
        ax.set_ylim(bottom=floor / 4)   # the markers sit whole inside the axis
        xs, counts = np.unique(x[zero], return_counts=True)
        for at, n in zip(xs, counts):   # many exact nodes at one x are one marker: say how many
            if n > 1:
                ax.annotate(f"{n} nodes", (at, floor), textcoords="offset points", xytext=(7, 0), ha="left",
                            va="center", fontsize=9, color="0.2")
    return int(zero.sum())


def _annotate_peaks(ax, peaks: dict[str, tuple[int, float]], ties: list[int] | None = None) -> None:
    """'highest value @ budget' per mode ('peak' only where ``ties``, the budgets the paired
    intervals do not tell from the best, hold the best alone: ``reading.peak_label``, the
    sentence's own rule), stacked in the top-left corner inside the axes, in a band of headroom
    added above every line drawn (so the labels never cover data and never leave the axes)."""
    if not peaks:
        return
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, top + (0.1 + 0.1 * len(peaks)) * (top - bottom))
    for k, (mode, (b, v)) in enumerate(peaks.items()):
        ax.annotate(peak_label(b, v, ties if len(peaks) == 1 else None), (0.03, 0.97), xycoords="axes fraction",
                    xytext=(0, -12 * k),
                    textcoords="offset points", ha="left", va="top", fontsize=9, color=MODE_COLORS[mode])


def _draw_auto(ax, rows: pd.DataFrame, metric: str, mode: str, budgets: list[int]) -> None:
    """The 'auto' row as a star at its mean tree size (the legend says so); when that size
    lies outside the budgets drawn, no star, and the legend says where it would be."""
    auto = rows[(rows["method"] == "ddtree") & (rows["gdn_mode"] == mode) & (rows["budget"] == "auto")]
    if not len(auto) or not np.isfinite(auto["mean_tree_size"].iloc[0]):
        return
    size, value = float(auto["mean_tree_size"].iloc[0]), float(auto[metric].iloc[0])
    name = "auto" if mode == PLAIN else f"auto {mode}"
    inside = bool(budgets) and budgets[0] <= size <= budgets[-1]
    label = f"{name} (at its mean tree, {size:.1f} nodes)" + ("" if inside else ": outside the range shown")
    xy = ([size], [value]) if inside else ([], [])
    ax.plot(*xy, "*", ms=13, color=METHOD_STYLES["auto"]["color"], mec=MODE_COLORS[mode], mew=1.0, ls="none",
            label=label)


def _draw_metric(ax, rows: pd.DataFrame, metric: str, gdn_modes, mark_budget, ties: list[int] | None = None) -> dict:
    """One panel: curves, peaks, references, the auto star, the mark_budget line."""
    curves = budget_curves(rows, metric, gdn_modes)
    peaks = _peaks(curves)
    budgets = sorted({int(b) for c in curves.values() for b in c["budget"]})
    for i, (mode, curve) in enumerate(curves.items()):
        color = MODE_COLORS[mode]
        ax.plot(curve["budget"] * spread(i, len(curves)), curve["value"], ms=4.5, lw=1.6, label=_mode_label(mode),
                **method_style(mode))
        if mode in peaks:
            ax.plot([peaks[mode][0] * spread(i, len(curves))], [peaks[mode][1]], "o", ms=10, mfc="none", mec=color,
                    mew=1.8)
        _draw_auto(ax, rows, metric, mode, budgets)
    _draw_references(ax, rows, metric, list(curves))
    if mark_budget is not None and budgets and budgets[0] <= mark_budget <= budgets[-1]:
        ax.axvline(mark_budget, color="0.55", lw=1, ls="-.", label=f"budget {mark_budget} = {mark_budget + 1}-token verify block")
    ax.margins(y=0.08)
    if budgets:
        budget_axis(ax, budgets)
        _annotate_peaks(ax, peaks, ties)
    else:
        ax.set_xlabel("budget (draft nodes)")
        ax.text(0.5, 0.5, "no DDTree rows", transform=ax.transAxes, ha="center", va="center")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    return peaks


def plot_budget_curves(summary: pd.DataFrame, arch: str, metrics=("tau", "tokens_per_s", "speedup"),
                       gdn_modes=None, block_size=None, mark_budget=31, *, ax=None,
                       temperature=None, max_new_tokens=None, title: str | None = None,
                       ties: dict[str, list[int]] | None = None) -> Figure:
    """One panel per metric: DDTree curves vs budget (log2 x), one line per gdn_mode in its
    method colour (several modes: offset sideways, said in the legend below the panels).

    summary: ``summarize`` output (AXES, the metric columns, mean_tree_size). Draws each
    curve's peak (circle + "value @ budget"), DFlash (dashed, per mode) and AR (dotted grey)
    references, the 'auto' row as a star at its mean tree size (legend: "at its mean
    tree"; outside the budgets drawn: legend only), and a vertical line at ``mark_budget``
    when it lies within the budgets drawn (None: none). block_size / temperature /
    max_new_tokens None: the most common value (see ``slice_summary``). ax: None, or one
    Axes per metric. title: the figure title (default: arch, block, T, length). ties: {metric:
    the budgets not told apart from the best (``reading.peak_ties``)}: the label says 'peak'
    only where the best stands alone, else 'highest ..., tied'; without: 'highest'.
    """
    with mpl.rc_context(STYLE):
        rows, chosen = slice_summary(summary, arch, block_size, temperature, max_new_tokens)
        fig, axes = _new_axes(ax, len(metrics), panel=(3.7, 3.0))
        for a, metric in zip(axes, metrics):
            _draw_metric(a, rows, metric, gdn_modes, mark_budget, (ties or {}).get(metric))
        legend_below(fig)
        fig.suptitle(title or f"{arch}: block {chosen['block_size']}, T = {chosen['temperature']}, "
                              f"{chosen['max_new_tokens']} new tokens")
    return fig


# ----------------------------------------------------------------------------- loops, temperature, real text

SAMPLED_COLORS = [PALETTE[i] for i in (9, 4, 3, 5, 6, 7, 8)]  # one per sampled T, ascending (readable first)


def loop_split_lenses(temperatures) -> list[tuple[str, float, str, tuple]]:
    """(column, temperature, label, colour) of every line ``plot_loop_split`` draws: at T = 0
    all rounds and outside loops, at every sampled T (ascending) all rounds (no loops there
    to speak of: its loop share is drawn beside)."""
    temps = sorted({float(t) for t in temperatures})
    lenses = [("tau", 0.0, "T = 0", PALETTE[0]),
              ("tau_outside_loops", 0.0, "T = 0 outside loops", PALETTE[2])] if 0.0 in temps else []
    sampled = [t for t in temps if t > 0]
    return lenses + [("tau", t, f"T = {t:g}", SAMPLED_COLORS[i % len(SAMPLED_COLORS)])
                     for i, t in enumerate(sampled)]


def _ddtree_curve(rows: pd.DataFrame, column: str, mode: str) -> pd.Series:
    """column vs integer budget for the DDTree rows of one gdn_mode (``budget_curves``), NaN dropped."""
    curve = budget_curves(rows, column, [mode]).get(mode)
    return pd.Series(dtype=float) if curve is None else curve.set_index("budget")["value"].dropna()


def _plot_lens(ax, curve: pd.Series, column: str, shift: float, **style) -> None:
    """One acceptance lens (``LENS_STYLES[column]``: all rounds thick solid, outside loops thin
    dashed with open markers), x times ``shift``. curve: value by integer budget."""
    ax.plot(curve.index * shift, curve.values, **{**LENS_STYLES.get(column, {}), **style})


@styled
def plot_loop_split(summary: pd.DataFrame, arch: str, block_size: int, gdn_mode: str = "wy") -> Figure:
    """Two panels for one arch and block: tau vs budget over all rounds, outside loops (T = 0)
    and at every stored sampled temperature (``loop_split_lenses``), DFlash as dashed levels;
    and the share of rounds spent in loops per temperature. Lines offset sideways (legend).

    summary: ``summarize`` rows (arch, block_size, temperature, gdn_mode, method, budget, tau,
    tau_outside_loops, loop_round_share)."""
    fig, (ax_tau, ax_loop) = _new_axes(None, 2, panel=(5.0, 3.6))
    mode = gdn_mode if names_mode(arch) else EXACT_MODE
    budgets, temps = set(), sorted(summary.loc[summary.arch == arch, "temperature"].unique())
    lenses = loop_split_lenses(temps)
    for i, (col, temp, label, color) in enumerate(lenses):
        rows = summary[(summary.arch == arch) & (summary.block_size == block_size)
                       & (summary.temperature == temp) & summary.gdn_mode.isin([mode])]
        curve = _ddtree_curve(rows, col, mode)
        if curve.empty:
            continue
        budgets |= set(curve.index)
        _plot_lens(ax_tau, curve, col, spread(i, len(lenses)), marker="o", color=color, label=f"DDTree {label}")
        dfl = rows[rows["method"] == "dflash"][col].dropna()
        same = col != "tau" and len(dfl) and any(np.isclose(line.get_ydata()[0], dfl.iloc[0]) and
                                                 line.get_label().startswith(f"DFlash T = {temp:g}")
                                                 for line in ax_tau.lines)
        if len(dfl) and not same:   # a level equal to its all-rounds level is not drawn over it
            ax_tau.axhline(dfl.iloc[0], ls=(0, (1, 1.5)) if col != "tau" else "--", lw=1.2, color=color, alpha=0.8,
                           label=f"DFlash {label}")
        if col == "tau":
            share = _ddtree_curve(rows, "loop_round_share", mode)
            ax_loop.plot(share.index * spread(i, len(lenses)), share.values, marker="o", ms=4, color=color,
                         label=f"_share {label.split(',')[0]}")   # its colour is its lens: no legend entry
    for ax in (ax_tau, ax_loop):
        budget_axis(ax, budgets)
    ax_tau.set(ylabel="τ (tokens per round)", title="acceptance (levels: DFlash)")
    ax_loop.set(ylabel="share of rounds in loops", title="rounds whose context loops")
    share_top(ax_loop)
    legend_below(fig, "DDTree: markers, solid (open, dashed: outside loops); DFlash: a level line", ncols=4)
    fig.suptitle(f"{arch}: block {block_size}, loops split out, T = {', '.join(f'{t:g}' for t in temps)}")
    return fig


@styled
def plot_loop_split_modes(summary: pd.DataFrame, title: str = "") -> Figure:
    """Loop split per verification mode, three panels: tau vs budget over all rounds (left) and
    over rounds outside loops (middle), on one y range, and the share of rounds in loops
    (right); one method colour per (arch, gdn_mode) of the DDTree rows (mla: plain DDTree), series
    offset sideways, so no panel holds more than one line per series. summary: ``summarize``
    rows at one block size and T."""
    rows = summary[summary["method"] == "ddtree"]
    if rows["block_size"].nunique() > 1 or rows["temperature"].nunique() > 1:
        raise ValueError("plot_loop_split_modes draws one block size and one temperature: filter the summary first")
    fig, (ax_all, ax_out, ax_loop) = _new_axes(None, 3, panel=(3.8, 3.2))
    budgets, groups = set(), list(shown_modes(rows).groupby(["arch", "gdn_mode"]))
    for i, ((arch, mode), g) in enumerate(groups):
        style, name, shift = method_style(mode), _series_name(arch, mode), spread(i, len(groups))
        for ax, col in ((ax_all, "tau"), (ax_out, "tau_outside_loops"), (ax_loop, "loop_round_share")):
            curve = _ddtree_curve(g, col, mode)
            budgets |= set(curve.index)
            ax.plot(curve.index * shift, curve.values, ms=4, label=name, **style)
    for ax in (ax_all, ax_out, ax_loop):
        budget_axis(ax, budgets)
    ax_all.set(ylabel="τ (tokens per round)", title="acceptance, all rounds")
    ax_out.set(ylabel="τ (tokens per round)", title="acceptance, outside loops")
    share_y([ax_all, ax_out])
    ax_loop.set(ylabel="share of rounds in a loop", title="rounds whose context loops")
    share_top(ax_loop)
    legend_below(fig, ncols=4)
    fig.suptitle(title or "loops split out")
    return fig


CONTINUATION_STYLES = {"main_path": ("main path", PALETTE[0]), "after_sibling": ("right after a rank >= 1 sibling", PALETTE[3])}


def plot_continuation(table: pd.DataFrame, in_loops: pd.DataFrame | None = None, min_count: int = 5) -> Figure:
    """By depth, the chance that the next depth is accepted after an accepted node on the main
    path vs right after a rank >= 1 sibling: observed (solid) and the surrogate's prediction
    (dashed), one panel per arch; optionally the main path in loops (dotted grey).

    table / in_loops: ``calibration.continuation_table`` outputs with an ``arch`` column (the
    rounds outside loops / in loops); points with fewer than ``min_count`` nodes are left out."""
    archs = sorted(table["arch"].unique())
    with mpl.rc_context(STYLE):
        fig, axes = _new_axes(None, max(1, len(archs)), panel=(4.2, 3.3))
        for ax, arch in zip(axes, archs):
            rows = table[(table.arch == arch) & (table["count"] >= min_count)]
            for group, (label, color) in CONTINUATION_STYLES.items():
                g = rows[rows.group == group].sort_values("depth")
                ax.plot(g.depth, g.observed, marker="o", ms=4, color=color, label=f"{label}: observed")
                ax.plot(g.depth, g.predicted, ls="--", lw=1.2, color=color, label=f"{label}: surrogate")
            if in_loops is not None:
                g = in_loops[(in_loops.arch == arch) & (in_loops.group == "main_path")
                             & (in_loops["count"] >= min_count)].sort_values("depth")
                ax.plot(g.depth, g.observed, ls=":", marker=".", color="0.45", label="main path, in loops: observed")
            ax.set(xlabel="depth of the accepted node", ylabel="P(next depth accepted)", ylim=(0, 1.02),
                   title=f"{arch}: outside loops (>= {min_count} nodes a point)")
            ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
        legend_below(fig, ncols=2)
        fig.suptitle("going on after a sibling vs on the main path")
    return fig


def plot_teacher_forced(tf: pd.DataFrame, summary: pd.DataFrame, block_size: int) -> Figure:
    """tau vs budget on real text (teacher-forced, solid) beside free-running decoding at
    T = 0 (dotted) per arch; DFlash as a dashed level (teacher-forced) per arch.

    tf: ``teacher_forced.tf_summary`` output; summary: ``summarize`` output."""
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(None, 1, panel=(6.4, 3.8))
        colors = {arch: style["color"] for arch, style in TARGET_STYLES.items()}
        budgets = set()
        for arch, rows in tf[tf.block_size == block_size].groupby("arch"):
            tree = rows[rows.method == "ddtree"].sort_values("budget")
            budgets |= set(tree.budget)
            ax.plot(tree.budget, tree.tau, marker=TARGET_STYLES[arch]["marker"], ms=4.5, lw=2, color=colors[arch],
                    label=f"{arch}: real text, teacher-forced ({int(tree.positions.iloc[0])} positions)")
            ax.axhline(rows[rows.method == "dflash"].tau.iloc[0], ls="--", lw=1, color=colors[arch],
                       label=f"{arch}: DFlash, real text, teacher-forced")
            free = summary[(summary.arch == arch) & (summary.block_size == block_size) & (summary.temperature == 0)
                           & (summary.gdn_mode == EXACT_MODE)]
            curve = _ddtree_curve(free, "tau", EXACT_MODE)
            budgets |= set(curve.index)
            ax.plot(curve.index, curve.values, ls=":", marker=TARGET_STYLES[arch]["marker"], ms=5, mfc="white",
                    color=colors[arch], label=f"{arch}: free-running, T = 0")
        budget_axis(ax, budgets)
        ax.set(ylabel="τ (tokens per round)", title=f"block {block_size}: real code vs the model's own text\n(dashed: DFlash)")
        legend_below(fig, ncols=2)
    return fig


# ----------------------------------------------------------------------------- modes, targets, verify cost

def _series_name(arch: str, mode: str) -> str:
    return arch if mode == PLAIN else f"{arch} {mode}"


def _draw_mode_curves(ax, rows: pd.DataFrame, column: str) -> None:
    """``column`` vs budget, one line per (arch, gdn_mode) in the mode's method style (mla:
    plain DDTree), offset sideways. rows: DDTree summary rows (arch, gdn_mode, int budget)."""
    groups = list(shown_modes(rows).groupby(["arch", "gdn_mode"]))
    for i, ((arch, mode), g) in enumerate(groups):
        g = g.sort_values("budget")
        ax.plot(g.budget.astype(int) * spread(i, len(groups)), g[column], ms=6, label=_series_name(arch, mode),
                **method_style(mode))
    budget_axis(ax, rows.budget.astype(int))


@styled
def plot_mode_curves(rows: pd.DataFrame, panels: dict[str, tuple[str, str]], title: str = "") -> Figure:
    """One panel per column of ``panels`` ({column: (ylabel, panel title)}): the column vs
    budget per (arch, gdn_mode) (``_draw_mode_curves``), one legend below saying the series
    are offset. rows: DDTree ``summarize`` rows with those columns."""
    fig, axes = _new_axes(None, len(panels), panel=(5.0, 3.4))
    for ax, (column, (ylabel, name)) in zip(axes, panels.items()):
        _draw_mode_curves(ax, rows, column)
        ax.set(ylabel=ylabel, title=name)
    legend_below(fig, ncols=4)
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_leakage_vs_budget(rows: pd.DataFrame, exact_nodes: pd.Series) -> Figure:
    """Naive vs exact GDN verification by budget, three panels: tau and the share of prompts
    whose output differs from AR per mode (``_draw_mode_curves``), and the draft nodes naive
    scores exactly (bars, mean over prompts). rows: DDTree ``summarize`` rows (arch, gdn_mode,
    budget, tau, matches_ar); exact_nodes: nodes, indexed by (prompt, budget)."""
    fig, axes = _new_axes(None, 3, panel=(3.5, 3.4))
    rows = rows.assign(differs=1 - rows.matches_ar)
    for ax, column, ylabel, name in ((axes[0], "tau", "τ (tokens per round)", "acceptance length"),
                                     (axes[1], "differs", "share of prompts", "output differs from AR")):
        _draw_mode_curves(ax, rows, column)
        ax.set(ylabel=ylabel, title=name)
    mean = exact_nodes.groupby("budget").mean()
    labels, leaked = [str(b) for b in mean.index], mean.index.to_numpy(float) - mean.values
    ax = axes[2]   # each tree split: the nodes naive scores exactly, and the rest, scored on leaked state
    ax.bar(labels, mean.values, color=METHOD_STYLES["naive"]["color"], label="scored exactly by naive")
    ax.bar(labels, leaked, bottom=mean.values, color="0.85", hatch="//", edgecolor="0.6", label="after the first branch")
    for k, (exact, rest) in enumerate(zip(mean.values, leaked)):
        ax.annotate(f"{exact:.2f} exact", (k, exact), textcoords="offset points", xytext=(0, 3), ha="center",
                    va="bottom", fontsize=9)
        ax.annotate(f"{rest:.1f} leaked", (k, exact + rest), textcoords="offset points", xytext=(0, 3), ha="center",
                    va="bottom", fontsize=9)
    ax.set_ylim(0, float(mean.index.max()) * 1.15)
    ax.set(xlabel="budget (draft nodes)", ylabel="draft nodes per tree", title="nodes naive scores exactly")
    legend_below(fig, ncols=4)
    return fig


@styled
def plot_verify_cost(cost: pd.DataFrame) -> Figure:
    """GDN verify cost by budget: left, median verify ms per mode (naive, fork, wy in their
    method styles; stock transformers dotted); right, extra memory (MiB, log 10) of fork's
    per-node states and wy's N x N matrices. cost: ``verify_cost.gdn_cost_table`` (budget,
    {mode}_ms, fork_state_bytes, wy_nxn_bytes)."""
    fig, (ax_t, ax_m) = _new_axes(None, 2, panel=(5.0, 3.4))
    modes = ("naive", "fork", "wy", "stock")
    for i, mode in enumerate(modes):   # offset sideways: naive and wy cost about the same
        label = "stock (transformers, flattened, no tree mask)" if mode == "stock" else mode
        ax_t.plot(cost.budget * spread(i, len(modes), 0.12), cost[f"{mode}_ms"], ls=":" if mode == "stock" else "-",
                  label=label, **method_style(mode))
    for mode, column in (("fork", "fork_state_bytes"), ("wy", "wy_nxn_bytes")):   # each in its legend style
        ax_m.plot(cost.budget, cost[column] / 2**20, label=f"_{mode} memory", **method_style(mode))
    log10_axis(ax_m, "y")
    for ax in (ax_t, ax_m):
        budget_axis(ax, cost.budget)
    ax_t.set(ylabel="verify ms", title="verify time (median)")
    ax_m.set(ylabel="MiB", title="extra memory: fork's per-node states,\nwy's N x N matrices (one layer)")
    legend_below(fig, ncols=4)
    return fig


@styled
def plot_target_curves(summary: pd.DataFrame, block_size: int, metrics=("tau", "speedup"),
                       mark_budget: int | None = 31) -> Figure:
    """The targets side by side at one block size: one panel per metric, DDTree (int
    budgets) per arch in the target's colour and marker, offset sideways; a dotted line at
    ``mark_budget`` (None: none). summary: ``summarize`` rows (arch, method, block_size,
    budget, the metrics), one temperature."""
    rows = summary[(summary.method == "ddtree") & (summary.block_size == block_size) & (summary.budget != "auto")]
    rows = rows.astype({"budget": int})
    archs = sorted(rows.arch.unique())
    fig, axes = _new_axes(None, len(metrics), panel=(5.0, 3.4))
    for ax, metric in zip(axes, metrics):
        for i, arch in enumerate(archs):
            g = rows[rows.arch == arch].sort_values("budget")
            ax.plot(g.budget * spread(i, len(archs)), g[metric], ms=6, label=arch, **target_style(arch))
        if mark_budget is not None and rows.budget.min() <= mark_budget <= rows.budget.max():
            ax.axvline(mark_budget, ls=":", c="gray", label=f"budget {mark_budget}")
        budget_axis(ax, rows.budget)
        ax.set(ylabel=METRIC_LABELS.get(metric, metric), title=f"block {block_size}")
    legend_below(fig, ncols=3)
    return fig


# ----------------------------------------------------------------------------- draft trees

def tree_layout(parents: list[int]) -> tuple[list[float], list[float]]:
    """(x, y) per node of a topologically ordered tree (parents[i] < i, parents[0] = -1).

    x = depth; leaves take successive rows in depth-first order (children ascending, so
    the drafter's favourite branch is on top), a parent sits midway between its first and
    last child. y decreases downwards.
    """
    n = len(parents)
    children = [[] for _ in range(n)]
    depth = [0] * n
    for node in range(1, n):
        children[parents[node]].append(node)
        depth[node] = depth[parents[node]] + 1
    y = [0.0] * n
    row, stack = 0, [0]
    while stack:  # depth-first preorder: leaves get rows top to bottom
        node = stack.pop()
        if not children[node]:
            y[node] = -float(row)
            row += 1
        stack.extend(reversed(children[node]))
    for node in reversed(range(n)):  # children have larger indices: place parents after them
        if children[node]:
            y[node] = (y[children[node][0]] + y[children[node][-1]]) / 2
    return [float(d) for d in depth], y


def _printable(text: str, width: int = 10) -> str:
    """A token's text made visible in a small box: spaces, newlines, tabs, '$' escaped."""
    text = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("$", r"\$")
    return text if len(text) <= width else text[: width - 1] + "…"


def draw_tree(tree, labels: list[str] | None = None, path: list[int] | None = None, ax=None,
              max_nodes: int = 64) -> Figure:
    """Draw a DraftTree left to right: root at left, one column per depth.

    tree: ``tree.DraftTree`` (tokens, parents, log_weights [N+1]); labels: one string per
    node (default: token ids); path: accepted node indices from the root (``tree.accept``),
    drawn as thick coloured edges and coloured nodes; a node whose label is empty (a token that
    decodes to no text) shows its token id, '#id'. Edge width is proportional to the
    drafter's conditional probability exp(log_w[child] - log_w[parent]). Only the first
    ``max_nodes`` nodes (a prefix-closed subtree, nodes are topological) plus ``path`` are drawn.
    """
    parents = tree.parents.tolist()
    log_w = tree.log_weights.tolist()
    labels = [str(t) for t in tree.tokens.tolist()] if labels is None else list(labels)
    path = list(path or [])
    keep = sorted(set(range(min(max_nodes, len(parents)))) | set(path))
    index = {node: i for i, node in enumerate(keep)}
    x, y = tree_layout([-1] + [index[parents[n]] for n in keep[1:]])
    on_path = set(path)
    with mpl.rc_context(STYLE):
        if ax is None:
            fig = Figure(figsize=(min(MAX_WIDTH_IN, 1.0 + 0.95 * (max(x) + 1)), min(10, 0.8 + 0.3 * (1 - min(y)))))
            ax = fig.add_subplot()
        fig = ax.figure
        edges, widths, colors = [], [], []
        for node in keep[1:]:
            i, p = index[node], index[parents[node]]
            hit = node in on_path and parents[node] in on_path
            edges.append([(x[p], y[p]), (x[i], y[i])])
            widths.append(0.5 + 4.0 * math.exp(log_w[node] - log_w[parents[node]]) + (2.5 if hit else 0))
            colors.append(PATH_COLOR if hit else "0.55")
        ax.add_collection(LineCollection(edges, linewidths=widths, colors=colors, zorder=1))
        tokens = tree.tokens.tolist()
        for node in keep:
            i = index[node]
            face = PATH_COLOR if node in on_path else ("0.85" if node == 0 else "white")
            shown = _printable(labels[node]) or f"#{tokens[node]}"   # a token decoding to no text: its id
            ax.text(x[i], y[i], shown, ha="center", va="center", fontsize=8.5, zorder=2,
                    bbox=dict(boxstyle="round,pad=0.25", fc=face, ec="0.3", lw=0.6))
        ax.set_xlim(-0.6, max(x) + 0.6)
        ax.set_ylim(min(y) - 0.7, 0.7)
        ax.axis("off")
        shown = "" if len(keep) == len(parents) else f" (first {len(keep)} of {len(parents)} nodes shown)"
        accepted = f", {len(path) - 1} accepted" if path else ""
        ax.set_title(f"draft tree: {len(parents) - 1} draft nodes, depth {int(tree.depths.max())}{accepted}{shown}",
                     fontsize=9)
    return fig


# ----------------------------------------------------------------------------- studies

def plot_error_scatter(x, y, hue=None, ax=None, xlabel: str = "node", ylabel: str = "max |error|",
                       *, title: str | None = None, floor: float = 1e-12, xlog: bool = False,
                       hue_name: str | None = None) -> Figure:
    """Scatter of per-node errors on a log y axis (leakage study).

    x, y: array-likes [n]; hue: optional array-like [n] of categories (one colour each,
    sorted; ``hue_name``: the legend's title). Errors below ``floor`` are drawn at ``floor``; exact
    zeros there as open triangles, counted in the legend (``mark_zeros_at_floor``), which sits
    below the axes in rows (a column of entries beside it would squeeze the plot). xlog: a
    log-10 x axis. Both log axes are labelled in plain numbers (``log10_axis``).
    """
    x, raw = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    y = np.clip(raw, floor, None)
    hue = np.zeros(len(x), dtype=int) if hue is None else np.asarray(hue)
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(ax, 1, panel=(6.4, 3.4))
        groups = list(dict.fromkeys(hue.tolist()))
        try:
            groups.sort()
        except TypeError:  # mixed kinds: keep the order of first appearance
            pass
        ordered = len(groups) > 1 and all(isinstance(g, (int, np.integer)) for g in groups)
        colors = (mpl.colormaps["viridis"](np.linspace(0, 0.9, len(groups))) if ordered   # an order (a depth): one hue
                  else [PALETTE[i % len(PALETTE)] for i in range(len(groups))])           # ramp, every step distinct
        for group, color in zip(groups, colors):
            sel = (hue == group) & (raw != 0)
            ax.scatter(x[sel], y[sel], s=14, alpha=0.75, color=color, label=str(group) if len(groups) > 1 else None)
        log10_axis(ax, "y")
        if xlog:
            log10_axis(ax, "x")
        mark_zeros_at_floor(ax, x, raw, floor)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        legend_below(fig, hue_name, ncols=min(7, len(groups) + 1))
        if title:
            ax.set_title(title)
    return fig


def plot_error_strip(errors: pd.DataFrame, settings: list[str], ylabel: str, title: str) -> Figure:
    """Per-node errors, one jittered strip per setting, log y. Exact zeros are drawn at the
    axis floor (a tenth of the smallest non-zero error) as open triangles, counted in the
    legend. errors: rows with ``setting`` and ``err``; settings: strips, left to right."""
    nonzero = errors.err[errors.err > 0]
    floor = float(nonzero.min()) / 10 if len(nonzero) else 1e-18
    rng = np.random.default_rng(0)
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(None, 1, panel=(7.5, 3.8))
        xs, ys = [], []
        for i, name in enumerate(settings):
            err = errors.err[errors.setting == name].to_numpy(dtype=float)
            x = i + 0.25 * (rng.random(len(err)) - 0.5)
            ax.scatter(x[err > 0], err[err > 0], s=8, alpha=0.6, color=PALETTE[i % len(PALETTE)])
            xs.append(x), ys.append(err)
        log10_axis(ax, "y")
        mark_zeros_at_floor(ax, np.concatenate(xs), np.concatenate(ys), floor)
        legend_below(fig)
        ax.set(xticks=range(len(settings)), xticklabels=settings, ylabel=ylabel, title=title)
    return fig


@styled
def plot_sibling_gap(gaps: pd.DataFrame) -> Figure:
    """Predicted (grey) and observed (target colour) accept probability of rank-0 and rank >= 1
    nodes per arch. gaps: ``calibration.surrogate_gap`` rows (group, predicted, observed) with
    an ``arch`` column."""
    fig, (ax,) = _new_axes(None, 1, (6.4, 3.6))
    for i, (arch, g) in enumerate(gaps.groupby("arch")):
        x = np.array([j + 0.4 * i for j in range(len(g))])
        for xs, values, kw in ((x, g.predicted, {"color": "0.75", "label": "predicted" if i == 0 else None}),
                               (x + 0.18, g.observed, {"color": TARGET_STYLES[arch]["color"], "label": f"observed ({arch})"})):
            bars = ax.bar(xs, values, width=0.18, **kw)
            ax.bar_label(bars, labels=[f"{v:.2f}" if v >= 0.095 else f"{v:.3f}" for v in values], fontsize=8, padding=1)
    log10_axis(ax, "y")   # rank-1+ rates are a few percent: on a linear axis their bars are invisible
    ax.set_ylim(0.005, 2.0)
    ax.set(xticks=[0.2, 1.2], xticklabels=["rank 0 (main path)", "rank 1+ (branches)"],
           ylabel="accept probability (log)", title="the sibling-conditioning gap")
    legend_below(fig)
    return fig


def expected_calibration_error(pred, observed, counts) -> float:
    """ECE = sum(count * |pred - observed|) / sum(count) over the bins (array-likes [n_bins];
    empty or non-finite bins skipped): a mean over nodes, so the many rarely-accepted branches
    weigh most."""
    pred, observed, counts = (np.asarray(a, dtype=float) for a in (pred, observed, counts))
    ok = (counts > 0) & np.isfinite(pred) & np.isfinite(observed)
    return float((counts[ok] * np.abs(pred[ok] - observed[ok])).sum() / max(counts[ok].sum(), 1))


def plot_reliability(pred, observed, counts, ax=None, title: str = "reliability", legend: bool = True) -> Figure:
    """Reliability diagram: mean predicted accept probability per bin vs observed frequency.

    pred, observed, counts: array-likes [n_bins] (empty bins, count 0, are skipped). Marker
    area grows with the count; the title carries the expected calibration error per node
    (``expected_calibration_error``) and how many nodes it averages over.
    """
    pred, observed, counts = (np.asarray(a, dtype=float) for a in (pred, observed, counts))
    ok = (counts > 0) & np.isfinite(pred) & np.isfinite(observed)
    ece = expected_calibration_error(pred, observed, counts)
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(ax, 1, panel=(3.6, 3.4))
        ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfect")
        ax.plot(pred[ok], observed[ok], color=PATH_COLOR, lw=1.2, marker="o", ms=3, label="bins (area: nodes)")
        sizes = 12 + 120 * np.sqrt(counts[ok] / max(counts[ok].max(initial=1), 1))
        ax.scatter(pred[ok], observed[ok], s=sizes, color=PATH_COLOR, ec="k", lw=0.5, zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted accept probability")
        ax.set_ylabel("observed accept frequency")
        ax.set_title(f"{title}: ECE {ece:.3f}\n(per node, {int(counts[ok].sum())} nodes)")
        if legend:
            legend_below(fig)
    return fig


# ----------------------------------------------------------------------------- concurrency

def _concurrency_axis(ax, levels) -> None:
    """A log-2 x axis over the concurrency levels, every level labelled."""
    levels = sorted({int(c) for c in levels})
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    ax.set_xlabel("concurrency (sequences per batch)")


def _interval_bars(ax, x, rows: pd.DataFrame, col: str, color) -> None:
    """Error bars of ``col``'s 95% interval (``col``_lo / _hi), where the table has them."""
    if f"{col}_lo" not in rows or rows[f"{col}_lo"].isna().all():
        return
    y = rows[col].to_numpy(float)
    err = np.vstack([y - rows[f"{col}_lo"].to_numpy(float), rows[f"{col}_hi"].to_numpy(float) - y])
    ax.errorbar(np.asarray(x, float), y, yerr=err, fmt="none", ecolor=color, elinewidth=1.2, capsize=3)


@styled
def plot_best_budget(table: pd.DataFrame, ax=None) -> Figure:
    """Best fixed DDTree budget (the highest median speedup) vs concurrency per (target, T): the
    best as a marker in the target's colour (T = 0 filled, sampled open), a light bar spanning
    the budgets tied with it (``tied_budgets``: not told apart outside the noise); series offset
    sideways. No line joins the best budgets: among tied budgets which one is best is noise. table:
    ``experiments.concurrency.concurrency_table`` (arch, temperature, concurrency,
    best_budget[, tied_budgets])."""
    fig, (ax,) = _new_axes(ax, 1, (6.0, 3.8))
    archs = sorted(table.arch.unique())
    groups = list(table.groupby(["arch", "temperature"]))
    ties = "tied_budgets" in table and (table.tied_budgets.map(len) > 1).any()
    for k, ((arch, temp), g) in enumerate(groups):
        style = target_style(arch)
        x = g.concurrency * spread(k, len(groups), 0.1)
        tied = [tied_of(r) for r in g.itertuples()]
        lo, hi = [min(t) for t in tied], [max(t) for t in tied]
        # the best a marker, the budgets tied with it a light bar; no line joins the best budgets (it would
        # jump between budgets the noise cannot tell apart)
        ax.vlines(x, lo, hi, color=style["color"], alpha=0.3 if temp == 0 else 0.18, lw=7)
        ax.plot(x, g.best_budget, **style, ms=7 if temp == 0 else 6, mfc="white" if temp else style["color"],
                ls="none", label=f"{arch}, T = {temp:g}")
    _concurrency_axis(ax, table.concurrency)
    ax.set_yscale("log", base=2)
    budgets = sorted({int(b) for b in table.best_budget} | {int(b) for t in table.get("tied_budgets", []) for b in t})
    ax.set_yticks(budgets, [str(b) for b in budgets])
    ax.yaxis.set_minor_locator(mpl.ticker.NullLocator())
    ax.set(ylabel="best fixed budget", title="best DDTree budget vs load")
    note = "markers: the best budget (T = 0 filled, T = 1 open)"
    legend_below(fig, note + ("; light bars: the budgets tied with it\n(their paired 95% interval holds 1); "
                              "no line joins the best budgets: among tied ones, which is best is noise"
                              if ties else ""), ncols=4)
    return fig


@styled
def plot_concurrency_speedup(table: pd.DataFrame, archs, temperature: float = 0.0, ax=None) -> Figure:
    """Speedup over batched AR at the same concurrency vs concurrency, one panel per target:
    DFlash, the best fixed DDTree budget (labelled with it; "a,b": a tie) and ``auto``, in the
    method colours, with 95% interval bars where the table has them. table:
    ``concurrency_table`` (arch, temperature, concurrency, dflash_speedup, best_speedup,
    best_budget, auto_speedup[, their _lo / _hi, tied_budgets, best_ceiling: drawn where
    the table has it, the best budget's speedup at no cost of the loop's own])."""
    fig, axes = _new_axes(ax, len(archs), (4.6, 3.6))
    series = (("dflash_speedup", "DFlash", {"ls": "--"}), ("best_speedup", "DDTree, best fixed budget", {}),
              ("auto_speedup", "DDTree auto (load-aware)", {"ms": 11, "ls": ":"}))
    for ax, arch in zip(axes, archs):
        rows = table[(table.arch == arch) & (table.temperature == temperature)]
        for i, (col, name, extra) in enumerate(series):   # offset sideways: close speedups stay visible
            key = {"dflash_speedup": "dflash", "best_speedup": "ddtree", "auto_speedup": "auto"}[col]
            x = rows.concurrency * spread(i, len(series), 0.1)
            ax.plot(x, rows[col], label=name, **{**method_style(key), **extra})
            _interval_bars(ax, x, rows, col, METHOD_STYLES[key]["color"])
        if "best_ceiling" in rows and rows.best_ceiling.notna().any():
            ax.plot(rows.concurrency, rows.best_ceiling, lw=1, ms=5, marker="^", alpha=0.6, ls="-.",
                    c=METHOD_STYLES["ddtree"]["color"], label="DDTree ceiling (models' work alone)")
        for r in rows.itertuples():   # the best budget along the panel's foot: never on an error bar
            ax.annotate("|".join(str(b) for b in tied_of(r)), (r.concurrency, 0.03),
                        xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=8,
                        color=METHOD_STYLES["ddtree"]["color"])
        ax.axhline(1.0, c=METHOD_STYLES["ar"]["color"], lw=0.8, label="batched AR (1)")
        _concurrency_axis(ax, rows.concurrency)
        levels = rows.concurrency.astype(float)
        ax.set_xlim(levels.min() / 1.5, levels.max() * 1.5)   # room for the offset markers: no star clipped
        bottom, top = ax.get_ylim()
        ax.set_ylim(bottom - 0.12 * (top - bottom), top)   # a band for the budget labels
        ax.set(ylabel="speedup over batched AR", title=f"{arch}, T = {temperature:g}")
    share_y(axes)
    legend_below(fig, "bars: 95% intervals of the paired per-batch ratios; numbers along the foot: the best "
                      "budget (a|b: a tie)", ncols=3)
    return fig


@styled
def plot_concurrency_budgets(summary: pd.DataFrame, arch: str, temperature: float, concurrency: int,
                             ax=None) -> Figure:
    """At one (target, T, concurrency): aggregate tokens/s and speedup over batched AR vs the
    DDTree budget, in the method colours; DFlash dashed, ``auto`` a star at its mean tree size.
    summary: ``summarize_concurrency`` rows (arch, temperature, concurrency, method, budget,
    tokens_per_s, speedup, mean_tree_size)."""
    fig, axes = _new_axes(ax, 2, (4.8, 3.6))
    rows = summary[(summary.arch == arch) & (summary.temperature == temperature)
                   & (summary.concurrency == concurrency)]
    fixed = rows[(rows.method == "ddtree") & (rows.budget != "auto")].astype({"budget": int}).sort_values("budget")
    for ax, metric, label in zip(axes, ("tokens_per_s", "speedup"), ("aggregate tokens/s", "speedup over batched AR")):
        ax.plot(fixed.budget, fixed[metric], label="DDTree", **method_style("ddtree"))
        if metric == "speedup":
            _interval_bars(ax, fixed.budget, fixed, "speedup", METHOD_STYLES["ddtree"]["color"])
        for _, r in rows[rows.method == "dflash"].iterrows():
            ax.axhline(r[metric], ls="--", c=METHOD_STYLES["dflash"]["color"], label="DFlash")
        for _, r in rows[rows.budget == "auto"].iterrows():
            ax.plot([r.mean_tree_size], [r[metric]], ms=13, ls="", label="auto (mean tree)", **method_style("auto"))
        if metric == "speedup":  # axhline joins the y limits: 1 is always in view
            ax.axhline(1.0, c=METHOD_STYLES["ar"]["color"], lw=0.8, label="batched AR (1)")
        budget_axis(ax, fixed.budget)
        ax.set(ylabel=label, title=f"{arch}, T = {temperature:g}, concurrency {concurrency}")
    legend_below(fig, ncols=4)
    return fig


# ----------------------------------------------------------------------------- training curves

TRAINING_PANELS = {"target": "targets", "drafter": "DFlash drafters", "drafter2": "DFlash 2 drafters"}


def plot_training_curves(curves: dict[str, pd.DataFrame]) -> Figure:
    """Loss curves of the shipped models, one panel per kind (``TRAINING_PANELS``: targets vs
    training tokens, DFlash and DFlash 2 drafters vs step, the drafters on one y range): train
    (solid) and held-out (dashed) loss in the target's colour. curves: {"{arch}-{kind}": the
    run's ``log.csv`` (step, tokens, train_loss, val_loss)}."""
    kinds = [k for k in TRAINING_PANELS if any(n.split("-", 1)[1] == k for n in curves)]
    with mpl.rc_context(STYLE):
        fig, axes = _new_axes(None, len(kinds), panel=(3.6, 3.2))
        panel = dict(zip(kinds, axes))
        for name, log in sorted(curves.items()):
            arch, kind = name.split("-", 1)
            ax, x = panel[kind], (log["tokens"] / 1e6 if kind == "target" else log["step"])
            color = TARGET_STYLES[arch]["color"]
            ax.plot(x, log["train_loss"], color=color, lw=2, label=f"{arch} train")
            ax.plot(x, log["val_loss"], color=color, lw=1.3, ls=(0, (3.5, 2)), label=f"{arch} held out")
        for kind, ax in panel.items():
            ax.set(xlabel="training tokens (M)" if kind == "target" else "step",
                   ylabel="loss (nats / token)" if kind == "target" else "drafter loss", title=TRAINING_PANELS[kind])
        share_y([ax for kind, ax in panel.items() if kind != "target"])
        legend_below(fig, ncols=4)
    return fig


@styled
def plot_chain_leak(curve: pd.DataFrame, divergence: pd.DataFrame, max_new_tokens: int) -> Figure:
    """The leak in the chain, three panels. Left: max logit error of the reference loop's
    rollback (``DynamicCache.crop``) against the number of rejected tokens, per target (median
    over prompts, band min-max; exact zeros drawn on the axis and said). Middle: the same as
    total-variation distance at T = 1. Right: where ``dflash_generate`` first departs from AR
    on the GDN hybrid, per block size (``divergence``: arch, block_size, first_divergence,
    None/NaN = never), with the lab's exact loop for contrast. curve: arch, rejected,
    max_logit_error, tv_t1 per (prompt, k). Targets in their colours, one legend below."""
    fig, axes = _new_axes(None, 3, (3.5, 3.4))
    for ax, col, label in ((axes[0], "max_logit_error", "max |logit error|"), (axes[1], "tv_t1", "TV distance, T = 1")):
        for i, (arch, g) in enumerate(curve.groupby("arch", sort=True)):
            stats = g.groupby("rejected")[col].agg(["median", "min", "max"])
            color = TARGET_STYLES[arch]["color"]
            ax.plot(stats.index, stats["median"], marker=TARGET_STYLES[arch]["marker"], ms=4, color=color,
                    label=f"{arch} (median, band: min-max)")
            ax.fill_between(stats.index, stats["min"], stats["max"], color=color, alpha=0.2)
            if (stats["max"] == 0).all():
                ax.annotate(f"{arch}: exactly 0 at every k", (0.03, 0.9 - 0.1 * i), xycoords="axes fraction", color=color)
        ax.set(xlabel="rejected tokens cropped (k)", ylabel=label)
        ax.set_ylim(bottom=0)
    axes[0].set_title("crop rollback vs\na fresh forward")
    axes[1].set_title("next-token distribution\nafter the crop")
    ax = axes[2]
    bins = np.arange(0, max_new_tokens + 9, 8)
    blocks = list(divergence[divergence.arch == "gdn"].groupby("block_size"))
    departs = [pd.to_numeric(g.first_divergence, errors="coerce").dropna() for _, g in blocks]
    if blocks:   # the block sizes' bars side by side in each bin, opaque: no blend of two colours
        ax.hist(departs, bins=bins, color=[PALETTE[i + 2] for i in range(len(blocks))], rwidth=0.9,
                label=[f"reference, block {b}: {len(d)}/{len(g)} depart" for (b, g), d in zip(blocks, departs)])
    ax.set(xlabel="first new token that differs from AR", ylabel="prompts",
           title="dflash_generate on\nthe GDN hybrid")
    legend_below(fig, ncols=2)
    return fig


@styled
def plot_reference_loop(summary: pd.DataFrame, archs) -> Figure:
    """Per target, tokens/s of AR, the field's reference loop (``dflash_generate``), the lab's
    DFlash and the lab's DDTree budgets, all from one interleaved run; each bar says its tau,
    and a reference bar whose output departs from AR says so."""
    order = {"ar": 0, "official": 1, "dflash": 2, "ddtree": 3}
    fig, axes = _new_axes(None, len(archs), (5.2, 3.8))
    for ax, arch in zip(axes, archs):
        rows = summary[summary.arch == arch].copy()
        rows = rows.assign(_o=rows.method.map(order)).sort_values(["_o", "budget"], key=lambda s: s.astype(str))
        labels = [{"ar": "AR", "official": "reference\nloop", "dflash": "lab\nDFlash"}.get(m, f"lab DDTree\n{b}")
                  for m, b in zip(rows.method, rows.budget)]
        colors = [METHOD_STYLES[m]["color"] for m in rows.method]
        bars = ax.bar(range(len(rows)), rows.tokens_per_s, color=colors)
        for bar, r in zip(bars, rows.itertuples()):
            note = f"tau {r.tau:.2f}" + ("" if r.method == "ar" or r.matches_ar == 1 else
                                        f"\n!= AR on {100 * (1 - r.matches_ar):.0f}%")
            ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize="x-small", color="firebrick" if "!=" in note else "black")
        ax.set_xticks(range(len(rows)), labels)
        ax.set(ylabel="tokens/s", title=f"{arch}: one interleaved run, T = 0")
        ax.margins(y=0.25)
    share_y(axes)
    return fig


# ----------------------------------------------------------------------------- DFlash 2 trees

PROPOSAL_STYLES = {("dflash", "unary"): "marginal", ("dflash2", "unary"): "unary",
                   ("dflash2", "conditional"): "conditional"}   # (drafter, tree) -> METHOD_STYLES key


def _draw_proposals(ax, rows: pd.DataFrame, metric: str) -> None:
    """The three proposals' DDTree curves in their method styles, offset sideways, and the
    linear drafts as levels (DFlash dotted, DFlash 2's selector path dash-dotted); rows: one
    (arch, temperature) of ``dflash2.summary`` (method, drafter, tree, budget, metric)."""
    for i, ((drafter, tree), key) in enumerate(PROPOSAL_STYLES.items()):
        g = rows[(rows.method == "ddtree") & (rows.drafter == drafter) & (rows.tree == tree)].sort_values("budget")
        ax.plot(g.budget.astype(float) * spread(i, len(PROPOSAL_STYLES)), g[metric], ms=6, lw=1.6,
                label=METHOD_STYLES[key]["label"], **method_style(key))
    for drafter, ls, label in (("dflash", ":", "DFlash linear"), ("dflash2", "-.", "DFlash 2 linear (selector path)")):
        lin = rows[(rows.method == "dflash") & (rows.drafter == drafter)]
        if len(lin):
            ax.axhline(float(lin[metric].iloc[0]), ls=ls, lw=1.4, color=METHOD_STYLES[drafter]["color"], label=label)
    if metric == "speedup":
        ax.axhline(1.0, color=METHOD_STYLES["ar"]["color"], lw=0.8, label="AR")
    budget_axis(ax, rows.loc[rows.method == "ddtree", "budget"].astype(int), "DDTree budget (draft nodes)")


@styled
def plot_dflash2_budgets(summary: pd.DataFrame, metric: str = "tau", temperature: float | None = None,
                         arch: str | None = None) -> Figure:
    """``metric`` (tau, speedup or tau_outside_loops) vs DDTree budget (log 2 axis, plain
    labels) for the three proposals (``experiments.dflash2.PROPOSALS``), one panel per (arch,
    temperature) (or the one asked), at most 3 a row, on one y range; see ``_draw_proposals``.
    One legend below the panels.

    summary: ``experiments.dflash2.summary`` output."""
    s = summary[summary.method != "ar"]
    if temperature is not None:
        s = s[s.temperature == temperature]
    if arch is not None:
        s = s[s.arch == arch]
    panels = list(s.groupby(["arch", "temperature"]).groups)
    if not panels:
        raise ValueError(f"no rows to draw for arch={arch!r}, temperature={temperature!r}")
    one = len(panels) == 1   # the explorer's single panel: drawn as wide as its legend
    fig, axes = _new_axes(None, len(panels), panel=(6.4, 3.8) if one else (3.6, 3.2))
    label = METRIC_LABELS.get(metric, metric)   # words, never a column name
    for ax, (a, t) in zip(axes, panels):
        _draw_proposals(ax, s[(s.arch == a) & (s.temperature == t)], metric)
        ax.set(ylabel=label, title=f"{a}, T = {t:g}")
    share_y(axes)   # the panels compare one metric: one y range
    legend_below(fig, ncols=3)
    fig.suptitle(f"DDTree over DFlash 2: {label.split(' (')[0]} by budget")
    return fig


def plot_after_sibling(table: pd.DataFrame) -> Figure:
    """After a sibling: marginal vs conditional trees. Per arch, the observed chance that the
    next depth is accepted on the main path and right after an accepted rank >= 1 sibling,
    for each proposal (bars), outside loops; the after-sibling / main-path ratio (with its 95%
    interval where the table has ``ratio_lo`` / ``ratio_hi``) on a bracket above each pair.

    table: ``experiments.dflash2.sibling_table`` output."""
    archs = list(dict.fromkeys(table.arch))
    with mpl.rc_context(STYLE):
        fig, axes = _new_axes(None, len(archs), panel=(4.0, 3.3))
        for ax, arch in zip(axes, archs):
            rows = table[table.arch == arch].reset_index(drop=True)
            for j, (group, (label, color)) in enumerate(CONTINUATION_STYLES.items()):
                x = np.arange(len(rows)) + 0.38 * j
                ax.bar(x, rows[group], width=0.36, color=color, label=label)
            for i, r in rows.iterrows():   # the ratio with its interval, on a bracket clear of both bars
                top = max(r.main_path, r.after_sibling) + 0.06
                ax.add_collection(LineCollection([[(i, top - 0.03), (i, top), (i + 0.38, top), (i + 0.38, top - 0.03)]],
                                                 colors="0.35", linewidths=0.9))
                spread_text = (f" [{r.ratio_lo:.2f}, {r.ratio_hi:.2f}]"
                               if "ratio_lo" in rows and np.isfinite(r.get("ratio_lo", np.nan)) else "")
                ax.text(i + 0.19, top + 0.02, f"ratio {r.ratio:.2f}{spread_text}", ha="center", va="bottom", fontsize=9)
            ax.set(xticks=np.arange(len(rows)) + 0.19, xticklabels=rows.proposal, ylim=(0, 1.3), yticks=np.linspace(0, 1, 6),
                   ylabel="P(next depth accepted)", title=f"{arch}, outside loops")
        legend_below(fig, ncols=2)
        fig.suptitle("after a sibling: marginal vs conditional trees")
    return fig


GRID_SOURCES = {"trained": ("grid point", None), "shipped": ("shipped before the grid", "s"), "previous": ("previous release", "^")}


LABEL_SPOTS = ((4, 4, "left", "bottom"), (4, -4, "left", "top"), (-4, 4, "right", "bottom"), (-4, -4, "right", "top"),
               (7, 0, "left", "center"), (-7, 0, "right", "center"), (0, 7, "center", "bottom"), (0, -7, "center", "top"))


def _crosses(box, line) -> bool:
    """Whether a drawn line (its vertices and the segments between them, in display space) passes
    through ``box``: sampled along each segment."""
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
    if len(xy) < 2 or not np.isfinite(xy).all():
        return False
    t = np.linspace(0, 1, 24)[:, None]
    pts = np.concatenate([a + t * (b - a) for a, b in zip(xy[:-1], xy[1:])])
    return bool(((pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)).any())


def place_labels(ax, xs, ys, texts, fontsize: float = 8) -> list:
    """Label scattered points so no two labels overlap: each label (in the order given) takes the
    first spot around its point (``LABEL_SPOTS``, offsets in points) whose box meets no label
    placed before, no other point and stays inside the axes, or else the spot that meets the
    fewest. Lays the figure out first (positions are final); returns the annotations."""
    fig = ax.figure
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.column_stack([xs, ys]).astype(float))
    inside, placed, out = ax.get_window_extent(renderer), [], []
    for i, (xy, text) in enumerate(zip(zip(xs, ys), texts)):
        best = None
        for dx, dy, ha, va in LABEL_SPOTS:
            a = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=fontsize)
            box = a.get_window_extent(renderer).padded(1)
            others = np.delete(pts, i, axis=0)
            cost = (sum(box.overlaps(b) for b in placed) * 10
                    + int(((others[:, 0] > box.x0) & (others[:, 0] < box.x1) & (others[:, 1] > box.y0)
                           & (others[:, 1] < box.y1)).sum()) * 3
                    + sum(_crosses(box, line) for line in ax.lines) * 2   # a label over a drawn line reads badly
                    + (0 if (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0
                             and box.y1 <= inside.y1) else 5))
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, a, box)
            else:
                a.remove()
            if cost == 0:
                break
        placed.append(best[2])
        out.append(best[1])
    return out


def plot_drafter_grid(grid: pd.DataFrame, floor: dict, x: str = "tf_dflash_tau", y: str = "decode_dflash_tau") -> Figure:
    """The drafter grid (``studies.drafter_grid``), one panel per target: free-running DFlash tau
    (``y``: decoding HumanEval prompts, every round) against teacher-forced DFlash tau on the
    canonical solutions (``x``); every point labelled share x steps (``place_labels``: no two
    labels overlap), the Pareto front joined,
    teacher-forced floor of the drafter shipped before the grid (``floor[arch]``) dashed, and the
    ship rule's pick (``drafter_grid.ship_rule``) ringed."""
    archs = sorted(grid.arch.unique())
    picks = ship_rule(grid, floor).set_index("arch") if (grid.source == "trained").any() else pd.DataFrame()
    with mpl.rc_context(STYLE):
        fig, axes = _new_axes(None, len(archs), (5.6, 4.4))
        for ax, arch in zip(axes, archs):
            rows, style = grid[grid.arch == arch], TARGET_STYLES[arch]
            front = pareto_front(rows, x, y)
            ax.plot(front[x], front[y], color=style["color"], lw=1.2, alpha=0.6, label="Pareto front")
            for source, (label, marker) in GRID_SOURCES.items():
                pts = rows[rows.source == source]
                ax.scatter(pts[x], pts[y], s=46, marker=marker or style["marker"], color=style["color"],
                           ec="k", lw=0.6, zorder=3, label=label if len(pts) else None,
                           alpha=1.0 if source == "trained" else 0.55)
            ax.axvline(floor[arch], ls="--", color="0.45", lw=1, label="teacher-forced floor (drafter shipped before the grid)")
            if arch in picks.index:
                ax.scatter([picks.loc[arch, x]], [picks.loc[arch, y]], s=260, facecolors="none", edgecolors="k",
                           lw=1.6, zorder=4, label="the ship rule's pick")
            ax.set(xlabel="teacher-forced DFlash τ (real code)", ylabel="free-running DFlash τ (decoding)",
                   title=f"{arch}: drafter grid")
            ax.margins(x=0.12, y=0.12)
        share_y(axes)   # one free-running tau scale for both targets
        legend_below(fig, ncols=2)
        for ax, arch in zip(axes, archs):   # last: the layout is final when the labels are placed
            rows = grid[grid.arch == arch]
            place_labels(ax, rows[x], rows[y], [point_label(r) for _, r in rows.iterrows()])
    return fig


def plot_expected_acceptance(curve, chain: float, block_size: int, arch: str) -> Figure:
    """The surrogate's expected tau (1 + expected accepted draft tokens) of the best tree of each
    budget (``tree_shape.expected_acceptance_curve``) against the DFlash chain's (dashed)."""
    budgets = np.arange(1, len(curve) + 1)
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(None, 1, (6.0, 3.6))
        ax.plot(budgets, np.asarray(curve) + 1, color=method_style("ddtree")["color"],
                label="DDTree (best tree of each size)")
        ax.axhline(chain + 1, ls="--", color="0.5", label=f"DFlash chain ({block_size - 1} nodes)")
        budget_axis(ax, [1, len(curve)])
        ax.set(ylabel="surrogate expected τ", title=f"{arch}: expected acceptance length vs budget")
        legend_right(ax)
    return fig


def plot_tree_shape(shape: pd.DataFrame, budget: int = 64) -> Figure:
    """Max depth and mean depth (left) and root children (right) of the best tree against the
    draft temperature (``tree_shape.shape_by_temperature``), one plain label per temperature; each
    panel its own y axis, so the depths are not flattened under a 0-``budget`` children scale."""
    with mpl.rc_context(STYLE):
        fig, (depth, root) = _new_axes(None, 2, (4.2, 3.2))
        for i, col in enumerate(("max_depth", "mean_depth")):
            depth.plot(shape.index, shape[col], marker="o", color=PALETTE[i], label=col.replace("_", " "))
        root.plot(shape.index, shape["root_children"], marker="o", color=PALETTE[2], label="root children")
        for ax, ylabel, title in ((depth, "depth (draft nodes)", "depth"), (root, "children of the root", "width at the root")):
            ax.set_xscale("log")
            value_axis(ax, shape.index)
            ax.set(xlabel="draft temperature (<1 sharper, >1 flatter)", ylabel=ylabel, title=title)
        depth.set_ylim(bottom=0)
        root.set_ylim(0, max(budget, float(shape["root_children"].max())) * 1.05)
        fig.suptitle(f"budget-{budget} tree shape vs drafter confidence")
        legend_below(fig, ncols=3)
    return fig


@styled
def plot_reliability_by_target(nodes: pd.DataFrame) -> Figure:
    """One reliability diagram per target (``plot_reliability`` of ``calibration_table(by="bins")``),
    one legend below the panels."""
    groups = list(nodes.groupby("arch"))
    fig, axes = _new_axes(None, len(groups), (4.2, 3.8))
    for ax, (arch, rows) in zip(axes, groups):
        bins = calibration_table(rows, by="bins")
        plot_reliability(bins.predicted, bins.observed, bins["count"], ax=ax, title=arch, legend=False)
    share_y(axes)
    legend_below(fig)
    return fig


PHASE_COLORS = dict(zip(("draft", "tree", "verify", "accept", "commit"), (PALETTE[i] for i in (0, 2, 3, 4, 5))))
REFERENCE_PARTS = {"drafter_fwd_ms": ("reference: drafter (forwards, head)", "0.35"),
                   "target_fwd_ms": ("reference: target forwards", "0.6"),
                   "rest_ms": ("reference: rest of its loop", "0.85")}


def _reference_bar(ax, i: int, r) -> None:
    """The reference loop's bar at row i: its forwards and the rest of its loop (greys), or its
    total alone when the row has no forwards (NaN)."""
    if pd.isna(getattr(r, "target_fwd_ms", float("nan"))):
        ax.barh(i, r.total_ms, color="0.6", label="reference loop (total)")
        return
    left = 0.0
    for column, (label, color) in REFERENCE_PARTS.items():
        ax.barh(i, r[column], left=left, color=color, label=label)
        left += r[column]


def plot_round_cost(phases: pd.DataFrame) -> Figure:
    """Milliseconds per round, one horizontal bar per loop and one panel per target, split into
    the lab's phases (``round_cost.phase_table``: medians over prompts) and the rest of the
    median total (hatched); the reference loop (``dflash_generate``), which exposes no phase
    timers, in greys: its drafter's and target's forwards as timed from outside
    (``round_cost.run_with_forwards``) and the rest of its loop, or one bar of its total in a
    run stored before the forwards were timed."""
    archs = list(dict.fromkeys(phases.arch))
    with mpl.rc_context(STYLE):
        fig, axes = _new_axes(None, len(archs), (5.0, 3.2))
        for ax, arch in zip(axes, archs):
            rows = phases[phases.arch == arch].reset_index(drop=True)
            labels = ["dflash_generate" if m == "official" else f"lab {m}" + (f" {b}" if m == "ddtree" else "")
                      for m, b in zip(rows.method, rows.budget)]
            for i, r in rows.iterrows():
                if r.method == "official":
                    _reference_bar(ax, i, r)
                    continue
                left = 0.0
                for phase, color in PHASE_COLORS.items():
                    ax.barh(i, r[f"{phase}_ms"], left=left, color=color, label=phase)
                    left += r[f"{phase}_ms"]
                if r.total_ms > left:  # the loop's own time outside the phase timers
                    ax.barh(i, r.total_ms - left, left=left, color="white", ec="0.4", hatch="//", lw=0.6,
                            label="outside the phases")
            ax.set_yticks(range(len(rows)), labels)
            ax.invert_yaxis()
            ax.set(xlabel="ms per round (median over prompts)", title=f"{arch}: what a round costs")
        legend_below(fig, ncols=3)
    return fig


# ----------------------------------------------------------------------------- your own tree (09)

# Rules of one's own beside DDTree (its METHOD_STYLES style): colours and markers no method uses.
RULE_STYLES = [{"color": "#8c564b", "marker": "v"}, {"color": "#e377c2", "marker": "<"},
               {"color": "#17becf", "marker": ">"}, {"color": "#bcbd22", "marker": "8"}]
RULE_LS = (0, (4, 1.5))


def rule_style(rule: str, rules: list[str]) -> dict:
    """{color, marker, ls}: DDTree in its method style, the others from ``RULE_STYLES`` in order."""
    if rule == "DDTree":
        return {**method_style("ddtree"), "ls": "-"}
    return {**RULE_STYLES[[r for r in rules if r != "DDTree"].index(rule) % len(RULE_STYLES)], "ls": RULE_LS}


def _draw_rules(ax, rows: pd.DataFrame, metric: str, highlight: str | None = None) -> None:
    """``metric`` by budget, one line per rule (``your_tree.summary`` rows of one arch), offset
    sideways; the AR level dotted; ``highlight``: that rule drawn thick, the others thin."""
    trees = rows[rows.method == "ddtree"]
    rules = list(dict.fromkeys(trees.rule))
    for i, rule in enumerate(rules):
        g = trees[trees.rule == rule].sort_values("budget")
        lw = 1.6 if highlight is None else (2.8 if rule == highlight else 0.9)
        ax.plot(g.budget.astype(float) * spread(i, len(rules)), g[metric], ms=6, lw=lw, label=rule,
                **rule_style(rule, rules))
    ar = rows[rows.method == "ar"][metric].dropna()
    if len(ar) and metric != "tau":
        ax.axhline(float(ar.iloc[0]), ls=":", lw=1.6, color=METHOD_STYLES["ar"]["color"], label="AR")
    budget_axis(ax, trees.budget.astype(int))


@styled
def plot_rules_by_budget(summary: pd.DataFrame, metrics=("tau", "tokens_per_s")) -> Figure:
    """Every rule beside DDTree by budget (``your_tree.summary``): one row of panels per metric,
    one panel per target; one legend below."""
    archs = list(dict.fromkeys(summary.arch))
    fig = Figure(figsize=(min(3.8 * len(archs), MAX_WIDTH_IN), 3.0 * len(metrics) + 0.8), layout="constrained")
    axes = fig.subplots(len(metrics), len(archs), squeeze=False, sharey="row").ravel()  # a row per metric, a column per target
    for ax, (metric, arch) in zip(axes, [(m, a) for m in metrics for a in archs]):
        _draw_rules(ax, summary[summary.arch == arch], metric)
        ax.set(ylabel=METRIC_LABELS.get(metric, metric), title=f"{arch}: {METRIC_LABELS.get(metric, metric)}")
    legend_below(fig, ncols=4)
    fig.suptitle("Rules of one's own beside DDTree, T = 0")
    return fig


RULE_TREE_NODES = 24   # nodes of a rule's tree the widget draws (plus its accepted path): labels stay readable


@styled
def plot_rule_round(rounds: dict, summary: pd.DataFrame, arch: str, rule: str, budget: int) -> Figure:
    """The widget's figure: ``rule``'s tree at ``budget`` on one real round (``rounds``: {(arch,
    rule, budget): ``your_tree.first_round``}, its accepted path coloured) beside every rule's tau
    by budget, ``rule`` thick and ``budget`` marked."""
    tree, path, labels = rounds[arch, rule, budget]
    shown = RULE_TREE_NODES   # a budget-64 tree drawn whole is too tall to read: its first nodes and the path
    leaves = sum(not [k for k in kids if k < shown] for kids in tree.children[:shown])  # rows of the drawn tree
    fig = Figure(figsize=(MAX_WIDTH_IN, min(7.5, max(4.2, 0.8 + 0.3 * leaves))), layout="constrained")
    tree_ax, curve_ax = fig.subplots(1, 2, width_ratios=(1.5, 1))
    draw_tree(tree, labels=labels, path=path, ax=tree_ax, max_nodes=shown)
    drawn = "" if len(tree.parents) <= shown else f"; its first {shown} nodes and the path drawn"
    tree_ax.set_title(f"{rule}, budget {budget}: the first round of a prompt ({len(path) - 1} accepted{drawn})", fontsize=9)
    _draw_rules(curve_ax, summary[summary.arch == arch], "tau", highlight=rule)
    curve_ax.axvline(budget, color="0.5", lw=0.8, ls="--", label="the budget drawn")
    curve_ax.set(ylabel=METRIC_LABELS["tau"], title=f"{arch}: tau by budget, T = 0")
    legend_right(curve_ax)
    return fig
