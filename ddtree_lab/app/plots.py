"""Figures for the lab: budget curves, draft trees, error scatters, reliability diagrams.

One fixed style (``STYLE``: seaborn whitegrid, readable fonts, dpi 110) applied inside every
plotting function, so a figure looks the same whatever the caller's rcParams. Figures are
built as ``matplotlib.figure.Figure`` objects (no pyplot state: nothing leaks, nothing is
auto-shown twice in a notebook) and every function returns its Figure. ``save_figure``
writes ``figures/<name>.png`` small enough for git.

``summarize`` turns a results frame (``ResultsStore.frame()``, one row per (config,
prompt)) into one row per config: tau, tokens/s, speedup over AR (DDTree paper, arXiv
2604.12989, section 5 reports the same two numbers), and the T = 0 losslessness check
(``matches_ar``, ``first_divergence``).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from ..common import FIGURES_DIR as ROOT_FIGURES
from ..experiments.leakage import first_divergence
from ..experiments.sweep import AXES

# SMOKE runs (tests) set DDTREE_LAB_FIGURES so they never overwrite the real figures
FIGURES_DIR = Path(os.environ.get("DDTREE_LAB_FIGURES", ROOT_FIGURES))
DPI = 110
STYLE = {
    **sns.axes_style("whitegrid"),
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9,
    "ytick.labelsize": 9, "legend.fontsize": 8, "figure.titlesize": 11,
    "figure.dpi": DPI, "savefig.dpi": DPI, "axes.prop_cycle": mpl.cycler(color=sns.color_palette("colorblind")),
}
MODE_COLORS = dict(zip(("naive", "fork", "wy", "-"), sns.color_palette("colorblind")[:3] + [sns.color_palette("colorblind")[0]]))
METRIC_LABELS = {"tau": "τ (tokens per round)", "tokens_per_s": "tokens / s", "speedup": "speedup over AR"}
PATH_COLOR = sns.color_palette("colorblind")[1]


def use_style() -> None:
    """Apply the lab's fixed figure style globally (notebooks call it once)."""
    mpl.rcParams.update(STYLE)


def save_figure(fig: Figure, name: str) -> Path:
    """Write ``FIGURES_DIR/<name>.png`` (bbox tight, dpi 110) and return its path."""
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    path = FIGURES_DIR / f"{name}.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def _new_axes(ax, n: int, panel: tuple[float, float]) -> tuple[Figure, list]:
    """(figure, n axes): a fresh 1 x n figure, or the caller's Axes (one or a sequence)."""
    if ax is None:
        fig = Figure(figsize=(panel[0] * n, panel[1]), layout="constrained")
        return fig, list(fig.subplots(1, n, squeeze=False)[0])
    axes = list(np.atleast_1d(ax))
    if len(axes) != n:
        raise ValueError(f"ax must hold {n} Axes (one per panel), got {len(axes)}")
    return axes[0].figure, axes


# ----------------------------------------------------------------------------- summary

def _row_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (config, prompt) row: tokens, seconds, tree-size sum/count, match with AR."""
    ref_key = ["arch", "temperature", "max_new_tokens", "prompt"]
    ar = frame[frame["method"] == "ar"]
    ar_tokens = {tuple(k): m["tokens"] for k, m in zip(ar[ref_key].itertuples(index=False), ar["_metrics"])}
    stats = []
    for key, m, mnt in zip(frame[ref_key].itertuples(index=False), frame["_metrics"], frame["max_new_tokens"]):
        ref = ar_tokens.get(tuple(key))
        div = np.nan if ref is None else first_divergence(ref, m["tokens"])
        div = mnt if div is None else div  # identical: counts as diverging after the last token
        sizes = m.get("tree_sizes") or []
        stats.append({"_n_tokens": len(m["tokens"]), "_seconds": m["timings"]["total"],
                      "_size_sum": float(sum(sizes)), "_size_n": len(sizes),
                      "_match": np.nan if ref is None else float(m["tokens"] == ref), "_div": div})
    columns = ["_n_tokens", "_seconds", "_size_sum", "_size_n", "_match", "_div"]
    return pd.DataFrame(stats, index=frame.index, columns=columns)


def _sort_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Order rows arch, method (ar, dflash, ddtree), gdn_mode, block, T, length, budget ('auto' last)."""
    order = {"ar": 0, "dflash": 1, "ddtree": 2}
    keys = summary.assign(_m=summary["method"].map(order),
                          _b=[math.inf if b == "auto" else float(b) for b in summary["budget"]])
    keys = keys.sort_values(["arch", "_m", "gdn_mode", "block_size", "temperature", "max_new_tokens", "_b"])
    return keys.drop(columns=["_m", "_b"]).reset_index(drop=True)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per config (the AXES columns) from a results frame (one row per config x prompt).

    frame needs AXES, ``prompt``, ``tau`` and ``_metrics`` (tokens, tree_sizes, timings.total).
    Returns AXES + n_prompts, tau (mean over prompts), tokens_per_s (sum of tokens / sum of
    total seconds over prompts), speedup (tokens_per_s over the AR config with the same
    arch, temperature and max_new_tokens; NaN without one), matches_ar (fraction of prompts
    whose tokens equal AR's for that prompt), first_divergence (mean first differing
    position, max_new_tokens when identical), mean_tree_size (draft nodes per round).
    """
    rows = pd.concat([frame, _row_stats(frame)], axis=1)
    out = rows.groupby(list(AXES), sort=False, dropna=False).agg(
        n_prompts=("prompt", "nunique"), tau=("tau", "mean"), _n_tokens=("_n_tokens", "sum"),
        _seconds=("_seconds", "sum"), _size_sum=("_size_sum", "sum"), _size_n=("_size_n", "sum"),
        matches_ar=("_match", "mean"), first_divergence=("_div", "mean")).reset_index()
    out["tokens_per_s"] = out["_n_tokens"] / out["_seconds"].clip(lower=1e-12)
    out["mean_tree_size"] = out["_size_sum"] / out["_size_n"].where(out["_size_n"] > 0)
    ref_key = ["arch", "temperature", "max_new_tokens"]
    ar = out[out["method"] == "ar"].set_index(ref_key)["tokens_per_s"]
    ar_tps = [ar.get(tuple(k), np.nan) for k in out[ref_key].itertuples(index=False)]
    out["speedup"] = out["tokens_per_s"] / np.asarray(ar_tps, dtype=float)
    cols = list(AXES) + ["n_prompts", "tau", "tokens_per_s", "speedup", "matches_ar",
                         "first_divergence", "mean_tree_size"]
    return _sort_summary(out[cols])


# ----------------------------------------------------------------------------- budget curves

def _most_common(values: pd.Series):
    """The most frequent value (ties: the smallest); None for an empty series."""
    counts = values.value_counts()
    if counts.empty:
        return None
    return min(counts.index[counts == counts.max()])


def slice_summary(summary: pd.DataFrame, arch: str, block_size=None, temperature=None,
                  max_new_tokens=None) -> tuple[pd.DataFrame, dict]:
    """Rows of one arch at one (block size, temperature, length), AR rows kept.

    A None choice takes the value most DDTree rows have (ties: the smallest). Returns
    (rows, choices actually used).
    """
    rows = summary[summary["arch"] == arch]
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
    """GDN modes to draw: the requested ones present among DDTree rows (mla: ['-'])."""
    present = list(dict.fromkeys(rows.loc[rows["method"] == "ddtree", "gdn_mode"]))
    return [m for m in present if gdn_modes is None or m in gdn_modes or m == "-"]


def budget_curves(rows: pd.DataFrame, metric: str, gdn_modes=None) -> dict[str, pd.DataFrame]:
    """{gdn_mode: DataFrame(budget, value)} for the int-budget DDTree rows, budget ascending."""
    curves = {}
    for mode in _modes(rows, gdn_modes):
        sel = rows[(rows["method"] == "ddtree") & (rows["gdn_mode"] == mode) & (rows["budget"] != "auto")]
        curve = pd.DataFrame({"budget": sel["budget"].astype(int), "value": sel[metric].astype(float)})
        curves[mode] = curve.sort_values("budget").reset_index(drop=True)
    return curves


def curve_peaks(summary: pd.DataFrame, arch: str, metric: str = "tokens_per_s", gdn_modes=None,
                block_size=None, temperature=None, max_new_tokens=None) -> dict[str, tuple[int, float]]:
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
    return "ddtree" if mode == "-" else f"ddtree {mode}"


def _draw_references(ax, rows: pd.DataFrame, metric: str, modes: list[str]) -> None:
    """Dashed horizontal lines: DFlash per drawn mode, AR in grey."""
    for mode in modes:
        ref = rows[(rows["method"] == "dflash") & (rows["gdn_mode"] == mode)][metric].dropna()
        if len(ref):
            label = "dflash" if mode == "-" else f"dflash {mode}"
            ax.axhline(ref.iloc[0], ls="--", lw=1.2, color=MODE_COLORS[mode], alpha=0.8, label=label)
    ar = rows[rows["method"] == "ar"][metric].dropna()
    if len(ar):
        ax.axhline(ar.iloc[0], ls=":", lw=1.5, color="0.4", label="ar")


def _draw_metric(ax, rows: pd.DataFrame, metric: str, gdn_modes, mark_budget) -> dict:
    """One panel: curves, peaks, references, the auto star, the mark_budget line."""
    curves = budget_curves(rows, metric, gdn_modes)
    peaks = _peaks(curves)
    for k, (mode, curve) in enumerate(curves.items()):
        color = MODE_COLORS[mode]
        ax.plot(curve["budget"], curve["value"], marker="o", ms=3.5, lw=1.6, color=color, label=_mode_label(mode))
        if mode in peaks:
            b, v = peaks[mode]
            ax.plot([b], [v], "o", ms=9, mfc="none", mec=color, mew=1.8)
            ax.annotate(f"{v:.3g} @ {b}", (b, v), xytext=(0, 7 + 11 * k),
                        textcoords="offset points", ha="center", fontsize=8, color=color)
        auto = rows[(rows["method"] == "ddtree") & (rows["gdn_mode"] == mode) & (rows["budget"] == "auto")]
        if len(auto) and np.isfinite(auto["mean_tree_size"].iloc[0]):
            ax.plot([auto["mean_tree_size"].iloc[0]], [auto[metric].iloc[0]], "*", ms=13, color=color,
                    mec="k", mew=0.6, ls="none", label=f"auto ({mode})" if mode != "-" else "auto")
    _draw_references(ax, rows, metric, list(curves))
    budgets = sorted({int(b) for c in curves.values() for b in c["budget"]})
    if mark_budget is not None:
        ax.axvline(mark_budget, color="0.55", lw=1, ls="-.", label=f"budget {mark_budget} = {mark_budget + 1}-token verify block")
    if budgets:
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
    else:
        ax.text(0.5, 0.5, "no DDTree rows", transform=ax.transAxes, ha="center", va="center")
    ax.margins(y=0.15)
    ax.set_xlabel("budget (draft nodes)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    return peaks


def plot_budget_curves(summary: pd.DataFrame, arch: str, metrics=("tau", "tokens_per_s", "speedup"),
                       gdn_modes=None, block_size=None, mark_budget=31, ax=None,
                       temperature=None, max_new_tokens=None) -> Figure:
    """One panel per metric: DDTree curves vs budget (log2 x), one line per gdn_mode.

    summary: ``summarize`` output (AXES, the metric columns, mean_tree_size). Draws each
    curve's peak (circle + "value @ budget"), DFlash (dashed, per mode) and AR (dotted grey)
    references, the 'auto' row as a star at its mean tree size, and a vertical line at
    ``mark_budget`` (None: none). block_size / temperature / max_new_tokens None: the most
    common value (see ``slice_summary``). ax: None, or one Axes per metric.
    """
    with mpl.rc_context(STYLE):
        rows, chosen = slice_summary(summary, arch, block_size, temperature, max_new_tokens)
        fig, axes = _new_axes(ax, len(metrics), panel=(3.7, 3.0))
        for a, metric in zip(axes, metrics):
            _draw_metric(a, rows, metric, gdn_modes, mark_budget)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="outside right upper")
        fig.suptitle(f"{arch}: block {chosen['block_size']}, T = {chosen['temperature']}, "
                     f"{chosen['max_new_tokens']} new tokens")
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
    drawn as thick coloured edges and coloured nodes. Edge width is proportional to the
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
            fig = Figure(figsize=(min(12, 1.0 + 0.95 * (max(x) + 1)), min(10, 0.8 + 0.3 * (1 - min(y)))))
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
        for node in keep:
            i = index[node]
            face = PATH_COLOR if node in on_path else ("0.85" if node == 0 else "white")
            ax.text(x[i], y[i], _printable(labels[node]), ha="center", va="center", fontsize=7, zorder=2,
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
                       title: str | None = None, floor: float = 1e-12) -> Figure:
    """Scatter of per-node errors on a log y axis (leakage study).

    x, y: array-likes [n]; hue: optional array-like [n] of categories (one colour each,
    sorted). Errors below ``floor`` (exact zeros) are drawn at ``floor``.
    """
    x, y = np.asarray(x, dtype=float), np.clip(np.asarray(y, dtype=float), floor, None)
    hue = np.zeros(len(x), dtype=int) if hue is None else np.asarray(hue)
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(ax, 1, panel=(4.8, 3.2))
        groups = list(dict.fromkeys(hue.tolist()))
        try:
            groups.sort()
        except TypeError:  # mixed kinds: keep the order of first appearance
            pass
        for group in groups:
            sel = hue == group
            ax.scatter(x[sel], y[sel], s=14, alpha=0.75, label=str(group) if len(groups) > 1 else None)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if len(groups) > 1:
            ax.legend()
        if title:
            ax.set_title(title)
    return fig


def plot_reliability(pred, observed, counts, ax=None, title: str = "reliability") -> Figure:
    """Reliability diagram: mean predicted accept probability per bin vs observed frequency.

    pred, observed, counts: array-likes [n_bins] (empty bins, count 0, are skipped). Marker
    area grows with the count; the title carries the expected calibration error
    ECE = sum(count * |pred - observed|) / sum(count).
    """
    pred, observed, counts = (np.asarray(a, dtype=float) for a in (pred, observed, counts))
    ok = (counts > 0) & np.isfinite(pred) & np.isfinite(observed)
    ece = float((counts[ok] * np.abs(pred[ok] - observed[ok])).sum() / max(counts[ok].sum(), 1))
    with mpl.rc_context(STYLE):
        fig, (ax,) = _new_axes(ax, 1, panel=(3.6, 3.4))
        ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfect")
        ax.plot(pred[ok], observed[ok], color=PATH_COLOR, lw=1.2)
        sizes = 12 + 120 * np.sqrt(counts[ok] / max(counts[ok].max(initial=1), 1))
        ax.scatter(pred[ok], observed[ok], s=sizes, color=PATH_COLOR, ec="k", lw=0.5, zorder=3, label="bins")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted accept probability")
        ax.set_ylabel("observed accept frequency")
        ax.set_title(f"{title} (ECE {ece:.3f})")
        ax.legend(loc="upper left")
    return fig
