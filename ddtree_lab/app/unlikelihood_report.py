"""Notebook 12 (issue 70): the unlikelihood fine-tunes beside the shipped targets, read from
``data/results/unlikelihood.csv`` and ``unlikelihood_samples.json``: the figure, the table, the
samples side by side, and the sentences (every number in them comes from the table).
"""
from __future__ import annotations

import json

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..experiments.plumbing.results import STAMP_FIELDS
from ..experiments.studies import ul_findings as ulf
from ..experiments.studies import unlikelihood as ul
from ..train.checkpoints import CKPT_DIR
from .templating import render
from .plots import MAX_WIDTH_IN, PALETTE, TARGET_STYLES, legend_below, styled

SHOWN = {"run": "run", "loop_share_lens": "loops (lens)", "loop_share_tail": "loops (tail)",
         "solution_loss": "solution loss", "delta_loss": "delta", "rep4_median": "rep-4", "minutes": "min",
         "meets_goal": "goal met"}


def load(table_path=ul.TABLE, samples_path=ul.SAMPLES) -> tuple[pd.DataFrame, dict]:
    """(the table, {run: {prompt index: continuation text}})."""
    return pd.read_csv(table_path), json.loads(samples_path.read_text())


def rules(path=ul.RULES_TABLE) -> pd.DataFrame:
    """What each candidate rule marks in the shipped targets' stored greedy continuations
    (``ul.candidate_rules``), rounded."""
    return pd.read_csv(path).drop(columns=list(STAMP_FIELDS)).round(3)


def rules_sentence(table: pd.DataFrame) -> str:
    """One sentence per target: how much each rule marks outside loops, and how much they agree."""
    parts = []
    for arch, g in table.groupby("arch"):
        r = g.set_index("rule")
        parts.append(f"{arch}: of the tokens of continuations that end in no loop, the 4-gram rule marks "
                     f"{r.marked_outside_loops['ngram']:.0%} and the lens {r.marked_outside_loops['lens']:.0%} "
                     f"(overlap {r.overlap['ngram']:.2f})")
    return "; ".join(parts) + "."


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table's columns a reader compares, rounded, under short names (the run's name holds
    its rule, alpha, steps and learning rate)."""
    out = table[list(SHOWN)].round({"loop_share_lens": 2, "loop_share_tail": 2, "solution_loss": 3,
                                    "delta_loss": 3, "rep4_median": 2, "minutes": 1})
    return out.rename(columns=SHOWN)


def best(table: pd.DataFrame, arch: str) -> pd.Series | None:
    """The fine-tune of ``arch`` to read: the lowest tail-lens loop share among those within the
    loss bound, else the one closest to the bound in loss; None without a fine-tune."""
    tuned = table[(table.arch == arch) & (table.candidates != "shipped")]
    if not len(tuned):
        return None
    within = tuned[tuned.delta_loss <= ul.GOAL_DELTA]
    pick = within.sort_values(["loop_share_tail", "delta_loss"]) if len(within) else tuned.sort_values("delta_loss")
    return pick.iloc[0]


def shipped(table: pd.DataFrame, arch: str) -> pd.Series:
    return table[(table.arch == arch) & (table.candidates == "shipped")].iloc[0]


def finding(table: pd.DataFrame, arch: str) -> str:
    """One sentence: the shipped target's loops and loss against its best fine-tune's."""
    s, b = shipped(table, arch), best(table, arch)
    head = (f"{arch}: shipped, {s.loop_share_tail:.0%} of {int(s.prompts)} greedy continuations end in a repeating "
            f"tail ({s.loop_share_lens:.0%} by the lab's lens), HumanEval-solution loss {s.solution_loss:.3f}")
    if b is None:
        return head + "; no fine-tune stored yet."
    verdict = "meets" if b.meets_goal else "misses"
    return (head + f"; after {b.run} ({b.minutes:.0f} min), {b.loop_share_tail:.0%} ({b.loop_share_lens:.0%} by the "
            f"lab's lens) at {b.solution_loss:.3f} ({b.delta_loss:+.3f} nats), rep-4 median {s.rep4_median:.2f} -> "
            f"{b.rep4_median:.2f}: it {verdict} the goal (<= {ul.GOAL_LOOPS:.0%} loops on the tail lens, "
            f"<= +{ul.GOAL_DELTA:.2f} nats).")


def decision(table: pd.DataFrame, archs=("gdn", "mla")) -> str:
    """The decision, from the table: which targets met the goal (on the issue's tail lens, and
    whether also on the lab's lens), which are saved, and what this session leaves to the lead."""
    parts = []
    for arch in archs:
        b = best(table, arch)
        if b is None:
            parts.append(f"{arch}: no fine-tune")
            continue
        numbers = (f"{b.loop_share_tail:.0%} loops on the issue's tail lens, {b.loop_share_lens:.0%} on the lab's "
                   f"lens, {b.delta_loss:+.3f} nats")
        verdict = ("meets the goal on both lenses" if b.meets_goal_lens else "meets the goal on the issue's tail "
                   "lens, not on the lab's stricter lens") if b.meets_goal else "misses the goal"
        parts.append(f"{arch}: {b.run} {verdict} ({numbers})")
    saved = [a for a in archs if (CKPT_DIR / "unlikelihood" / f"{a}-target" / "manifest.json").is_file()]
    where = f" Saved under data/checkpoints/unlikelihood/: {', '.join(saved)}." if saved else ""
    return ("; ".join(parts) + "." + where + " The shipped targets, their drafters and every store stay as they are "
            "this session: moving the lab to fine-tuned targets (retraining DFlash and DFlash 2, recomputing every "
            "store by name, redrawing the figures) is the lead's call for a later session.")


def findings_hold(path=None) -> str:
    """Which findings survive on a target that writes code, one sentence each, from
    ``ul_findings.csv`` (``studies.ul_findings``); before it exists, what it waits for."""
    path = path or ul.RESULTS_DIR / ulf.TABLE_CSV
    if not path.is_file():
        return render("reading/ul_findings_missing")
    rows = {r.pair: r for r in pd.read_csv(path).itertuples()}
    return render("reading/ul_findings", rows=rows, budget=max(ulf.FindingsGrid().budgets))


def side_by_side(samples: dict, table: pd.DataFrame, arch: str) -> pd.DataFrame:
    """Rows: the sample prompts; columns: the shipped target's continuation and the best fine-tune's."""
    b, s = best(table, arch), shipped(table, arch)
    cols = {"shipped": samples.get(s.run, {})} | ({b.run: samples.get(b.run, {})} if b is not None else {})
    rows = sorted({int(i) for c in cols.values() for i in c})
    return pd.DataFrame({name: [c.get(str(i), "") for i in rows] for name, c in cols.items()},
                        index=[f"HumanEval/{i}" for i in rows])


@styled
def plot_unlikelihood(table: pd.DataFrame) -> Figure:
    """One panel per target: loop share (filled: tail lens; hollow: the lab's lens) against the
    HumanEval-solution loss's change, the shipped target at 0; the goal's corner shaded."""
    archs = list(dict.fromkeys(table.arch))
    fig = Figure(figsize=(MAX_WIDTH_IN, 3.6), layout="constrained")
    axes = fig.subplots(1, len(archs), sharey=True, squeeze=False)[0]
    for ax, arch in zip(axes, archs):
        rows = table[table.arch == arch]
        ax.add_patch(Rectangle((-1, 0), 1 + ul.GOAL_DELTA, ul.GOAL_LOOPS, color=PALETTE[2], alpha=0.15, lw=0,
                               label="goal: <= 20% loops, <= +0.10 nats"))
        color = TARGET_STYLES[arch]["color"]
        ax.plot(rows.delta_loss, rows.loop_share_tail, "o", color=color, ms=6, label="loop share, tail lens")
        ax.plot(rows.delta_loss, rows.loop_share_lens, "o", mfc="none", color=color, ms=6,
                label="loop share, the lab's lens")
        for r in rows.itertuples():
            name = "shipped" if r.candidates == "shipped" else f"{r.candidates} a{r.alpha:g} {r.steps} st"
            ax.annotate(name, (r.delta_loss, r.loop_share_tail), xytext=(4, -10), textcoords="offset points",
                        fontsize=8)
        ax.set_xlim(min(-0.02, rows.delta_loss.min() - 0.02), max(0.2, rows.delta_loss.max() + 0.05))
        ax.set_ylim(0, 1)
        ax.set_title(f"{arch} target")
        ax.set_xlabel("HumanEval-solution loss - shipped (nats)")
    axes[0].set_ylabel("share of greedy continuations looping")
    legend_below(fig)
    return fig
