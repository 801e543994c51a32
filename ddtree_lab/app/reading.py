"""The numbers of a notebook's "Reading", rendered from what the notebook just measured.

A markdown cell cannot follow its data; these sentences can. Each function returns a
plain-text paragraph built from the same values the notebook prints and checks, so the
reading and the output above it always agree (``app/tests/test_reading.py``).
"""
from __future__ import annotations

import pandas as pd

from ..experiments.plumbing.loops import WINDOW, loop_period, loop_split, round_loop_flags
from ..experiments.studies.concurrency import budget_label, tied_of


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def calibration_reading(gaps: pd.DataFrame, ratios: dict, tol: float = 0.25) -> str:
    """Notebook 06: the sibling-conditioning gap and the surrogate's round prediction.
    gaps: ``calibration.surrogate_gap`` rows with an ``arch`` column; ratios: {arch:
    observed / predicted accepted tokens per round}."""
    lines = []
    for arch, g in gaps.groupby("arch", sort=False):
        g = g.set_index("group")
        r0, r1 = g.loc["rank0"], g.loc["rank1+"]
        shows = r1.observed < 0.5 * r1.predicted
        lines.append(f"{arch}: rank 0 predicted {r0.predicted:.2f}, accepted {r0.observed:.2f}; rank 1+ predicted "
                     f"{_pct(r1.predicted)}, accepted {_pct(r1.observed)} (the published gap "
                     f"{'shows' if shows else 'does not show'}).")
    for arch, r in ratios.items():
        within = 1 - tol <= r <= 1 + tol
        side = "under" if r > 1 else "over"
        lines.append(f"{arch}: verification accepts {r:.2f} x the surrogate's expected tokens per round: "
                     f"{'within' if within else 'outside'} {tol:.0%}, the surrogate {side}estimates.")
    return "\n".join(lines)


def bf16_reading(table: pd.DataFrame, rates: pd.Series) -> str:
    """Notebook 03: what bf16 did on this run. table: per-setting max_err / flips / nodes
    (index: setting); rates: share of nodes where tree == chain, tree == AR, chain == AR."""
    bf = table.loc["bfloat16"]
    exact = bf.max_err == 0
    first = ("bf16 tree and path forwards came out bit-identical on every node" if exact else
             f"bf16 tree and path forwards differ by up to {bf.max_err:.2e} in a logit")
    return (f"{first}; {int(bf.flips)} of {int(bf.nodes)} nodes flip their argmax. The bf16 tree agrees with "
            f"chain verification on {_pct(rates['tree_eq_chain'])} of the nodes and with token-by-token AR on "
            f"{_pct(rates['tree_eq_ar'])}.")


# ----------------------------------------------------------------------------- shared

def table_text(frame: pd.DataFrame, missing: str, digits: int = 2) -> str:
    """``frame`` as text with every NaN cell shown as 'n/a' and one footnote saying why
    (``missing``): no blank NaN cell a reader has to guess about."""
    has_nan = bool(frame.isna().to_numpy().any())
    shown = frame.round(digits).astype(object).where(frame.notna(), "n/a")
    text = shown.to_string()
    return f"{text}\nn/a: {missing}" if has_nan else text


def conclusion(record, findings=()) -> str:
    """The notebook's last cell: 'What this notebook showed' in 3-6 lines, from its ``Record``
    (checks held, published claims reproduced or not and why, goals met or missed) and up
    to two ``findings`` sentences the notebook rendered from its own numbers."""
    lines = ["What this notebook showed:"]
    lines += [f"- {f}" for f in list(findings)[:2]]
    if record.checks:
        lines.append(f"- {len(record.checks)} checks held, among them: " + "; ".join(c.claim for c in record.checks[:2]))
    done = [c for c, why in record.published if c.ok]
    missed = [(c, why) for c, why in record.published if not c.ok]
    if done:
        lines.append("- published, reproduced here: " + "; ".join(f"{c.claim} ({c.got})" for c in done))
    if missed:
        lines.append("- published, NOT reproduced here: " + "; ".join(
            f"{c.claim} (got {c.got})" + (f", because {why}" if why else "") for c, why in missed))
    if record.goals:
        met = [g for g in record.goals if g.met]
        lines.append(f"- the lab's goals: {len(met)} of {len(record.goals)} met" + "".join(
            f"; missed: {g.goal} (target {g.target}, got {g.got})" for g in record.goals if not g.met))
    if len(lines) == 1:
        lines.append("- nothing was checked, compared or aimed at")
    return "\n".join(lines[:7])


# ----------------------------------------------------------------------------- 00

SHORT_WINDOW = 16  # a shorter tail than the lab's loop window: a repetition just starting


def loop_reading(prompt_ids, tokens, acceptance_lengths) -> str:
    """Notebook 00: does this generation fall into a repetition loop, and tau outside it.
    A loop is trivially predictable, so tau over looping rounds flatters the drafter."""
    prompt_ids, tokens = [int(t) for t in prompt_ids], [int(t) for t in tokens]
    flags = round_loop_flags(prompt_ids, tokens, acceptance_lengths)
    split = loop_split(acceptance_lengths, flags)
    if not any(flags):
        short = loop_period(list(prompt_ids) + list(tokens), window=SHORT_WINDOW, max_period=SHORT_WINDOW // 2)
        if short:
            return (f"The generation ends repeating a {short}-token pattern, but fewer than {WINDOW} periodic tokens, "
                    f"the lab's loop definition (plumbing/loops.py), so no round counts as in a loop: tau "
                    f"{split['tau']:.2f} over all {split['rounds']} rounds includes the start of that repetition, "
                    "which flatters the drafter.")
        return (f"No repetition loop in this generation: tau {split['tau']:.2f} over all "
                f"{split['rounds']} rounds is tau outside loops.")
    period = loop_period(list(prompt_ids) + list(tokens))
    shape = f" (period {period} tokens at the end)" if period else ""
    outside = (f"tau outside the loop is {split['tau_outside_loops']:.2f} over {split['rounds_outside_loops']} rounds"
               if split["rounds_outside_loops"] else "no round lies outside the loop, so there is no tau outside it")
    return (f"This generation falls into a repetition loop{shape}: {split['loop_round_share']:.0%} of "
            f"{split['rounds']} rounds start in it, and a loop is trivially predictable. tau over all rounds "
            f"{split['tau']:.2f} is inflated by it; {outside}.")


# ----------------------------------------------------------------------------- 02

def naive_peak_why(naive_tau: pd.Series, exact_tau: pd.Series) -> str:
    """Notebook 02: why naive tau does (not) peak inside the swept budgets (index: budget)."""
    peak, big = int(naive_tau.idxmax()), int(naive_tau.index.max())
    if peak < big:
        return (f"naive tau peaks at budget {peak} ({naive_tau[peak]:.2f}) and falls to {naive_tau[big]:.2f} "
                f"at {big}, while exact tau reaches {exact_tau[big]:.2f}")
    return (f"naive tau is highest at the largest budget swept ({big}: {naive_tau[big]:.2f}, exact "
            f"{exact_tau[big]:.2f}): the main path, which pop order verifies first and naive scores exactly, "
            f"carries most of this drafter's accepted tokens, so the leak lowers tau "
            f"({1 - naive_tau[big] / exact_tau[big]:.0%} below exact) without making it fall")


def exact_nodes_reading(nodes_per_budget: pd.Series) -> str:
    """Notebook 02: mean draft nodes naive scores exactly per tree, by budget, and which way
    the count moves (index: budget)."""
    values = ", ".join(f"{int(b)}: {v:.2f}" for b, v in nodes_per_budget.items())
    if len(nodes_per_budget) < 2:
        trend = "one budget only"
    elif nodes_per_budget.is_monotonic_decreasing and nodes_per_budget.iloc[-1] < nodes_per_budget.iloc[0]:
        trend = "fewer as the budget grows"
    elif nodes_per_budget.nunique() == 1:
        trend = "the same at every budget measured"
    else:
        trend = "not fewer at every larger budget"
    return f"draft nodes naive scores exactly, mean per tree by budget: {values} ({trend})"


# ----------------------------------------------------------------------------- 06

def sibling_gap_why(arch: str, main: float, sibling: float, nodes: int, enough: int = 30) -> str:
    """Notebook 06: why the published after-sibling gap does (not) show on this target."""
    ratio = sibling / main if main else float("nan")
    if nodes < enough:
        return f"{arch}: only {nodes} nodes after an accepted sibling outside loops, too few to decide"
    return (f"{arch}: outside loops the walk goes on after a sibling {sibling:.2f} vs {main:.2f} on the main path "
            f"({ratio:.2f}x, {nodes} nodes); the published gap was measured on a 27B target, whose runner-up "
            f"tokens carry far more probability than this tiny drafter's")


def branches_why(branch: pd.DataFrame) -> str:
    """Notebook 06: why rank-1+ branches are (not) over-predicted (rows: arch, predicted, observed)."""
    return "; ".join(f"{r.arch}: the surrogate predicts rank 1+ branches accepted {_pct(r.predicted)} and they are "
                     f"accepted {_pct(r.observed)}, so there is little predicted mass to over-predict"
                     for r in branch.itertuples())


# ----------------------------------------------------------------------------- 07

def concurrency_reading(arch: str, t0: pd.DataFrame) -> str:
    """Notebook 07: where the best budget, the trees' edge over DFlash and ``auto`` went with
    load (t0: ``concurrency_table`` rows of one arch at T = 0, index: concurrency)."""
    lo, hi = t0.index.min(), t0.index.max()
    best = ", ".join(budget_label(r) for r in t0.itertuples())
    ties = sum(len(getattr(r, "tied_budgets", ())) > 1 for r in t0.itertuples())
    edge = t0.best_speedup / t0.dflash_speedup
    b_dir = ("falls" if t0.best_budget[hi] < t0.best_budget[lo] else
             "rises" if t0.best_budget[hi] > t0.best_budget[lo] else "ends where it started")
    e_dir = "narrows" if edge[hi] < edge[lo] else "widens" if edge[hi] > edge[lo] else "holds"
    return (f"{arch}: over concurrency {', '.join(str(c) for c in t0.index)} the best budget goes {best} "
            f"({b_dir} from c={lo} to c={hi}); the best tree's speedup over DFlash's goes {edge[lo]:.2f} -> "
            f"{edge[hi]:.2f} ({e_dir}); auto reaches {t0.auto_vs_best.min():.2f}-{t0.auto_vs_best.max():.2f} "
            f"of the best fixed budget's tokens/s"
            + (f"; at {ties} of {len(t0)} loads the best budget is a tie (not told apart outside the noise)"
               if ties else ""))


def best_budget_why(arch: str, t0: pd.DataFrame) -> str:
    """Notebook 07: why the published shrinking best budget does not reproduce here, read from
    the table (index: concurrency; best_budget, best_speedup[, tied_budgets]): the budgets
    tied best at the largest concurrency are not all below those at the smallest
    (``claims.best_budget_shrinks``), and what the best tree gains over batched AR there."""
    lo, hi = t0.index.min(), t0.index.max()
    ties = lambda c: tied_of(t0.loc[c])  # noqa: E731
    path = ", ".join(f"{budget_label(r)} (c={r.Index})" for r in t0.itertuples())
    shared = sorted(set(ties(lo)) & set(ties(hi)))
    reason = (f"{'budgets' if len(shared) > 1 else 'budget'} {', '.join(map(str, shared))} "
              f"{'are' if len(shared) > 1 else 'is'} among the best at both c={lo} and c={hi}, so no shrinkage is "
              "told apart outside the noise" if shared else
              f"the best at c={hi} ({', '.join(map(str, ties(hi)))}) is not below every best at c={lo} "
              f"({', '.join(map(str, ties(lo)))})")
    return f"{arch}'s best budget goes {path}: {reason}; at c={hi} the best tree runs at {t0.best_speedup[hi]:.2f}x batched AR"
