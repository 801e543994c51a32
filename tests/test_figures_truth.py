"""Figures that tell the truth (issue 19): exact zeros marked on log axes, legible log
ticks, no series hidden under another, and an AR = 1 line in every speedup view."""
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

from ddtree_lab.app import plots


def _legend(ax) -> list[str]:
    """The labels of the axes' own legend and of its figure's legends (``plots.legend_below``)."""
    legends = ([ax.get_legend()] if ax.get_legend() else []) + list(ax.figure.legends)
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def test_value_axis_labels_each_value_once_in_plain_numbers():
    fig, ax = plt.subplots()
    temps = [0.25, 0.5, 1.0, 2.0, 4.0]
    ax.plot(temps, [5, 4, 3, 2, 1])
    plots.value_axis(ax, temps)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.25", "0.5", "1", "2", "4"]
    assert len(ax.xaxis.get_minorticklocs()) == 0   # no '3x10^-1 4x10^-1' minor labels to overlap
    plt.close(fig)


def test_error_strip_draws_exact_zeros_at_the_floor_and_says_so():
    errors = pd.DataFrame({"setting": ["f64"] * 3 + ["bf16"] * 3, "err": [0.0, 0.0, 1e-15, 0.0, 1e-3, 6.25e-2]})
    fig = plots.plot_error_strip(errors, ["f64", "bf16"], ylabel="err", title="t")
    ax = fig.axes[0]
    assert "exact 0 (drawn at the axis floor): 3" in _legend(ax)
    zeros = ax.collections[-1].get_offsets()
    assert len(zeros) == 3 and np.allclose(zeros[:, 1], 1e-16)       # a tenth of the smallest non-zero error
    assert ax.get_ylim()[0] < 1e-16 < 1e-15                          # inside the axis, below every real error
    plt.close(fig)


def test_best_budget_never_hides_one_target_under_the_other():
    table = pd.DataFrame([{"arch": a, "temperature": t, "concurrency": c, "best_budget": 4}
                          for a in ("gdn", "mla") for t in (0.0, 1.0) for c in (1, 4, 16)])
    ax = plots.plot_best_budget(table).axes[0]
    points = {line.get_label(): (tuple(line.get_xdata()), line.get_marker(), line.get_linestyle())
              for line in ax.get_lines()}
    assert len(set(points.values())) == 4, points                   # equal budgets, four distinct series
    assert points["gdn, T = 1"][0] != points["mla, T = 1"][0]       # offset sideways
    plt.close("all")


def test_concurrency_budget_view_keeps_the_ar_line_in_view():
    rows = [{"arch": "gdn", "temperature": 1.0, "concurrency": 4, "method": "ddtree", "budget": b,
             "tokens_per_s": 30.0 + b, "speedup": 0.58 + 0.01 * i, "mean_tree_size": b} for i, b in enumerate((1, 4, 16))]
    fig = plots.plot_concurrency_budgets(pd.DataFrame(rows), "gdn", 1.0, 4)
    ax = fig.axes[1]
    ar = [line for line in ax.get_lines() if line.get_label() == "batched AR (1)"]
    assert ar and np.allclose(ar[0].get_ydata(), 1.0)
    lo, hi = ax.get_ylim()
    assert lo < 0.58 and hi > 1.0
    plt.close(fig)
