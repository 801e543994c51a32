"""Figures of notebook 11 (issue 68): the naive verify's error per tree node for every hybrid
class, and naive against exact tau by budget, one panel per recurrent family. Drawn in the lab's
style (``plots.styled``, log axes, legends outside the data); shown with ``plots.show_figure``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .plots import MAX_COLS, MAX_WIDTH_IN, PALETTE, budget_axis, legend_below, share_y, styled

MODE_STYLES = {"naive": {"color": PALETTE[3], "marker": "x", "ls": "--", "label": "naive (the tree read as a chain)"},
               "exact": {"color": PALETTE[0], "marker": "o", "ls": "-", "label": "exact (the fork / one-pass form)"}}
FLOOR = 1e-17  # an error of 0 drawn at the axis floor


@styled
def plot_family_leak(leak: pd.DataFrame) -> Figure:
    """One row per class (grouped by family), x: max |dlogit| of the naive verify against the
    node's own path, log scale; nodes before the first branch in blue, after it in red."""
    order = leak.sort_values(["family", "class"])["class"].drop_duplicates().tolist()
    fig = Figure(figsize=(MAX_WIDTH_IN, 0.32 * len(order) + 1.4), layout="constrained")
    ax = fig.subplots()
    for after, color, label in ((False, PALETTE[0], "before the first branch"),
                                (True, PALETTE[3], "after the first branch")):
        rows = leak[leak.after_branch == after]
        y = np.array([order.index(c) for c in rows["class"]]) + (0.12 if after else -0.12)
        ax.plot(rows.max_dlogit.clip(lower=FLOOR), y, "o", ms=4, alpha=0.7, color=color, label=label)
    ax.axvline(1e-6, color="0.4", lw=1.0, ls=":", label="1e-6: exact (float64)")
    ax.set_xscale("log")
    labels = [f"{c.removesuffix('ForCausalLM')} ({leak[leak['class'] == c].family.iloc[0]})" for c in order]
    ax.set_yticks(range(len(order)), labels)
    ax.invert_yaxis()
    ax.set(xlabel="naive verify: max |dlogit| against the node's own path", title="the leak, node by node")
    legend_below(fig, ncols=3)
    return fig


@styled
def plot_family_tau(table: pd.DataFrame) -> Figure:
    """Naive and exact tau by budget, one panel per family (at most ``MAX_COLS`` a row)."""
    fams = list(dict.fromkeys(table.sort_values("family").family))
    cols = min(MAX_COLS, len(fams))
    rows_n = -(-len(fams) // cols)
    fig = Figure(figsize=(MAX_WIDTH_IN, 3.0 * rows_n + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows_n, cols, squeeze=False)).ravel()
    for ax, fam in zip(axes, fams):
        g = table[table.family == fam]
        for mode, style in MODE_STYLES.items():
            s = g[g["mode"] == mode].sort_values("budget")
            ax.plot(s.budget, s.tau, ms=5, lw=1.6, **style)
        ax.set(title=f"{fam} ({g['class'].iloc[0].removesuffix('ForCausalLM')})", ylabel="tau (tokens per round)")
        budget_axis(ax, g.budget)
    for ax in axes[len(fams):]:
        ax.set_visible(False)
    share_y(axes[:len(fams)])
    legend_below(fig, ncols=2)
    return fig
