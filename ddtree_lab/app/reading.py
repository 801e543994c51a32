"""The numbers of a notebook's "Reading", rendered from what the notebook just measured.

A markdown cell cannot follow its data; these sentences can. Each function returns a
plain-text paragraph built from the same values the notebook prints and checks, so the
reading and the output above it always agree (``app/tests/test_reading.py``).
"""
from __future__ import annotations

import math

import pandas as pd

from ..train.loops import loop_period, loop_split, round_tags
from ..experiments.studies.concurrency import budget_label, tied_of
from .claims import goal_count
from .templating import render
from ..experiments.plumbing.verdicts import apart, axis_verdict, compare_configs, decide, interval_text, versus


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def calibration_reading(gaps: pd.DataFrame, ratios: dict, tol: float = 0.25) -> str:
    """Notebook 06: the sibling-conditioning gap and the surrogate's round prediction.
    gaps: ``calibration.surrogate_gap`` rows with an ``arch`` column; ratios: {arch:
    observed / predicted accepted tokens per round}."""
    ranks = []
    for arch, g in gaps.groupby("arch", sort=False):
        g = g.set_index("group")
        r0, r1 = g.loc["rank0"], g.loc["rank1+"]
        ranks.append({"arch": arch, "predicted": r0.predicted, "observed": r0.observed,
                      "rank1": _rate_vs_prediction(r1.observed, r1.predicted)})
    rows = [{"arch": arch, "ratio": r, "within": 1 - tol <= r <= 1 + tol, "side": versus(r, 1.0)}
            for arch, r in ratios.items()]
    return render("reading/calibration", ranks=ranks, ratios=rows, tol=tol)


def _rate_vs_prediction(observed: float, predicted: float, half: float = 0.5) -> str:
    """'predicted 0.043, accepted 0.024 (0.56x the prediction: below it, not below half of it, so
    the published gap does not show)': the rates with the digits printed, their ratio, and the
    direction by the one rule (``verdicts.versus``), never 'about as rarely' beside a 0.56x."""
    ratio = observed / predicted if predicted else math.nan
    return render("reading/rate_vs_prediction", predicted=predicted, observed=observed, ratio=ratio,
                  side=versus(observed, predicted, 3), shows=observed < half * predicted)


def bf16_reading(table: pd.DataFrame, rates: pd.Series) -> str:
    """Notebook 03: what bf16 did on this run. table: per-setting max_err / flips / nodes
    (index: setting); rates: share of nodes where tree == chain, tree == AR, chain == AR."""
    bf = table.loc["bfloat16"]
    return render("reading/bf16", exact=bf.max_err == 0, max_err=bf.max_err, flips=int(bf.flips), nodes=int(bf.nodes),
                  tree_eq_chain=_pct(rates["tree_eq_chain"]), tree_eq_ar=_pct(rates["tree_eq_ar"]))


# ----------------------------------------------------------------------------- shared

def table_text(frame: pd.DataFrame, missing: str, digits: int = 2) -> str:
    """``frame`` as text with every NaN cell shown as '-' (``lab.MISSING``) and one footnote saying
    why (``missing``): no blank or NaN cell a reader has to guess about."""
    has_nan = bool(frame.isna().to_numpy().any())
    shown = frame.round(digits).astype(object).where(frame.notna(), "-")
    text = shown.to_string()
    return f"{text}\n-: {missing}" if has_nan else text


def conclusion(record, findings=()) -> str:
    """The notebook's last cell: 'What this notebook showed' in 3-6 lines, from its ``Record``
    (checks held, published claims reproduced or not and why, goals met or missed) and up
    to two ``findings`` sentences the notebook rendered from its own numbers: at most 8 lines
    (the heading, 2 findings, the checks, 3 kinds of published claim, the goals)."""
    skipped = getattr(record, "skipped", [])
    return render("reading/conclusion", findings=list(findings)[:2], checks=[c.claim for c in record.checks[:2]],
                  skipped=skipped, count=check_count(record) if record.checks or skipped else None,
                  done=[c for c, why in record.published if c.ok],
                  missed=[(c, why) for c, why in record.published if not c.ok and c.decided],
                  untold=[(c, why) for c, why in record.published if not c.decided],
                  goals=record.goals, goal_count=goal_count(record.goals) if record.goals else None)


def check_count(record) -> str:
    """'9 checks held' (', 1 skipped (printed with why, not asserted)'): every check the notebook printed,
    ``Record.check`` and ``Record.check_unless`` alike."""
    return render("reading/check_count", held=len(record.checks), skipped=len(getattr(record, "skipped", [])))


def winners(sums: pd.DataFrame, a: dict, b: dict, name_a: str, name_b: str, row_a, row_b) -> str:
    """The winner on each axis between two configs, 'tau: ...; tokens/s: ...' (``verdicts.axis_verdict``):
    a, b: {column: value} selections of ``sums`` (``verdicts.prompt_sums``, paired by prompt);
    row_a, row_b: their ``summarize`` rows (the values shown)."""
    r = compare_configs(sums, a, b)
    return "; ".join([axis_verdict("tau", name_a, name_b, f"{row_a.tau:.2f}", f"{row_b.tau:.2f}", r["tau"]),
                      axis_verdict("tokens/s", name_a, name_b, f"{row_a.tokens_per_s:.0f}", f"{row_b.tokens_per_s:.0f}",
                                   r["tokens_per_s"])])


# ----------------------------------------------------------------------------- 00

def loop_reading(prompt_ids, tokens, acceptance_lengths) -> str:
    """Notebook 00: does this generation fall into a repetition loop, how much of it copies
    its context, and tau outside both (``loops.round_tags``). A loop is trivially predictable
    and a copied block is one a lookup would find, so tau over such rounds flatters the drafter."""
    prompt_ids, tokens = [int(t) for t in prompt_ids], [int(t) for t in tokens]
    tags = round_tags(prompt_ids, tokens, acceptance_lengths)
    split = loop_split(acceptance_lengths, tags["round_looping"], tags["round_copyable"])
    looping = any(tags["round_looping"])
    # the loop's effect on tau: the one rule, on the printed values (only where rounds lie outside the loop)
    effect = versus(split["tau"], split["tau_outside_loops"]) if looping and split["rounds_outside_loops"] else None
    return render("reading/loop", split=split, looping=looping, period=loop_period(tokens) if looping else None,
                  effect=effect)


# ----------------------------------------------------------------------------- 02

def naive_peak_why(naive_tau: pd.Series, exact_tau: pd.Series) -> str:
    """Notebook 02: why naive tau does (not) peak inside the swept budgets (index: budget)."""
    peak, big = int(naive_tau.idxmax()), int(naive_tau.index.max())
    return render("reading/naive_peak_why", falls=peak < big, peak=peak, big=big, naive_peak=naive_tau[peak],
                  naive_big=naive_tau[big], exact_big=exact_tau[big], lowered=1 - naive_tau[big] / exact_tau[big])


def exact_nodes_reading(nodes_per_budget: pd.Series) -> str:
    """Notebook 02: mean draft nodes naive scores exactly per tree, by budget, and which way
    the count moves (index: budget)."""
    values = ", ".join(f"{int(b)}: {v:.2f}" for b, v in nodes_per_budget.items())
    if len(nodes_per_budget) < 2:
        trend = "one"
    elif nodes_per_budget.is_monotonic_decreasing and nodes_per_budget.iloc[-1] < nodes_per_budget.iloc[0]:
        trend = "fewer"
    elif nodes_per_budget.nunique() == 1:
        trend = "same"
    else:
        trend = "not fewer"
    return render("reading/exact_nodes", values=values, trend=trend)


# ----------------------------------------------------------------------------- 04

def naive_above_exact(tau_naive: pd.Series, tau_exact: pd.Series, matches_naive: pd.Series) -> str:
    """Notebook 04: where naive tau sits above exact tau, and why that is no gain (index:
    budget; matches_naive: naive's share of prompts equal to AR)."""
    above = [{"budget": b, "naive": tau_naive[b], "exact": tau_exact[b], "matches": _pct(matches_naive[b])}
             for b in tau_naive.index if tau_naive[b] > tau_exact[b]]
    return render("reading/naive_above_exact", above=above)


# ----------------------------------------------------------------------------- 05

def peak_ties(arch: str, block: int, rows: pd.DataFrame, sums: pd.DataFrame, temperature: float = 0.0) -> list[int]:
    """Notebook 05: the budgets whose tokens/s the best budget does not beat outside the noise
    (``verdicts.decide`` on their paired ratio), the best included, ascending. rows:
    ``summarize`` rows of (arch, block, temperature); sums: ``verdicts.prompt_sums``."""
    fixed = rows[(rows.method == "ddtree") & (rows.budget != "auto")].astype({"budget": int}).set_index("budget")
    at = dict(arch=arch, block_size=block, temperature=temperature, method="ddtree")
    top = int(fixed.tokens_per_s.idxmax())
    beats = lambda b: decide(**{k: compare_configs(sums, {**at, "budget": top}, {**at, "budget": b})["tokens_per_s"][k]  # noqa: E731
                                for k in ("lo", "hi")}) == "above"
    return sorted(int(b) for b in fixed.index if b == top or not beats(b))


def peak_text(top: int, values: pd.Series, ties: list[int], unit: str = "") -> str:
    """The one wording of a curve's best point, in a sentence and on a figure alike (values:
    index budget; ties: ``peak_ties``): 'tokens/s peaks at budget 31 (1.86x AR), told apart from
    every other budget', or, when other budgets tie with it, 'the tokens/s peak is not told
    apart among budgets 8, 16, 31, 32 (1.80-1.86x AR)': never a peak the intervals do not show."""
    alone = list(ties) == [top]
    span = values[[top] if alone else list(ties)]
    return render("reading/peak", alone=alone, top=top, ties=list(ties), value=values[top], lo=span.min(),
                  hi=span.max(), unit=unit)


def peak_label(top: int, value: float, ties: list[int] | None) -> str:
    """The figure's label of a curve's best point: 'peak 1.86 @ 31' only when it is told apart
    from every other budget (``ties`` == [top]); 'highest 1.86 @ 31, tied 8-32' when the
    intervals hold other budgets; 'highest 1.86 @ 31' when no intervals were given."""
    if ties is None:
        return f"highest {value:.3g} @ {top}"
    if list(ties) == [top]:
        return f"peak {value:.3g} @ {top}"
    return f"highest {value:.3g} @ {top}, tied {min(ties)}-{max(ties)}"


def sweep_reading(arch: str, block: int, rows: pd.DataFrame, sums: pd.DataFrame) -> str:
    """Notebook 05: the winner on each axis at one target and block, T = 0: tau (the tree of the
    highest tau against the DFlash chain) and tokens/s (the tree of the highest tokens/s
    against the chain), each with its interval over prompts (a tie when it holds 1); the
    budgets whose tokens/s cannot be told from the best; auto against the best fixed budget.
    rows: ``summarize`` rows of (arch, block, T = 0): AR, DFlash, DDTree int budgets and auto;
    sums: ``verdicts.prompt_sums`` of the same stored rows."""
    fixed = rows[(rows.method == "ddtree") & (rows.budget != "auto")].astype({"budget": int}).set_index("budget")
    chain, auto = rows[rows.method == "dflash"].iloc[0], rows[rows.budget == "auto"]
    at = dict(arch=arch, block_size=block, temperature=0.0)
    tree = lambda b: {**at, "method": "ddtree", "budget": b}  # noqa: E731
    top_tau, top_tps = int(fixed.tau.idxmax()), int(fixed.tokens_per_s.idxmax())
    tau_r = compare_configs(sums, tree(top_tau), {**at, "method": "dflash"})["tau"]
    tps_r = compare_configs(sums, tree(top_tps), {**at, "method": "dflash"})["tokens_per_s"]
    peak = peak_text(top_tps, fixed.speedup, peak_ties(arch, block, rows, sums), "x AR")
    a = auto.iloc[0] if len(auto) else None
    return render("reading/sweep", arch=arch, block=block, prompts=int(chain.n_prompts), peak=peak,
                  tau=axis_verdict("tau", f"DDTree-{top_tau}", "DFlash", f"{fixed.tau[top_tau]:.2f}", f"{chain.tau:.2f}",
                                   tau_r),
                  tokens_per_s=axis_verdict("tokens/s", f"DDTree-{top_tps}", "DFlash", f"{fixed.speedup[top_tps]:.2f}x AR",
                                            f"{chain.speedup:.2f}x AR", tps_r),
                  auto=None if a is None else {"share": a.tokens_per_s / fixed.tokens_per_s.max(),
                                               "tree": a.mean_tree_size})


def entropy_note(table: pd.DataFrame) -> str:
    """Notebook 05: what the entropy column measures, said under the table that shows it
    (table: rows with arch, temperature, method, entropy). At T > 0 the target's entropy at the
    row's temperature; a greedy (T = 0) row has no temperature to scale by and reports it at
    T = 1, so it reads higher than the T = 0.3 rows."""
    first = table[table.method == "dflash"] if (table.method == "dflash").any() else table
    arch = first.arch.iloc[0]
    greedy, sampled = first[(first.arch == arch) & (first.temperature == 0)], first[(first.arch == arch) & (first.temperature > 0)]
    both = len(greedy) and len(sampled)
    low = sampled.loc[sampled.temperature.idxmin()] if both else None
    return render("reading/entropy_note", arch=arch,
                  greedy={"method": greedy.method.iloc[0], "entropy": greedy.entropy.iloc[0]} if both else None,
                  low={"entropy": low.entropy, "temperature": low.temperature} if both else None)


# ----------------------------------------------------------------------------- 08

PROPOSAL_NAMES = {("dflash", "unary"): "DFlash", ("dflash2", "unary"): "DFlash 2 unary",
                  ("dflash2", "conditional"): "DFlash 2 conditional"}


def dflash2_winners(summary: pd.DataFrame, sums: pd.DataFrame, temperature: float = 0.0) -> list[str]:
    """Notebook 08: per target at ``temperature``, the winner on each axis between the best tree
    (any proposal, any budget) and the best linear draft (DFlash's chain or DFlash 2's selector
    path): tau, and tokens/s (speedup over the run's AR), each with its interval over prompts.
    summary: ``dflash2.summary`` of the run; sums: ``verdicts.prompt_sums`` of its rows."""
    lines = []
    rows = summary[(summary.temperature == temperature) & (summary.method != "ar")]
    for arch, g in rows.groupby("arch", sort=False):
        trees, linear = g[g.method == "ddtree"], g[g.method == "dflash"]
        if trees.empty or linear.empty:
            continue
        name = lambda r: (f"DDTree-{r.budget} {PROPOSAL_NAMES[(r.drafter, r.tree)]}" if r.method == "ddtree"  # noqa: E731
                          else f"{'DFlash 2' if r.drafter == 'dflash2' else 'DFlash'} linear")
        pick = lambda r: {"arch": arch, "temperature": temperature, "method": r.method, "drafter": r.drafter,  # noqa: E731
                          **({"tree": r.tree, "budget": r.budget} if r.method == "ddtree" else {})}
        parts = []
        for axis, col, fmt in (("tau", "tau", "{:.2f}"), ("tokens/s", "speedup", "{:.2f}x AR")):
            t, ln = trees.loc[trees[col].idxmax()], linear.loc[linear[col].idxmax()]
            r = compare_configs(sums, pick(t), pick(ln))["tau" if col == "tau" else "tokens_per_s"]
            parts.append(axis_verdict(axis, name(t), name(ln), fmt.format(t[col]), fmt.format(ln[col]), r))
        lines.append(render("reading/dflash2_winners", arch=arch, temperature=temperature,
                            prompts=int(g.n_prompts.max()), parts=parts))
    return lines


# ----------------------------------------------------------------------------- 06

def ece_reading(arch: str, ece: float, nodes: int, rank0_predicted: float, rank0_observed: float,
                per_round_ratio: float) -> str:
    """Notebook 06: why a small ECE and a large per-round miss are both true."""
    return render("reading/ece", arch=arch, ece=ece, nodes=nodes, rank0_predicted=rank0_predicted,
                  rank0_observed=rank0_observed, per_round_ratio=per_round_ratio)


def sibling_gap_why(arch: str, main: float, sibling: float, nodes: int, enough: int = 30,
                    interval: dict | None = None, bound: float = 0.75, shown_on: tuple = ()) -> str:
    """Notebook 06: why the published after-sibling gap (after-sibling / main-path rate <
    ``bound``) is not reproduced on this target, read from the numbers only: too few nodes, an
    interval that holds the bound (this run cannot tell), or a ratio above it; ``shown_on``:
    the targets (same drafter recipe and size) where it does show, named so no size argument
    is made that they contradict."""
    ratio = sibling / main if main else float("nan")
    values = dict(arch=arch, nodes=nodes, sibling=sibling, main=main, bound=bound, shown_on=shown_on)
    if nodes < enough:
        return render("reading/sibling_gap_why", case="few", interval=None, **values)
    r = {"ratio": ratio, **(interval or {"lo": float("nan"), "hi": float("nan")})}
    case = "tie" if decide(r["lo"], r["hi"], bound) == "tie" and interval else "above"
    return render("reading/sibling_gap_why", case=case, interval=interval_text(r, 4, "x"), **values)


def branches_why(branch: pd.DataFrame) -> str:
    """Notebook 06: why rank-1+ branches are (not) over-predicted (rows: arch, predicted, observed)."""
    return "; ".join(f"{r.arch}: rank 1+ branches {_rate_vs_prediction(r.observed, r.predicted)}"
                     for r in branch.itertuples())


# ----------------------------------------------------------------------------- 07

def _edge_phrase(t: pd.DataFrame) -> str:
    """Who wins tokens/s between the best fixed tree and DFlash at each load of ``t`` (index:
    concurrency; best_over_dflash with _lo / _hi: the paired ratio and its interval)."""
    if "best_over_dflash" not in t or t.best_over_dflash.isna().all():
        edge = t.best_speedup / t.dflash_speedup
        lo = hi = pd.Series(float("nan"), index=t.index)
    else:
        edge, lo, hi = t.best_over_dflash, t.best_over_dflash_lo, t.best_over_dflash_hi
    sides = {c: decide(lo[c], hi[c]) for c in t.index}
    groups = [(side, [str(c) for c in t.index if sides[c] == side]) for side in ("below", "above", "tie")]
    a, b = t.index.min(), t.index.max()
    return render("reading/edge", groups=[(side, cs) for side, cs in groups if cs], a=a, b=b,
                  first=interval_text({"ratio": edge[a], "lo": lo[a], "hi": hi[a]}, 2, "x"),
                  last=interval_text({"ratio": edge[b], "lo": lo[b], "hi": hi[b]}, 2, "x"),
                  move=_gap_move(sides, a, b, edge, lo, hi))


def _gap_move(sides: dict, a, b, edge: pd.Series, lo: pd.Series, hi: pd.Series) -> str:
    """How the gap between the best tree and DFlash moved from load ``a`` to ``b``, by the one
    rule (``verdicts.apart``): it narrows or widens only when the two intervals are told apart."""
    if math.isnan(lo[a]) or math.isnan(lo[b]):
        case = "no interval"
    elif sides[a] == sides[b] == "tie":
        case = "tie at both ends"
    elif apart({"lo": lo[a], "hi": hi[a]}, {"lo": lo[b], "hi": hi[b]}) == "tie":
        case = "overlap"
    elif "tie" not in (sides[a], sides[b]) and sides[a] != sides[b]:
        case = "sides"
    else:
        case = "narrows" if abs(edge[b] - 1) < abs(edge[a] - 1) else "widens"
    return render("reading/gap_move", case=case)


def concurrency_reading(arch: str, t0: pd.DataFrame) -> str:
    """Notebook 07: where the best budget, the winner between the best tree and DFlash and
    ``auto`` went with load (t0: ``concurrency_table`` rows of one arch at T = 0, index:
    concurrency)."""
    lo, hi = t0.index.min(), t0.index.max()
    best = ", ".join(budget_label(r) for r in t0.itertuples())
    ties = sum(len(getattr(r, "tied_budgets", ())) > 1 for r in t0.itertuples())
    end, start = tied_of(t0.loc[hi]), tied_of(t0.loc[lo])   # the budgets not told apart from the best at each end
    move = ("falls" if max(end) < min(start) else "rises" if min(end) > max(start) else
            "same" if t0.best_budget[hi] == t0.best_budget[lo] else "unclear")
    return render("reading/concurrency", arch=arch, loads=list(t0.index), best=best, move=move, lo=lo, hi=hi,
                  edge=_edge_phrase(t0), auto_lo=t0.auto_vs_best.min(), auto_hi=t0.auto_vs_best.max(), ties=ties)


def sampled_reading(arch: str, t: pd.DataFrame, temperature: float) -> str:
    """Notebook 07 at a sampled temperature: where every method stands against batched AR (its
    speedups' range over loads, and whether every interval lies below 1) and who wins between
    the best tree and DFlash (t: ``concurrency_table`` rows of one arch at ``temperature``)."""
    cols = {"DFlash": "dflash_speedup", "the best fixed tree": "best_speedup", "auto": "auto_speedup"}
    spans = "; ".join(f"{name} {t[c].min():.2f}-{t[c].max():.2f}x" for name, c in cols.items() if t[c].notna().any())
    top = max(t[c].max() for c in cols.values() if t[c].notna().any())
    his = [t[f"{c}_hi"] for c in cols.values() if f"{c}_hi" in t and t[c].notna().any()]
    all_below = bool(his) and all((h < 1).all() for h in his)
    where = "every interval below" if all_below else "below" if top < 1 else "not below"
    return render("reading/sampled", arch=arch, temperature=temperature, where=where, spans=spans, edge=_edge_phrase(t))


def best_budget_why(arch: str, t0: pd.DataFrame) -> str:
    """Notebook 07: why the published shrinking best budget does not reproduce here, read from
    the table (index: concurrency; best_budget, best_speedup[, tied_budgets]): the budgets
    tied best at the largest concurrency are not all below those at the smallest
    (``claims.best_budget_shrinks``), and what the best tree gains over batched AR there."""
    lo, hi = t0.index.min(), t0.index.max()
    ties = lambda c: tied_of(t0.loc[c])  # noqa: E731
    path = ", ".join(f"{budget_label(r)} (c={r.Index})" for r in t0.itertuples())
    shared = sorted(set(ties(lo)) & set(ties(hi)))
    return render("reading/best_budget_why", arch=arch, path=path, shared=shared, lo=lo, hi=hi, ties_lo=list(ties(lo)),
                  ties_hi=list(ties(hi)), speedup=t0.best_speedup[hi])


# ----------------------------------------------------------------------------- 09

def rules_reading(summary: pd.DataFrame, sums: pd.DataFrame, built_in: str = "DDTree") -> list[str]:
    """Notebook 09: per target, each rule against DDTree at the largest budget, on tau and
    tokens/s, each with its interval over prompts (``verdicts.axis_verdict``: a tie where it holds
    1), so no rule 'beats' DDTree on a ratio its interval does not tell apart. summary:
    ``your_tree.summary`` (rule: display name, tree: stored key); sums: ``verdicts.prompt_sums`` of
    the run's rows."""
    lines = []
    for arch, rows in summary[summary.method == "ddtree"].groupby("arch", sort=False):
        big = rows.budget.max()
        top = rows[rows.budget == big].set_index("rule")
        at = {"arch": arch, "method": "ddtree", "budget": big}
        base = top.loc[built_in]
        for rule, r in top.drop(index=built_in).iterrows():
            ratio = compare_configs(sums, {**at, "tree": r.tree}, {**at, "tree": base.tree})
            lines.append(f"{arch}, budget {int(big)} ({int(r.n_prompts)} prompts), {rule} against {built_in}: "
                         + axis_verdict("tau", rule, built_in, f"{r.tau:.2f}", f"{base.tau:.2f}", ratio["tau"]) + "; "
                         + axis_verdict("tokens/s", rule, built_in, f"{r.tokens_per_s:.0f}", f"{base.tokens_per_s:.0f}",
                                        ratio["tokens_per_s"]))
    return lines
