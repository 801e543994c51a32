"""Budget-sweep explorer: pick (arch, GDN mode, block size, temperature, prompt, budget
range) and see the budget curves of ``plots.plot_budget_curves`` redrawn.

Plain functions do all the work and are tested without a browser: ``sweep_controls_spec``
(the values each control offers), ``select`` (filter + summarise) and ``render`` (the
figure). ``explorer`` only wires ipywidgets to them. The figure goes into the Output
widget as a PNG display_data output set on ``Output.outputs`` directly, which works the
same inside a kernel and in a plain Python test (no capture context needed).
"""
from __future__ import annotations

import base64
import io

import pandas as pd

from . import plots

ALL = "all"


def _is_raw(frame: pd.DataFrame) -> bool:
    """True for a results frame (one row per config x prompt), False for a summary."""
    return "_metrics" in frame.columns


def _int_budgets(frame: pd.DataFrame) -> list[int]:
    ddtree = frame[(frame["method"] == "ddtree") & (frame["budget"] != "auto")]
    return sorted({int(b) for b in ddtree["budget"]})


def sweep_controls_spec(summary: pd.DataFrame) -> dict:
    """Values each control offers, from a summary or a raw results frame.

    Returns {arch: [...], gdn_mode: ['all', modes...], block_size: [...], temperature: [...],
    prompt: ['all', ids...] (ids only from a raw frame), budgets: [...] (int DDTree budgets),
    budget: (min, max)}.
    """
    spec_rows = summary[summary["method"] != "ar"]
    budgets = _int_budgets(summary)
    prompts = sorted(int(p) for p in summary["prompt"].unique()) if _is_raw(summary) else []
    return {
        "arch": sorted(summary["arch"].unique()),
        "gdn_mode": [ALL] + sorted(m for m in spec_rows["gdn_mode"].unique() if m != "-"),
        "block_size": sorted(int(b) for b in spec_rows["block_size"].unique()),
        "temperature": sorted(float(t) for t in summary["temperature"].unique()),
        "prompt": [ALL] + prompts,
        "budgets": budgets,
        "budget": (budgets[0], budgets[-1]) if budgets else (0, 0),
    }


def select(summary_or_frame: pd.DataFrame, arch: str, gdn_mode: str | None, block_size: int | None,
           temperature: float, budget_range: tuple[int, int] | None, prompt: int | str | None = None) -> pd.DataFrame:
    """Summary rows of one (arch, temperature), DDTree budgets within ``budget_range``.

    gdn_mode None / 'all': every mode; otherwise that mode's rows (AR and mla rows, '-',
    stay). block_size None: every block size; otherwise that one (AR rows stay). DFlash,
    AR and 'auto' rows are never cut by ``budget_range`` (inclusive (lo, hi), None: all).
    prompt: None / 'all' summarises every prompt; an int summarises only that prompt's rows
    (needs a raw results frame, not a summary).
    """
    rows = summary_or_frame
    rows = rows[(rows["arch"] == arch) & (rows["temperature"] == temperature)]
    if prompt not in (None, ALL):
        if not _is_raw(rows):
            raise ValueError("select(prompt=<int>) needs the raw results frame, got a summary")
        rows = rows[rows["prompt"] == int(prompt)]
    summary = plots.summarize(rows) if _is_raw(rows) else rows
    keep = pd.Series(True, index=summary.index)
    if gdn_mode not in (None, ALL):
        keep &= summary["gdn_mode"].isin([gdn_mode, "-"])
    if block_size is not None:
        keep &= (summary["block_size"] == block_size) | (summary["method"] == "ar")
    if budget_range is not None:
        lo, hi = budget_range
        numeric = (summary["method"] == "ddtree") & (summary["budget"] != "auto")
        in_range = [lo <= int(b) <= hi if n else True for b, n in zip(summary["budget"], numeric)]
        keep &= pd.Series(in_range, index=summary.index)
    return summary[keep].reset_index(drop=True)


def render(frame: pd.DataFrame, arch: str, gdn_mode=None, block_size=None, temperature: float = 0.0,
           budget_range=None, prompt=None, **plot_kwargs):
    """The budget-curve Figure of ``select(frame, ...)`` (extra kwargs go to the plot)."""
    rows = select(frame, arch, gdn_mode, block_size, temperature, budget_range, prompt)
    modes = None if gdn_mode in (None, ALL) else [gdn_mode]
    return plots.plot_budget_curves(rows, arch, gdn_modes=modes, block_size=block_size,
                                    temperature=temperature, **plot_kwargs)


def figure_output(fig) -> dict:
    """A Jupyter display_data output (PNG + text) for a Figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plots.DPI, bbox_inches="tight")
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": png, "text/plain": "<budget curves figure>"}}


def explorer(frame: pd.DataFrame):
    """ipywidgets.VBox: dropdowns (arch, gdn mode, block size, temperature, prompt), a
    budget SelectionRangeSlider (description 'budget') over the available DDTree budgets,
    and an Output (CSS class 'ddtree-figure') redrawn on every change."""
    import ipywidgets as w

    spec = sweep_controls_spec(frame)
    budgets = spec["budgets"] or [0]
    controls = {
        "arch": w.Dropdown(options=spec["arch"], description="arch"),
        "gdn_mode": w.Dropdown(options=spec["gdn_mode"], description="gdn mode"),
        "block_size": w.Dropdown(options=spec["block_size"], description="block size"),
        "temperature": w.Dropdown(options=spec["temperature"], description="temperature"),
        "prompt": w.Dropdown(options=spec["prompt"], description="prompt"),
        "budget_range": w.SelectionRangeSlider(options=budgets, index=(0, len(budgets) - 1),
                                               description="budget", continuous_update=False),
    }
    out = w.Output()
    out.add_class("ddtree-figure")

    def redraw(_change=None):
        selection = {name: c.value for name, c in controls.items()}
        fig = render(frame, **selection)
        out.outputs = (figure_output(fig),)  # a pyplot-free Figure: nothing to close

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    dropdowns = [controls[k] for k in ("arch", "gdn_mode", "block_size", "temperature", "prompt")]
    return w.VBox([w.HBox(dropdowns[:3]), w.HBox(dropdowns[3:] + [controls["budget_range"]]), out])
