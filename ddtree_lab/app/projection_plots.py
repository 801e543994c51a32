"""Figures of notebook 10 (issues 61, 69): the expert union by budget, the routing correlation, the
published points against the cost model's predictions, the projected speedup by budget, and the
K2.6 bounds as a region (best budget and winner over fixed cost x routing x tree gain).
Drawn in the lab's style (``plots.styled``, log-2 budget axes, legends outside the data);
a notebook shows them with ``plots.show_figure``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .plots import (MAX_WIDTH_IN, METHOD_STYLES, PALETTE, budget_axis, legend_below, legend_right, share_y, spread,
                    styled)

UNION_STYLES = {"tree": {"color": METHOD_STYLES["ddtree"]["color"], "marker": "o", "label": "tree (DDTree)"},
                "chain": {"color": METHOD_STYLES["dflash"]["color"], "marker": "s", "label": "chain (real text)"},
                "independent": {"color": "0.35", "marker": "x", "label": "independent routing"}}
ROUTING_STYLES = {"independent": {"ls": "--", "label": "independent routing"},
                  "fitted to published unions": {"ls": "-", "label": "routing fitted to published unions"},
                  "pairs measured here": {"ls": ":", "label": "routing of the toy's pairs"},
                  "dense": {"ls": "-", "label": "dense target"}}
STACK_COLORS = {"transformers-eager": PALETTE[0], "kernel-floor": PALETTE[2], "lucebox": PALETTE[4]}


@styled
def plot_expert_union(union: pd.DataFrame, pairs: pd.DataFrame, n: int) -> Figure:
    """Left: distinct routed experts per MoE layer (mean over layers and cases) by budget, tree /
    chain / independent, with the n experts there are; right: rho per pair kind, one dot per
    MoE layer, the union-implied fit as a diamond."""
    fig = Figure(figsize=(MAX_WIDTH_IN, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1.4, 1))
    kinds = list(UNION_STYLES)
    for i, kind in enumerate(kinds):
        mean = union[union.kind == kind].groupby("budget")["experts"].mean()
        left.plot(mean.index * spread(i, len(kinds)), mean.values, ms=5, lw=1.6, **UNION_STYLES[kind])
    left.axhline(n, color="0.5", lw=1.0, ls=":", label=f"all {n} routed experts")
    left.set(ylabel="experts per MoE layer (mean)", title="expert union of one verify")
    budget_axis(left, union[union.budget > 0].budget)
    rows = pairs[(pairs.measure == "pairs") & (pairs.pair != "independent")]
    order = list(dict.fromkeys(rows.pair))
    for x, kind in enumerate(order):
        g = rows[rows.pair == kind]
        right.plot(np.full(len(g), x) + np.linspace(-0.15, 0.15, len(g)), g.rho, "o", ms=4, color=PALETTE[x],
                   alpha=0.7, label=f"{kind} pairs (a MoE layer each)")
    fit = pairs[pairs.measure == "union"].set_index("pair")["rho"]
    right.plot([order.index(k) for k in fit.index if k in order], [fit[k] for k in fit.index if k in order], "D",
               ms=8, color="0.2", label="union-implied fit")
    right.axhline(0, color="0.6", lw=1.0, ls="--", label="independent (rho 0)")
    right.set_xticks(range(len(order)), order)
    right.set(ylabel="routing correlation rho", title="experts two rows share")
    legend_below(fig, ncols=4)
    return fig


@styled
def plot_predictions(published: pd.DataFrame) -> Figure:
    """Predicted against published speedup, one marker per point, coloured by stack; the
    calibration points as stars; the diagonal and the +-25% band."""
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    lo, hi = 0.8 * published[["predicted_speedup", "published_speedup"]].min().min(), \
        1.15 * published[["predicted_speedup", "published_speedup"]].max().max()
    xs = np.linspace(lo, hi, 50)
    ax.fill_between(xs, 0.75 * xs, 1.25 * xs, color="0.9", label="within 25%")
    ax.plot(xs, xs, color="0.5", lw=1.0, ls=":", label="predicted = published")
    for stack, g in published.groupby("stack", sort=False):
        for cal, h in g.groupby("calibration"):
            ax.plot(h.published_speedup, h.predicted_speedup, "*" if cal else "o", ms=12 if cal else 6, ls="none",
                    color=STACK_COLORS.get(stack, "0.3"), label=f"{stack}{' (the fitted point)' if cal else ''}")
    ax.set(xlabel="published speedup over AR", ylabel="predicted speedup over AR", xlim=(lo, hi), ylim=(lo, hi),
           title="published points: prediction vs publication")
    legend_right(ax)
    return fig


@styled
def plot_projection(table: pd.DataFrame, model: str, accelerator: str) -> Figure:
    """Projected speedup over AR by budget, one panel per stack: DDTree under each routing bound
    (solid: measured correlation, dashed: independent), the DFlash chain as a flat line."""
    rows = table[(table.model == model) & (table.accelerator == accelerator) & table.published_speedup.isna()]
    stacks = list(dict.fromkeys(rows["stack"]))
    fig = Figure(figsize=(min(MAX_WIDTH_IN, 4.6 * len(stacks)), 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(stacks)))
    for ax, stack in zip(axes, stacks):
        g = rows[rows["stack"] == stack]
        for routing, h in g.groupby("routing", sort=False):
            trees = h[h.method == "ddtree"]
            ax.plot(trees.budget, trees.predicted_speedup, marker="o", ms=4, color=METHOD_STYLES["ddtree"]["color"],
                    ls=ROUTING_STYLES[routing]["ls"], label=f"DDTree, {ROUTING_STYLES[routing]['label']}")
            chain = float(h[h.method == "dflash"].predicted_speedup.iloc[0])
            ax.axhline(chain, color=METHOD_STYLES["dflash"]["color"], lw=1.2, ls=ROUTING_STYLES[routing]["ls"],
                       label=f"DFlash chain, {ROUTING_STYLES[routing]['label']}")
        ax.axhline(1.0, color=METHOD_STYLES["ar"]["color"], lw=1.0, ls=":", label="AR")
        budget_axis(ax, g[g.method == "ddtree"].budget)
        ax.set(ylabel="projected speedup over AR", title=f"{stack}")
    share_y(axes)
    gpus = int(rows.gpus.iloc[0]) if "gpus" in rows and len(rows) else 1
    fig.suptitle(f"{model} on {gpus} x {accelerator}: a projection (nothing here ran on a GPU)")
    legend_below(fig, ncols=3)
    return fig


@styled
def plot_rho_scaled(curve: pd.DataFrame, scale: float, bounds: dict[str, pd.DataFrame], title: str) -> Figure:
    """The widget's figure: projected speedup by budget with the measured correlation scaled by
    ``scale``, between the two bounds (thin), the chain's level and the best budget marked."""
    fig = Figure(figsize=(7.6, 3.8), layout="constrained")
    ax = fig.subplots()
    t = curve[curve.method == "ddtree"]
    for name, c in bounds.items():
        b = c[c.method == "ddtree"]
        if np.allclose(b.predicted_speedup.values, t.predicted_speedup.values):
            continue  # the curve is this bound (scale 0 or 1): drawn once, thick
        ax.plot(b.budget, b.predicted_speedup, color="0.6", lw=1.0, ls=ROUTING_STYLES[name]["ls"],
                label=f"bound: {ROUTING_STYLES[name]['label']}")
    ax.plot(t.budget, t.predicted_speedup, marker="o", ms=4, color=METHOD_STYLES["ddtree"]["color"], lw=2.0,
            label=f"DDTree, correlation x {scale:g}")
    chain = float(curve[curve.method == "dflash"].predicted_speedup.iloc[0])
    ax.axhline(chain, color=METHOD_STYLES["dflash"]["color"], lw=1.2, label="DFlash chain")
    best = t.loc[t.predicted_speedup.idxmax()]
    ax.axvline(best.budget, color="0.4", lw=0.8, ls="-.", label=f"best budget {int(best.budget)}")
    budget_axis(ax, t.budget)
    ax.set(ylabel="projected speedup over AR", title=title)
    legend_right(ax)
    return fig


SHORT_ROUTING = {"independent": "independent", "pairs measured here": "toy pairs", "fitted to published unions": "published fit"}


def _short_gain(gain: str) -> str:
    """'published Qwen3-Coder-30B-A3B (10.72 / 8.02)' -> 'Qwen3-Coder'; "lab's measured shape" -> 'lab'."""
    name = gain.split(" (")[0].removeprefix("published ")
    return "lab" if name.startswith("lab") else name.removesuffix("-30B-A3B").replace("Qwen3-Coder", "Coder")


@styled
def plot_bounds(bounds: pd.DataFrame, chain_taus=None) -> Figure:
    """The region (``k26_bounds.csv``): one panel per chain tau; rows routing / tree gain, columns
    the fixed cost per forward; a cell's text is the best budget (per-node grid), "C" where the
    chain beats every tree; its colour, darker for smaller budgets, repeats the number."""
    taus = list(chain_taus or sorted(bounds.chain_tau.unique()))
    fig = Figure(figsize=(MAX_WIDTH_IN, 5.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(taus), sharey=True))
    rows = list(dict.fromkeys(zip(bounds.routing, bounds.tree_gain)))
    costs = sorted(bounds.fixed_ms.unique())
    top = np.log2(bounds.best_budget.max())
    for ax, tau in zip(axes, taus):
        g = bounds[bounds.chain_tau == tau].set_index(["routing", "tree_gain", "fixed_ms"])
        grid = np.array([[np.log2(g.loc[(r, t, f), "best_budget"]) for f in costs] for r, t in rows])
        ax.imshow(grid, cmap="viridis", vmin=0, vmax=max(top, 1), aspect="auto")
        for i, (r, t) in enumerate(rows):
            for j, f in enumerate(costs):
                cell = g.loc[(r, t, f)]
                ax.text(j, i, "C" if cell.winner == "chain" else str(int(cell.best_budget)), ha="center",
                        va="center", fontsize=8, color="white" if grid[i, j] < 0.6 * top else "black")
        ax.set_xticks(range(len(costs)), [f"{c:g}" for c in costs])
        ax.set(xlabel="fixed ms per forward", title=f"chain tau {tau:g}")
        ax.grid(False)
    axes[0].set_yticks(range(len(rows)), [f"{SHORT_ROUTING.get(r, r)} / {_short_gain(t)}" for r, t in rows])
    fig.suptitle("Kimi K2.6, 8 x H200, kernel floor + fixed cost: best budget (per-node grid); C: the chain wins "
                 "(a projection)")
    return fig
