"""Budget-sweep explorer: pick (arch, GDN mode, block size, temperature, length, prompt,
budget range) and see the budget curves of ``plots.plot_budget_curves`` redrawn.

Plain functions do all the work and are tested without a browser: ``sweep_controls_spec``
(the values each control offers, per arch), ``select`` (filter + summarise), ``title`` and
``render`` (the figure). ``explorer`` only wires ipywidgets to them. The figure goes into
the Output widget as a PNG display_data output set on ``Output.outputs`` directly, which
works the same inside a kernel and in a plain Python test (no capture context needed).
"""
from __future__ import annotations

import base64

import ipywidgets as w
import pandas as pd

from ..experiments.plumbing.summary import summarize
from ..experiments.plumbing.sweep import names_mode
from ..experiments.studies import your_tree
from . import plots
from ..experiments.studies import gpu_projection as gp
from .projection_plots import plot_rho_scaled

ALL = "all"


def _is_raw(frame: pd.DataFrame) -> bool:
    """True for a results frame (one row per config x prompt), False for a summary."""
    return "_metrics" in frame.columns


def _int_budgets(frame: pd.DataFrame) -> list[int]:
    ddtree = frame[(frame["method"] == "ddtree") & (frame["budget"] != "auto")]
    return sorted({int(b) for b in ddtree["budget"]})


def sweep_controls_spec(frame: pd.DataFrame, arch: str | None = None) -> dict:
    """Values each control offers, from a summary or a raw results frame.

    arch: restrict every value but ``arch`` to that arch's rows (None: all rows). Returns
    {arch: [...], gdn_mode: ['all', modes...] ('all' only with two modes or more; mla: ['all'] only), block_size: [...],
    temperature: [...], max_new_tokens: [...], prompt: ['all', ids...] (ids only from a raw
    frame), budgets: [...] (int DDTree budgets), budget: (min, max)}.
    """
    rows = frame if arch is None else frame[frame["arch"] == arch]
    spec_rows = rows[rows["method"] != "ar"]
    budgets = _int_budgets(rows)
    prompts = sorted(int(p) for p in rows["prompt"].unique()) if _is_raw(rows) else []
    modes = sorted(spec_rows.loc[spec_rows["arch"].map(names_mode), "gdn_mode"].unique())
    return {
        "arch": sorted(frame["arch"].unique()),
        "gdn_mode": ([ALL] if len(modes) != 1 else []) + modes,   # 'all' only where it draws more than one mode
        "block_size": sorted(int(b) for b in spec_rows["block_size"].unique()),
        "temperature": sorted(float(t) for t in rows["temperature"].unique()),
        "max_new_tokens": sorted(int(n) for n in rows["max_new_tokens"].unique()),
        "prompt": [ALL] + prompts,
        "budgets": budgets,
        "budget": (budgets[0], budgets[-1]) if budgets else (0, 0),
    }


def select(summary_or_frame: pd.DataFrame, arch: str, gdn_mode: str | None, block_size: int | None,
           temperature: float, budget_range: tuple[int, int] | None, *, prompt: int | str | None = None,
           max_new_tokens: int | None = None) -> pd.DataFrame:
    """Summary rows of one (arch, temperature), DDTree budgets within ``budget_range``.

    gdn_mode None / 'all': every mode; otherwise that mode's rows (AR rows and the rows of a
    target whose mode says nothing, ``sweep.names_mode``, stay). block_size None: every block size; otherwise that one (AR rows stay). DFlash,
    AR and 'auto' rows are never cut by ``budget_range`` (inclusive (lo, hi), None: all).
    prompt: None / 'all' summarises every prompt; an int summarises only that prompt's rows
    (needs a raw results frame, not a summary). max_new_tokens None: every length.
    """
    rows = summary_or_frame
    rows = rows[(rows["arch"] == arch) & (rows["temperature"] == temperature)]
    if max_new_tokens is not None:
        rows = rows[rows["max_new_tokens"] == max_new_tokens]
    if prompt not in (None, ALL):
        if not _is_raw(rows):
            raise ValueError("select(prompt=<int>) needs the raw results frame, got a summary")
        rows = rows[rows["prompt"] == int(prompt)]
    summary = summarize(rows) if _is_raw(rows) else rows
    keep = pd.Series(True, index=summary.index)
    if gdn_mode not in (None, ALL):
        keep &= (summary["gdn_mode"] == gdn_mode) | (summary["method"] == "ar") | ~summary["arch"].map(names_mode)
    if block_size is not None:
        keep &= (summary["block_size"] == block_size) | (summary["method"] == "ar")
    if budget_range is not None:
        lo, hi = budget_range
        numeric = (summary["method"] == "ddtree") & (summary["budget"] != "auto")
        in_range = [lo <= int(b) <= hi if n else True for b, n in zip(summary["budget"], numeric)]
        keep &= pd.Series(in_range, index=summary.index)
    return summary[keep].reset_index(drop=True)


def title(arch: str, gdn_mode=None, block_size=None, temperature=None, budget_range=None, prompt=None,
          *, max_new_tokens=None) -> str:
    """The selection in words, e.g. 'gdn · wy · block 16 · T = 0.0 · 64 new tokens · all
    prompts · budgets 1-256' (None parts are left out; mla has no GDN mode)."""
    parts = [arch]
    if arch != "mla":
        parts.append("all GDN modes" if gdn_mode in (None, ALL) else gdn_mode)
    if block_size is not None:
        parts.append(f"block {block_size}")
    if temperature is not None:
        parts.append(f"T = {temperature}")
    if max_new_tokens is not None:
        parts.append(f"{max_new_tokens} new tokens")
    parts.append("all prompts" if prompt in (None, ALL) else f"prompt {prompt}")
    if budget_range is not None:
        parts.append(f"budgets {budget_range[0]}-{budget_range[1]}")
    return " · ".join(parts)


def render(frame: pd.DataFrame, arch: str, gdn_mode=None, block_size=None, temperature: float = 0.0,
           budget_range=None, *, prompt=None, max_new_tokens=None, **plot_kwargs):
    """The budget-curve Figure of ``select(frame, ...)``, titled with the selection (extra
    kwargs go to the plot)."""
    rows = select(frame, arch, gdn_mode, block_size, temperature, budget_range, prompt=prompt,
                  max_new_tokens=max_new_tokens)
    modes = None if gdn_mode in (None, ALL) else [gdn_mode]
    name = title(arch, gdn_mode, block_size, temperature, budget_range, prompt, max_new_tokens=max_new_tokens)
    return plots.plot_budget_curves(rows, arch, gdn_modes=modes, block_size=block_size, temperature=temperature,
                                    max_new_tokens=max_new_tokens, title=name, **plot_kwargs)


def figure_output(fig) -> dict:
    """A Jupyter display_data output (PNG + text) for a Figure."""
    png = base64.b64encode(plots.figure_png(fig)).decode("ascii")
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": png, "text/plain": "[budget curves figure]"}}


DROPDOWNS = {"arch": "arch", "gdn_mode": "GDN mode", "block_size": "block size", "temperature": "temperature",
             "max_new_tokens": "new tokens", "prompt": "prompt"}


def explorer_defaults(frame: pd.DataFrame, arch: str, gdn_mode=ALL, block_size=None, temperature=0.0,
                      max_new_tokens=None) -> dict:
    """The explorer's starting selection for ``arch``: the given values where ``arch`` has
    them (block_size may be {arch: size}, e.g. the published blocks), else the value most
    DDTree rows have; prompt 'all', the whole budget range."""
    spec = sweep_controls_spec(frame, arch)
    ddtree = frame[(frame["arch"] == arch) & (frame["method"] == "ddtree")]
    wanted = {"gdn_mode": gdn_mode, "temperature": temperature, "max_new_tokens": max_new_tokens,
              "block_size": block_size.get(arch) if isinstance(block_size, dict) else block_size}
    chosen = {"arch": arch, "prompt": ALL, "budget_range": spec["budget"]}
    for name, value in wanted.items():
        options = spec[name]
        common = plots._most_common(ddtree[name]) if name != "gdn_mode" and len(ddtree) else None
        chosen[name] = next((v for v in (value, common, *options[:1]) if v is not None and v in options), None)
    return chosen


def budgets_at(frame: pd.DataFrame, arch: str, temperature: float, block_size=None, gdn_mode=None,
               max_new_tokens=None) -> list[int]:
    """The int DDTree budgets stored at this selection (the budget slider's range follows what
    the figure can draw: at T = 0.3 the sweep stops at 64, so the slider does too)."""
    rows = frame[(frame["arch"] == arch) & (frame["temperature"] == temperature)]
    for name, value in (("block_size", block_size), ("max_new_tokens", max_new_tokens)):
        if value is not None:
            rows = rows[rows[name] == value]
    if gdn_mode not in (None, ALL) and names_mode(arch):
        rows = rows[rows["gdn_mode"] == gdn_mode]
    return _int_budgets(rows)


def _fit_slider(slider, budgets: list[int]) -> None:
    """The budget slider over ``budgets`` (the whole range selected), greyed out with one or none."""
    slider.options = budgets or [0]
    slider.value = (budgets[0], budgets[-1]) if budgets else (0, 0)
    slider.disabled = len(slider.options) < 2


def _set_options(controls: dict, frame: pd.DataFrame, selection: dict) -> None:
    """Point every control at ``selection``'s arch: its options, values, greyed-out state."""
    spec = sweep_controls_spec(frame, selection["arch"])
    for name in DROPDOWNS:
        labels = [("n/a (no GDN layers)", ALL)] if name == "gdn_mode" and selection["arch"] == "mla" else None
        controls[name].options = labels or spec[name]
        controls[name].value = selection[name]
        controls[name].disabled = len(controls[name].options) < 2  # nothing to choose: greyed out
    slider = controls["budget_range"]
    slider.options = spec["budgets"] or [0]
    slider.value = selection["budget_range"] if spec["budgets"] else (0, 0)
    slider.disabled = len(slider.options) < 2


def explorer(frame: pd.DataFrame, arch: str | None = None, gdn_mode=ALL, block_size=None, temperature=0.0,
             max_new_tokens=None):
    """ipywidgets.VBox: dropdowns (arch, GDN mode, block size, temperature, new tokens,
    prompt), a budget SelectionRangeSlider (description 'budget') over the arch's DDTree
    budgets, and an Output (CSS class 'ddtree-figure') redrawn on every change.

    frame: a raw results frame (``ResultsStore.frame()``), every value it holds selectable.
    The other arguments set where it opens (see ``explorer_defaults``): pass the values the
    notebook's own figures use. Changing arch resets the others to that arch's defaults;
    controls with one value (and GDN mode for mla) are greyed out.
    """

    def defaults(a):
        return explorer_defaults(frame, a, gdn_mode, block_size, temperature, max_new_tokens)

    wide = {"style": {"description_width": "initial"}}
    controls = {name: w.Dropdown(options=[None], description=label, **wide) for name, label in DROPDOWNS.items()}
    controls["budget_range"] = w.SelectionRangeSlider(options=[0], index=(0, 0), description="budget",
                                                      continuous_update=False, **wide)
    out = w.Output()
    out.add_class("ddtree-figure")
    busy = [False]

    def redraw(change=None):
        if busy[0]:
            return
        busy[0] = True
        try:
            if change is not None and change["owner"] is controls["arch"]:
                _set_options(controls, frame, defaults(change["new"]))
            if change is None or change["owner"] is not controls["budget_range"]:   # the range follows the data
                _fit_slider(controls["budget_range"], budgets_at(frame, controls["arch"].value, controls["temperature"].value,
                                                                controls["block_size"].value, controls["gdn_mode"].value,
                                                                controls["max_new_tokens"].value))
        finally:
            busy[0] = False
        selection = {name: c.value for name, c in controls.items()}
        out.outputs = (figure_output(render(frame, **selection)),)  # a pyplot-free Figure: nothing to close

    controls["arch"].options = sweep_controls_spec(frame)["arch"]
    _set_options(controls, frame, defaults(arch or controls["arch"].options[0]))
    for c in controls.values():  # observed only now: the setup above draws nothing
        c.observe(redraw, names="value")
    redraw()
    rows = [["arch", "gdn_mode", "block_size", "temperature"], ["max_new_tokens", "prompt", "budget_range"]]
    return w.VBox([w.HBox([controls[n] for n in row]) for row in rows] + [out])


# ----------------------------------------------------------------------------- concurrency

def concurrency_controls_spec(summary: pd.DataFrame) -> dict:
    """Values the concurrency explorer offers, from ``summarize_concurrency``'s summary:
    {arch: [...], temperature: [...], concurrency: [...]}."""
    return {"arch": sorted(summary["arch"].unique()),
            "temperature": sorted(float(t) for t in summary["temperature"].unique()),
            "concurrency": sorted(int(c) for c in summary["concurrency"].unique())}


def dropdown_explorer(spec: dict, start: dict, draw):
    """ipywidgets.VBox: one dropdown per ``spec`` entry (name -> options; opening at ``start``'s
    value, else the first; greyed out with one option) and an Output (CSS class
    'ddtree-figure') showing ``draw(**selection)``, redrawn on every change."""
    wide = {"style": {"description_width": "initial"}}
    controls = {name: w.Dropdown(options=spec[name], description=name,
                                 value=start.get(name) if start.get(name) in spec[name] else spec[name][0], **wide)
                for name in spec}
    for c in controls.values():
        c.disabled = len(c.options) < 2  # nothing to choose: greyed out
    out = w.Output()
    out.add_class("ddtree-figure")

    def redraw(change=None):
        out.outputs = (figure_output(draw(**{name: c.value for name, c in controls.items()})),)

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(controls.values())), out])


def concurrency_explorer(summary: pd.DataFrame, arch: str | None = None, temperature: float = 0.0,
                         concurrency: int | None = None):
    """``dropdown_explorer`` over (arch, temperature, concurrency) of ``plots.plot_concurrency_budgets``;
    it opens at the given values (else the first of each)."""
    return dropdown_explorer(concurrency_controls_spec(summary),
                             {"arch": arch, "temperature": temperature, "concurrency": concurrency},
                             lambda **sel: plots.plot_concurrency_budgets(summary, **sel))


def dflash2_explorer(summary: pd.DataFrame, arch: str | None = None, temperature: float = 0.0,
                     metric: str = "tau"):
    """``dropdown_explorer`` over (target, temperature, metric) of ``plots.plot_dflash2_budgets``:
    the three proposals over every budget."""
    spec = {"arch": sorted(summary.arch.unique()), "temperature": sorted(float(t) for t in summary.temperature.unique()),
            "metric": ["tau", "tau_outside_loops", "speedup", "tokens_per_s"]}
    return dropdown_explorer(spec, {"arch": arch, "temperature": temperature, "metric": metric},
                             lambda **sel: plots.plot_dflash2_budgets(summary, **sel))


def rule_explorer(summary: pd.DataFrame, rules, pairs: dict, arch: str | None = None, rule: str | None = None,
                  budget: int | None = None, prompt_id: int = 0):
    """``dropdown_explorer`` over (arch, rule, budget) of ``plots.plot_rule_round``: one rule's
    tree on the first round of prompt ``prompt_id`` (drawn when chosen, ``your_tree.first_round``)
    beside every rule's tau by budget. rules: tree rules, objects or built-in names ("unary":
    DDTree); pairs: {arch: Pair}; summary: ``your_tree.summary`` (its budgets are offered)."""
    by_name = {your_tree.display_name(r): r for r in rules}
    rounds = {}

    def draw(arch, rule, budget):
        if (arch, rule, budget) not in rounds:
            rounds[arch, rule, budget] = your_tree.first_round(by_name[rule], pairs[arch], budget, prompt_id)
        return plots.plot_rule_round(rounds, summary, arch, rule, budget)

    budgets = sorted(int(b) for b in summary.loc[summary.method == "ddtree", "budget"].unique())
    spec = {"arch": [a for a in dict.fromkeys(summary.arch) if a in pairs], "rule": list(by_name), "budget": budgets}
    return dropdown_explorer(spec, {"arch": arch, "rule": rule, "budget": budget}, draw)


# ----------------------------------------------------------------------------- notebook 10 (issue 61)

CORRELATION_SCALES = [0.0, 0.25, 0.5, 0.75, 1.0]   # x the fitted routing correlation (0: independent)


def correlation_explorer(inputs, overheads: dict, model: str = "Kimi K2.6", accelerator: str = "h200",
                         gpus: int = 8, chain_tau: float = 5.3, stacks=("kernel-floor", "transformers-eager")):
    """``dropdown_explorer`` over (correlation scale, stack): the projected speedup of ``model`` on
    ``gpus`` x ``accelerator`` by budget when the routing correlation fitted to published unions is
    scaled, between the independent and fitted bounds (``gpu_projection.best_budget_at``; the title
    names the best budget of the grid; chain_tau: the published chain's, ``gpu_specs.CHAIN_TAU``)."""

    def draw(correlation, stack):
        s = gp.setting(model, accelerator, gpus, stack, overheads[stack])
        answer = gp.best_budget_at(s, correlation, inputs, chain_tau)
        bounds = {r.name: gp.curve(s, r, chain_tau, inputs.shape) for r in (gp.INDEPENDENT, inputs.fitted)}
        title = (f"{model}, {gpus} x {accelerator}, {stack}: best budget {answer['best_budget']} "
                 f"({answer['best_speedup']:.2f}x; chain {answer['dflash_speedup']:.2f}x)")
        return plot_rho_scaled(answer["curve"], correlation, bounds, title)
    return dropdown_explorer({"correlation": CORRELATION_SCALES, "stack": list(stacks)},
                             {"correlation": 1.0, "stack": stacks[0]}, draw)
