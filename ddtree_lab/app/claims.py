"""The notebooks' self-checks, as plain functions of what a notebook measured.

Each function takes measured values (numbers, Series, DataFrames a notebook already holds)
and returns a ``Claim`` (claim, expected, got, ok); the notebook hands it to ``lab.check``
(fails loudly) or ``lab.compare`` (a published claim: printed, never asserted). Kept here, and
not in the notebooks, so ``app/tests/test_claims.py`` can feed every check a wrong result and see
it fail. Values in ``got`` are formatted with enough digits to decide the comparison
(``fmt_vs``): a 0.896 is never shown as 0.90 beside ">= 0.90".

Three kinds, never mixed: a *check* (the lab's correctness: ``lab.check``, fails the notebook),
a *published* claim (``lab.compare``: quoted with its source, reproduced or not, never fails),
and a *goal* (the lab's own target, e.g. issue 20's 1.15x: printed goal / got / met, never
fails, listed together at the end). ``Record`` keeps all three in the order a notebook made
them, so its last cell can list the goals and write the conclusion (``reading.conclusion``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .templating import render
from ..experiments.plumbing.verdicts import decide


@dataclass(frozen=True)
class Claim:
    """One checked statement: what is claimed, what would confirm it, what was measured.
    decided: False when the measurement's 95% interval holds the threshold it is compared with
    (``verdicts.decide``): the claim is then neither reproduced nor refuted, and says so."""
    claim: str
    expected: str
    got: str
    ok: bool
    decided: bool = True


@dataclass(frozen=True)
class Goal:
    """One of the lab's own goals (not a published claim, not a correctness check): printed
    goal / got / met, and never fails the notebook when missed."""
    goal: str
    target: str
    got: str
    met: bool
    decided: bool = True   # False: the 95% interval holds the target, so neither met nor missed is told apart

    @property
    def verdict(self) -> str:
        """'met', 'missed', or 'not told apart' (the interval holds the target)."""
        return "not told apart" if not self.decided else "met" if self.met else "missed"

    def text(self) -> str:
        return render("claims/goal", goal=self.goal, target=self.target, got=self.got, verdict=self.verdict)


def as_goal(claim: "Claim | Goal") -> Goal:
    """A ``Claim`` read as a goal (its expected value is the target)."""
    return claim if isinstance(claim, Goal) else Goal(claim.claim, claim.expected, claim.got, bool(claim.ok),
                                                       claim.decided)


def _unpack(claim, expected, got, ok) -> tuple:
    """A ``claims.Claim`` or the four values."""
    if isinstance(claim, Claim):
        return claim.claim, claim.expected, claim.got, claim.ok
    return claim, expected, got, ok


def check(claim, expected=None, got=None, ok=None) -> None:
    """Print ``expected / got / match`` for a notebook claim and fail loudly if false.
    claim: a ``claims.Claim``, or its text with the other three values."""
    claim, expected, got, ok = _unpack(claim, expected, got, ok)
    print(render("claims/check", claim=claim, expected=expected, got=got, ok=bool(ok)))
    if not ok:
        raise AssertionError(f"claim failed: {claim} (expected {expected}, got {got})")


def compare(claim, expected=None, got=None, reproduced=None) -> bool:
    """Print a PUBLISHED claim next to what this lab measured, without failing: the lab's
    answer may be that it does not reproduce here (the notebook then says so), or, for a
    ``Claim`` whose interval holds its threshold, that this run cannot tell."""
    decided = claim.decided if isinstance(claim, Claim) else True
    claim, expected, got, reproduced = _unpack(claim, expected, got, reproduced)
    print(render("claims/compare", claim=claim, expected=expected, got=got, reproduced=bool(reproduced), decided=decided))
    return bool(reproduced)



class Record:
    """What one notebook checked, compared with publications and aimed at, in order.

    ``check`` = ``claims.check`` (raises on a failed check), ``compare`` = ``claims.compare`` plus,
    when the published claim does not reproduce, one rendered sentence on why; ``goal``
    prints goal / got / met and never raises. ``goal_list`` is the notebook's goals in one
    block; ``reading.conclusion`` reads the whole record."""

    def __init__(self) -> None:
        self.checks: list[Claim] = []
        self.skipped: list[Claim] = []   # checks printed but not asserted (SMOKE, nothing to test): counted apart
        self.published: list[tuple[Claim, str | None]] = []
        self.goals: list[Goal] = []

    def check(self, claim: "Claim", few_prompts: bool = False) -> None:
        """``claims.check``. few_prompts: a statistical claim (a tau or a timing comparison, not
        an identity) on a SMOKE run's couple of prompts and tokens: printed with whether it holds
        ("asserted: no ..."), not asserted and not counted; the full run (and the main job, from the stores) asserts it."""
        if few_prompts:
            claim, expected, got, ok = _unpack(claim, None, None, None)
            print(f"{claim}\n  expected: {expected}\n  got:      {got}\n  asserted: no (SMOKE: too few prompts; "
                  f"the full run asserts it; here it {'holds' if ok else 'does not hold'})")
            self.skipped.append(claim)
            return
        check(claim)
        self.checks.append(claim)

    def check_unless(self, skip: str | None, claim: "Claim") -> None:
        """``lab.check_unless``, counted: a check that runs is one of ``checks`` (it raises when it
        fails), a skipped one (``skip`` says why) one of ``skipped``, so the conclusion's count
        holds every check the notebook printed."""
        if not skip:
            self.check(claim)
            return
        print(f"skipped:  {claim.claim}\n  why:      {skip}\n  got:      {claim.got}")
        self.skipped.append(claim)

    def compare(self, claim: "Claim", why: str | None = None) -> bool:
        """A published claim: printed, never asserted; ``why`` (a ``reading`` sentence) is
        printed when it does not reproduce."""
        reproduced = compare(claim)
        if not reproduced and why:
            print(f"  {'why not:' if claim.decided else 'why:    '}    {why}")
        self.published.append((claim, None if reproduced else why))
        return reproduced

    def goal(self, claim: "Claim | Goal") -> bool:
        g = as_goal(claim)
        print(g.text())
        self.goals.append(g)
        return g.met

    def goal_list(self) -> str:
        """The notebook's goals together: '2 of 3 goals met' and one line each."""
        if not self.goals:
            return "This notebook sets no goals of the lab's own."
        lines = [f"The lab's goals in this notebook: {goal_count(self.goals)}"]
        lines += [f"  [{g.verdict}] {g.goal}: target {g.target}, got {g.got}" for g in self.goals]
        return "\n".join(lines)


def goal_count(goals) -> str:
    """'2 of 4 met' (', 1 not told apart' when an interval holds its target)."""
    met, open_ = sum(g.verdict == "met" for g in goals), sum(g.verdict == "not told apart" for g in goals)
    return render("claims/goal_count", met=met, goals=len(goals), open=open_)


def fmt_vs(value: float, bound: float, digits: int = 2) -> str:
    """``value`` rounded to the fewest digits (>= ``digits``) that keep it on its side of
    ``bound``: 0.896 vs 0.9 gives '0.896', 0.95 vs 0.9 gives '0.95'."""
    for d in range(digits, 8):
        shown = round(float(value), d)
        if (shown >= bound) == (value >= bound) and (shown <= bound) == (value <= bound):
            return f"{value:.{d}f}"
    return f"{value:.8g}"


def _interval(value: float, interval: dict | None, bound: float, digits: int = 4) -> tuple[str, bool]:
    """('0.8501 [0.74, 0.95]', decided): ``value`` unrounded enough (``digits``, never rounded across
    ``bound``) with its 95% interval ({lo, hi}: ``verdicts.pooled_ratio``), and whether the interval
    lies on one side of ``bound`` (True without an interval: nothing to hold)."""
    shown = fmt_vs(value, bound, digits)
    if not interval or math.isnan(interval.get("lo", math.nan)):
        return shown, True
    lo, hi = interval["lo"], interval["hi"]
    return f"{shown} [{lo:.2f}, {hi:.2f}]", decide(lo, hi, bound) != "tie"   # the one rule, on the printed ends


def _series(values) -> str:
    """A short readable list, '1.00, 0.97, 0.95' (no brackets, no dict repr)."""
    return ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in values)


def _worded(name: str, values: dict) -> list[str]:
    """The three lines of the template ``claims/<name>`` (``templating.render``): the claim (or
    goal), what would confirm it (the target), what was measured; ``values``: its numbers."""
    lines = render("claims/" + name, **values).split("\n")
    if len(lines) != 3:
        raise ValueError(f"template claims/{name} renders {len(lines)} lines; it must render 3 (claim, expected, got)")
    return lines


def _said(name: str, ok, decided=True, **values) -> Claim:
    """A ``Claim`` worded by the template ``claims/<name>`` (``_worded``), ``ok`` and ``decided`` from code."""
    return Claim(*_worded(name, values), ok, decided)


def _aimed(name: str, met, decided=True, **values) -> Goal:
    """A ``Goal`` worded by the template ``claims/<name>`` (``_worded``), ``met`` and ``decided`` from code."""
    return Goal(*_worded(name, values), met, decided)


# ----------------------------------------------------------------------------- shared

def equals_ar(claim: str, matches_ar) -> Claim:
    """Every prompt's output equals AR: the share of matching prompts is 1 everywhere.
    matches_ar: values in [0, 1], one per (config) row."""
    low = float(pd.Series(matches_ar, dtype=float).min())
    return Claim(claim, "1.0 (every prompt)", f"{low:.3g}" if low < 1 else "1.0", bool(low == 1.0))


def below(claim: str, value: float, bound: float, what: str = "max err") -> Claim:
    """``value`` < ``bound`` (an error that must be small)."""
    return Claim(claim, f"{what} < {bound:.0e}", f"{value:.2e}", bool(value < bound))


def above(claim: str, value: float, bound: float, what: str = "err") -> Claim:
    """``value`` > ``bound`` (an error that must show)."""
    return Claim(claim, f"{what} > {bound:.0e}", f"{value:.2e}", bool(value > bound))


# ----------------------------------------------------------------------------- 00

def same_tokens(spec_tokens: list, ar_tokens: list) -> Claim:
    """Speculative output equals AR token for token (T = 0, exact verification)."""
    same = list(spec_tokens) == list(ar_tokens)
    return _said("same_tokens", same, same=same)


def fewer_calls(spec_calls: int, ar_calls: int) -> Claim:
    """The speculative loop needs fewer target forwards than AR."""
    return Claim("DDTree needs fewer target calls than AR", f"< {ar_calls}", str(spec_calls), spec_calls < ar_calls)


def equals_specification(fast, spec) -> Claim:
    """The fast loop's ``Generation`` equals the one-page specification's
    (``reference_generate``): tokens, acceptance lengths and tree sizes."""
    fields = ("tokens", "acceptance_lengths", "tree_sizes")
    differ = [f for f in fields if list(getattr(fast, f)) != list(getattr(spec, f))]
    return _said("equals_specification", not differ, fields=fields, differ=differ)


# ----------------------------------------------------------------------------- 01

def heap_matches_brute_force(mismatches: int, cases: int) -> Claim:
    """The heap builder equals brute force on every small case."""
    return _said("heap_matches_brute_force", cases > 0 and mismatches == 0, cases=cases, mismatches=mismatches)


def acceptance_rises(curve) -> Claim:
    """Expected acceptance is non-decreasing in the budget. curve: [B] values, budget 1..B."""
    gains = pd.Series(curve, dtype=float).diff().dropna()
    return Claim("expected acceptance rises with budget", "non-decreasing", f"min gain {gains.min():.2e}",
                 bool(len(gains) and gains.min() >= 0))


def diminishing_returns(curve, tol: float = 1e-12) -> Claim:
    """The gains never grow (nodes arrive in decreasing weight). curve: [B] values."""
    rise = pd.Series(curve, dtype=float).diff().diff().dropna()
    return _said("diminishing_returns", bool(len(rise) and rise.max() <= tol), rise=rise.max())


def monotone(claim: str, expected: str, values: pd.Series, increasing: bool) -> Claim:
    """``values`` (indexed by the swept knob, ascending) move one way only."""
    ok = values.is_monotonic_increasing if increasing else values.is_monotonic_decreasing
    return Claim(claim, expected, _series(values.round(2).tolist()), bool(ok and len(values) > 1))


def deeper_when_confident(max_depth: pd.Series) -> Claim:
    """Max tree depth falls as the draft temperature rises (index: temperature)."""
    return monotone("confident drafts give deeper trees", "max depth falls as temperature rises", max_depth, False)


def bushier_when_unsure(root_children: pd.Series) -> Claim:
    """Root children rise with the draft temperature (index: temperature)."""
    return monotone("unsure drafts give bushier roots", "root children rise with temperature", root_children, True)


# ----------------------------------------------------------------------------- 02

def leakage_per_node(errors: pd.DataFrame) -> list[Claim]:
    """The three per-node claims of notebook 02 on ``leakage.leakage_table`` rows
    (err_naive, err_fork, first_branch_before)."""
    clean, leaky = errors[~errors.first_branch_before], errors[errors.first_branch_before]
    return [below(render("claims/leakage_clean"), clean.err_naive.max(), 1e-4),
            _said("leakage_after_branch", bool(len(leaky) and leaky.err_naive.median() > 1e-3),
                  median=leaky.err_naive.median(), nodes=len(leaky)),
            below(render("claims/leakage_fork"), errors.err_fork.max(), 1e-4)]


def leakage_costs_acceptance(naive_tau: float, exact_tau: float, budget: int) -> Claim:
    """Naive tau is below exact tau at the largest budget."""
    return _said("leakage_costs_acceptance", bool(naive_tau < exact_tau), budget=budget, naive=naive_tau, exact=exact_tau)


def naive_peaks_early(naive_tau: pd.Series) -> Claim:
    """Published: naive tau peaks at a budget below the largest (index: budget)."""
    peak, big = int(naive_tau.idxmax()), int(naive_tau.index.max())
    return _said("naive_peaks_early", peak < big, big=big, peak=peak, tau=naive_tau[peak])


def crop_leaks_gdn(min_error_per_k: pd.Series) -> Claim:
    """transformers' crop leaves rejected tokens in the GDN state at every k (min over prompts)."""
    return above(render("claims/crop_leaks_gdn"), float(min_error_per_k.min()), 1e-3, "min over prompts and k")


def crop_exact_mla(max_error: float) -> Claim:
    """The same crop is exact on MLA."""
    return below(render("claims/crop_exact_mla"), max_error, 1e-5)


def reference_loop_departs(departures: int, runs: int, unit: str = "prompt x block runs") -> Claim:
    """The reference loop departs from AR on at least one GDN run; ``runs``: how many runs the
    count is out of (e.g. prompts x block sizes), so the count says of what."""
    return _said("reference_loop_departs", bool(runs > 0 and departures >= 1), unit=unit, departures=departures, runs=runs)


# ----------------------------------------------------------------------------- 03

def precision_exact(max_err: pd.Series) -> list[Claim]:
    """Tree vs path forward, per setting (index: setting name): float64 harness and float32."""
    return [below(render("claims/precision_float64"), max_err["float64 + harness"], 1e-12),
            below("float32: exact to float32 rounding", max_err["float32"], 1e-4)]


def routing_identical(identical_share: float) -> Claim:
    """Expert routing is identical per token and layer (share of (node, layer) pairs)."""
    return _said("routing_identical", bool(identical_share == 1.0), identical=identical_share == 1.0, share=identical_share)


def flips_at_near_ties(flip_margins, median_margin: float, share: float = 0.05) -> Claim:
    """bf16 argmax flips only where the top-2 margin is < ``share`` of the median margin."""
    margins = list(flip_margins)
    if not margins:   # nothing to test: never a vacuous match (the notebook skips the check and says so)
        return _said("flips_at_near_ties", False, share=share, flips=0, worst=None, median=median_margin)
    worst = max(margins)
    return _said("flips_at_near_ties", bool(worst < share * median_margin), share=share, flips=len(margins),
                 worst=worst, median=median_margin)


# ----------------------------------------------------------------------------- 04

def modes_exact_in_float64(f64: pd.Series) -> list[Claim]:
    """Per GDN mode max error in float64 (index: mode): fork and wy exact, naive not."""
    exact = max(f64["fork"], f64["wy"])
    return [Claim("fork and wy are exact in float64", "< 1e-12", f"fork {f64['fork']:.2e}, wy {f64['wy']:.2e}",
                  bool(exact < 1e-12)),
            above("naive is not", f64["naive"], 1e-6)]


def commit_exact(commit_err: pd.Series) -> Claim:
    """Cache after verify + commit equals a fresh prefill. commit_err: the max |difference| over
    every cache part (attention rows, conv and recurrent states), float64 (index: exact mode)."""
    return below(render("claims/commit_exact"), float(commit_err.max()), 1e-12)


def fork_equals_wy(tau_fork: pd.Series, tau_wy: pd.Series) -> Claim:
    """fork and wy decode identically: same tau at every budget (index: budget)."""
    gap = float((tau_fork - tau_wy).abs().max())
    return _said("fork_equals_wy", bool(gap < 1e-9), gap=gap)


def exact_restores_acceptance(tau_wy: pd.Series, tau_naive: pd.Series) -> Claim:
    """wy tau at the largest budget beats naive's best tau (index: budget)."""
    big = int(tau_wy.index.max())
    return _said("exact_restores_acceptance", bool(tau_wy[big] > tau_naive.max()), big=big, wy=tau_wy[big],
                 naive=tau_naive.max())


def rises_like_mla(tau_gdn: pd.Series, tau_mla: pd.Series) -> Claim:
    """GDN (exact) and MLA tau both higher at the largest budget than at the smallest."""
    lo, hi = int(tau_gdn.index.min()), int(tau_gdn.index.max())
    ok = tau_gdn[hi] > tau_gdn[lo] and tau_mla[hi] > tau_mla[lo]
    return _said("rises_like_mla", bool(ok), hi=hi, lo=lo, gdn_lo=tau_gdn[lo], gdn_hi=tau_gdn[hi], mla_lo=tau_mla[lo],
                 mla_hi=tau_mla[hi])


# ----------------------------------------------------------------------------- 05

def tau_keeps_rising(arch: str, tau: pd.Series) -> Claim:
    """tau at the largest budget >= tau at 16 (or, when 16 is not below it, at the smallest
    budget: never the largest against itself) (index: budget)."""
    big = int(tau.index.max())
    ref = 16 if 16 in tau.index and 16 < big else int(tau.index.min())
    return _said("tau_keeps_rising", bool(ref < big and tau[big] >= tau[ref]), arch=arch, big=big, ref=ref,
                 at_big=tau[big], at_ref=tau[ref])


def tree_beats_chain(claim: str, tree_tau: float, chain_tau: float, note: str = "") -> Claim:
    """DDTree tau / DFlash tau > 1 (outside loops, on real text, ...)."""
    ratio = tree_tau / chain_tau if chain_tau else math.inf
    return Claim(claim, "DDTree / DFlash tau > 1", f"{fmt_vs(ratio, 1.0)}{note}", bool(tree_tau > chain_tau))


# ----------------------------------------------------------------------------- 06

def ranks_ordered(rank0_observed: float, branch_observed: float) -> Claim:
    """The target accepts the drafter's rank-0 token more often than its rank-1+ branches."""
    return _said("ranks_ordered", bool(rank0_observed > branch_observed), rank0=rank0_observed, branch=branch_observed)


def branches_overpredicted(branch: pd.DataFrame) -> Claim:
    """Published: rank-1+ observed < 0.5 x predicted (rows: arch, predicted, observed)."""
    far = bool(len(branch) and (branch.observed.values < 0.5 * branch.predicted.values).all())
    return _said("branches_overpredicted", far, rows=list(branch.itertuples()))


def surrogate_within(ratios: dict, tol: float = 0.25) -> Claim:
    """Observed / surrogate accepted tokens per round within 1 +- ``tol`` for every arch."""
    got = ", ".join(f"{a} {fmt_vs(r, 1 + tol if r > 1 else 1 - tol)}" for a, r in ratios.items())
    ok = all(1 - tol <= r <= 1 + tol for r in ratios.values())
    return _said("surrogate_within", bool(ratios) and ok, tol=tol, lo=1 - tol, hi=1 + tol, ratios=got)


def continuation_valid(cont: pd.DataFrame) -> Claim:
    """The continuation table is non-empty and every rate a probability."""
    rates = cont[["predicted", "observed"]].stack()
    ok = len(cont) > 0 and bool(rates.between(0, 1).all())
    return _said("continuation_valid", ok, rows=len(cont), lo=rates.min() if len(cont) else None,
                 hi=rates.max() if len(cont) else None)


def after_sibling_gap(arch: str, main: float, sibling: float, n_sibling: int, interval: dict | None = None,
                      bound: float = 0.75) -> Claim:
    """Published (serving engines, a 27B target): after a rank >= 1 sibling the next depth is
    accepted < ``bound`` x the main path. interval: the 95% interval of sibling / main
    (``verdicts.pooled_ratio``); when it holds ``bound`` the claim is not told apart here."""
    ratio = sibling / main if main else math.nan
    shown, decided = _interval(ratio, interval, bound)
    return _said("after_sibling_gap", bool(n_sibling > 0 and decided and ratio < bound),
                 bool(n_sibling > 0 and decided) or n_sibling == 0, arch=arch, bound=bound, sibling=sibling, main=main,
                 shown=shown, n_sibling=n_sibling)


# ----------------------------------------------------------------------------- 07

def batching_pays(arch: str, ar_tokens_per_s: pd.Series) -> Claim:
    """Batched AR tokens/s higher at the largest concurrency than at the smallest (index: concurrency)."""
    lo, hi = ar_tokens_per_s.index.min(), ar_tokens_per_s.index.max()
    return _said("batching_pays", bool(hi > lo and ar_tokens_per_s[hi] > ar_tokens_per_s[lo]), arch=arch, hi=hi, lo=lo,
                 at_hi=ar_tokens_per_s[hi], at_lo=ar_tokens_per_s[lo])


def best_budget_shrinks(arch: str, best_budget: pd.Series, tied: pd.Series | None = None) -> Claim:
    """Published (vLLM PR 42910; CAST): the best budget at the largest concurrency < at the
    smallest (index: concurrency). tied: per concurrency the budgets not told apart from the
    best (``concurrency_table.tied_budgets``); then it shrinks only when every budget tied at
    the largest concurrency is below every one tied at the smallest (outside the noise)."""
    lo, hi = best_budget.index.min(), best_budget.index.max()
    ties = tied if tied is not None else best_budget.map(lambda b: (int(b),))
    label = lambda c, b: f"{int(b)} (c={c})" if len(ties[c]) == 1 else f"{int(b)}, tied {'/'.join(map(str, ties[c]))} (c={c})"  # noqa: E731
    path = " -> ".join(label(c, b) for c, b in best_budget.items())
    return _said("best_budget_shrinks", bool(max(ties[hi]) < min(ties[lo])), arch=arch, hi=hi, lo=lo,
                 tied=tied is not None, path=path)


def auto_near_best(arch: str, auto_vs_best: pd.Series, floor: float = 0.9, lo: pd.Series | None = None,
                   hi: pd.Series | None = None) -> Claim:
    """The lab's goal (not published): auto tokens/s / best fixed >= ``floor`` at every
    concurrency (index: concurrency); each ratio shown with the digits that decide it and, with
    ``lo`` / ``hi`` (its paired 95% interval), met only when every interval lies at or above
    the floor, missed when one lies below it, else not told apart."""
    if lo is None or hi is None:
        ratios = ", ".join(f"{fmt_vs(r, floor)} (c={c})" for c, r in auto_vs_best.items())
        ok, decided = bool((auto_vs_best >= floor).all()), True
    else:
        shown = {c: _interval(r, {"lo": lo[c], "hi": hi[c]}, floor, 3) for c, r in auto_vs_best.items()}
        ratios = ", ".join(f"{text} (c={c})" for c, (text, _) in shown.items())
        below = any(d and auto_vs_best[c] < floor for c, (_, d) in shown.items())
        ok = all(d and auto_vs_best[c] >= floor for c, (_, d) in shown.items())
        decided = ok or below
    return _said("auto_near_best", ok, decided, arch=arch, margin=1 - floor, floor=floor, ratios=ratios)


# ----------------------------------------------------------------------------- 08

def dflash2_lossless(equal: int, total: int) -> Claim:
    """DFlash 2 decoding (linear and conditional trees) equals AR at T = 0 on every prompt row."""
    return _said("dflash2_lossless", bool(total > 0 and equal == total), equal=equal, total=total)


def conditional_tree_gain(arch: str, conditional: float, marginal: float, goal: float = 1.15,
                          interval: dict | None = None) -> Claim:
    """Issue 20's goal: DDTree-64 tau outside loops over DFlash 2 conditional >= ``goal`` x over
    DFlash marginals (T = 0). interval: the ratio's 95% interval over prompts
    (``verdicts.pooled_ratio``): when it holds the goal, the goal is not told apart."""
    ratio = conditional / marginal if marginal else float("nan")
    shown, decided = _interval(ratio, interval, goal)
    return _said("conditional_tree_gain", bool(decided and ratio >= goal), decided, arch=arch, goal=goal,
                 conditional=conditional, marginal=marginal, shown=shown)


def sibling_collapse_closed(arch: str, after_sibling: float, main_path: float, nodes: int, goal: float = 0.85,
                            interval: dict | None = None) -> Claim:
    """Issue 20's goal: right after a rank >= 1 sibling the next depth is accepted >= ``goal`` x as
    often as on the main path (conditional trees, outside loops); the two rates with the digits
    that divide to the ratio shown, and the ratio's 95% interval (``interval``) when given."""
    ratio = after_sibling / main_path if main_path else float("nan")
    shown, decided = _interval(ratio, interval, goal)
    return _said("sibling_collapse_closed", bool(nodes > 0 and decided and ratio >= goal), decided or nodes == 0,
                 arch=arch, goal=goal, after_sibling=after_sibling, main_path=main_path, shown=shown, nodes=nodes)


def compiled_loop_goal(arch: str, loops: pd.DataFrame, goal: float = 1.3) -> Goal:
    """Issue 29's goal: every lab loop compiled runs >= ``goal`` x its eager tokens/s, with no
    graph break. loops: ``compiled_loop.loop_summary`` rows of one target's lab loops (method,
    budget, compiled/eager with _lo / _hi, graph_breaks). The slowest loop decides, shown
    unrounded with its interval: when that interval holds the goal, it is not told apart."""
    worst = loops.loc[loops["compiled/eager"].idxmin()]
    shown, decided = _interval(float(worst["compiled/eager"]), {"lo": worst["compiled/eager_lo"],
                                                              "hi": worst["compiled/eager_hi"]}, goal, 3)
    breaks = int(loops.graph_breaks.max())
    met = bool(worst["compiled/eager"] >= goal and decided and breaks == 0)
    return _aimed("compiled_loop_goal", met, decided or breaks > 0, arch=arch, goal=goal, breaks=breaks,
                  shown=shown.replace(" [", "x [", 1) if " [" in shown else shown + "x", method=worst.method,
                  budget=worst.budget)


def drafter_grid_goals(pick: pd.Series, previous: pd.Series, tf_floor: float, prompts: int) -> list[Goal]:
    """Issue 27's goals for the drafter a grid picks (``drafter_grid.ship_rule`` row) of one
    target, against the previous release's drafter on the same lenses (``prompts``: HumanEval
    prompts decoded)."""
    arch = pick["arch"]
    pairs = [("free-running DFlash tau, all rounds", "decode_dflash_tau"),
             ("free-running DFlash tau, outside loops", "decode_dflash_tau_outside_loops")]
    goals = [_aimed("drafter_grid_previous", bool(pick[col] >= previous[col]), arch=arch, what=what, prompts=prompts,
                    previous=previous[col], got=pick[col]) for what, col in pairs]
    goals.append(_aimed("drafter_grid_tau", bool(pick["decode_dflash_tau"] >= 3.0), arch=arch, prompts=prompts,
                        got=pick["decode_dflash_tau"]))
    goals.append(_aimed("drafter_grid_teacher_forced", bool(pick["tf_dflash_tau"] >= tf_floor), arch=arch, floor=tf_floor,
                        got=pick["tf_dflash_tau"]))
    goals.append(_aimed("drafter_grid_tree", bool(pick["tf_ddtree64_tau"] >= 2.5), arch=arch, got=pick["tf_ddtree64_tau"]))
    return goals



# ----------------------------------------------------------------------------- 09

def rules_lossless(table: pd.DataFrame) -> Claim:
    """Every rule passes ``check_lossless`` at T > 0. table: ``your_tree.lossless_table`` rows
    (rule, passed, p_value, temperature, samples)."""
    got = ", ".join(f"{r.rule} p = {r.p_value:.2g}" for r in table.itertuples())
    t = float(table.temperature.iloc[0]) if len(table) else math.nan
    return _said("rules_lossless", bool(len(table)) and bool(table.passed.all()), temperature=t,
                 runs=int(table.samples.max()) if len(table) else 0, p_values=got)


def biased_walk_caught(p_value: float, epsilon: float = 1.0) -> Claim:
    """``check_lossless`` fails the deliberately biased walk (``lossless.biased_walk``)."""
    return _said("biased_walk_caught", bool(p_value < 1e-3), epsilon=epsilon, p_value=p_value)


# ----------------------------------------------------------------------------- notebook 10 (issue 61)

def independent_union_exact(union: pd.DataFrame, n: int, k: int) -> Claim:
    """The stored independent-routing rows equal n (1 - (1 - k/n)^(budget + 1)) (``expert_union.csv``)."""
    rows = union[union.kind == "independent"]
    want = n * (1 - (1 - k / n) ** (rows.budget + 1))
    err = float((rows.experts - want).abs().max()) if len(rows) else math.inf
    return _said("independent_union_exact", bool(len(rows) and err < 1e-3), n=n, k=k, err=err, rows=len(rows))


def union_grows_with_the_tree(union: pd.DataFrame) -> Claim:
    """Published (MoE-Spec, arXiv 2602.16052; EVICT, arXiv 2605.00342): a larger draft tree
    activates more distinct experts. The tree's mean union per layer by budget never falls and
    ends above one token's k."""
    tree = union[union.kind == "tree"].groupby("budget")["experts"].mean()
    token = float(union[union.kind == "token"].experts.mean())
    ok = bool(len(tree) > 1 and (tree.diff().dropna() >= 0).all() and tree.iloc[-1] > token)
    return _said("union_grows_with_the_tree", ok, token=token, first=tree.iloc[0], first_budget=tree.index[0],
                 last=tree.iloc[-1], last_budget=tree.index[-1])


def expert_auto_lossless(table: pd.DataFrame) -> Claim:
    """Every config of the expert-auto run (both ``auto`` variants included) equals AR at T = 0."""
    worst = float(table.matches_ar.min()) if len(table) else 0.0
    return _said("expert_auto_lossless", bool(len(table) and worst == 1.0), worst=worst, configs=len(table))


def one_calibration_per_stack(published: pd.DataFrame) -> Claim:
    """Each fitted stack has exactly one calibration point; every other published point is predicted."""
    counts = published.groupby("stack")["calibration"].sum()
    predicted = int((~published.calibration.astype(bool)).sum())
    return _said("one_calibration_per_stack", bool(len(counts) and (counts == 1).all() and predicted >= 1),
                 counts=", ".join(f"{s}: {int(c)}" for s, c in counts.items()), predicted=predicted)


def projection_reaches(table: pd.DataFrame, model: str, accelerator: str, budget: int = 512) -> Claim:
    """The projection holds ``model`` on ``accelerator`` to ``budget`` under every stack and routing bound."""
    rows = table[(table.model == model) & (table.accelerator == accelerator) & (table.method == "ddtree")]
    top = rows.groupby(["stack", "routing"])["budget"].max()
    return _said("projection_reaches", bool(len(top) >= 2 and (top >= budget).all()), model=model, accelerator=accelerator,
                 budget=budget, ends=_series([f"{s}/{r}: {int(b)}" for (s, r), b in top.items()]))


def predictions_within(published: pd.DataFrame, tol: float = 0.25, least: int = 3) -> Goal:
    """Issue 61's goal: at least ``least`` published points predicted, each within ``tol``."""
    pred = published[~published.calibration.astype(bool)]
    worst = float(pred.error.abs().max()) if len(pred) else math.inf
    return _aimed("predictions_within", bool(len(pred) >= least and worst <= tol), tol=tol, least=least,
                  worst=fmt_vs(worst, tol), points=len(pred))


def expert_auto_measured(table: pd.DataFrame) -> Goal:
    """Issue 61's goal on this CPU: expert-aware auto's tokens/s no worse than node-count auto's
    (one interleaved run) and lossless."""
    auto = table[table.budget.astype(str) == "auto"].set_index("cost")
    mine, nodes = float(auto.loc["experts", "tokens_per_s"]), float(auto.loc["nodes", "tokens_per_s"])
    return _aimed("expert_auto_measured", bool(mine >= nodes and auto.loc["experts", "matches_ar"] == 1.0), nodes=nodes,
                  mine=fmt_vs(mine, nodes, 1), share=float(auto.loc["experts", "matches_ar"]))


def seed_large_budgets(bounds: pd.DataFrame, plausible_ms: float = 2.0, low: int = 64) -> Claim:
    """The seed's hypothesis: on Kimi K2.6 budgets of 64-128+ keep paying. Reproduced when, at a
    fixed cost per forward of at most ``plausible_ms`` (a fused tensor-parallel stack), some budget
    >= ``low`` pays (within 5% of the best tree and at least the chain) in every cell of
    ``k26_bounds.csv`` (every routing, chain tau and tree gain)."""
    near = bounds[bounds.fixed_ms <= plausible_ms]
    pays = near.budget_64_plus_pays.astype(bool)
    anywhere = bounds[bounds.budget_64_plus_pays.astype(bool)].fixed_ms
    return Claim(f"Kimi K2.6: trees pay to budgets of {low}-128+ (the seed)",
                 f"a budget >= {low} pays in every cell at <= {plausible_ms:g} ms of fixed cost per forward",
                 f"pays in {int(pays.sum())} of {len(near)} such cells; the smallest fixed cost where it pays in any "
                 f"cell: {f'{anywhere.min():g} ms' if len(anywhere) else 'none up to the largest'}",
                 bool(len(near) and pays.all()))


def bounds_cover(bounds: pd.DataFrame, least=(7, 3, 2, 2)) -> Claim:
    """Issue 69's bounds: at least 7 fixed costs x 3 routings x 2 chain taus x 2 tree gains, every
    combination a row."""
    axes = ["fixed_ms", "routing", "chain_tau", "tree_gain"]
    sizes = [bounds[a].nunique() for a in axes]
    full = len(bounds.drop_duplicates(axes)) == len(bounds) == math.prod(sizes)
    return Claim("the K2.6 bounds cover fixed cost x routing x chain tau x tree gain",
                 " x ".join(f">= {n} {a}" for n, a in zip(least, axes)) + ", one row per cell",
                 " x ".join(map(str, sizes)) + f" = {len(bounds)} rows",
                 bool(full and all(n >= m for n, m in zip(sizes, least))))


def no_tau_on_cap(taus: pd.Series, margin: float = 1e-6) -> Claim:
    """No projected tau(B) sits on its B + 1 cap for B >= 2 (index: budget)."""
    rows = taus[taus.index >= 2]
    gap = float((rows.index + 1 - rows).min()) if len(rows) else -math.inf
    return Claim("no projected tau sits on its B + 1 cap (B >= 2)", "min over B of (B + 1 - tau) > 0",
                 f"{gap:.3f} over {len(rows)} budgets", bool(len(rows) and gap > margin))


def unions_predicted(published: pd.DataFrame, held: float = 0.15, other: float = 0.30) -> Goal:
    """Issue 69's goal: every published union a fit did not use predicted within ``held``; a MoE no fit
    used (another model than any fitted point's) within ``other`` (``expert_union_published.csv``)."""
    fits = published[published.fit.str.startswith("laguna")]
    held_out = fits[~fits.calibration.astype(bool)]
    fitted_models = set(fits[fits.calibration.astype(bool)].model)
    foreign = held_out[~held_out.model.isin(fitted_models)]
    same = held_out[held_out.model.isin(fitted_models)]
    worst, far = float(same.error.abs().max()), float(foreign.error.abs().max())
    return Goal(f"published unions not fitted on: same model within {held:.0%}, another MoE within {other:.0%}",
                f"<= {held:.2f} and <= {other:.2f}", f"max |error| {worst:.3f} (same model), {far:.3f} (another MoE)",
                bool(len(same) and len(foreign) and worst <= held and far <= other))


def auto_never_loses(table: pd.DataFrame, floor: float = 0.95) -> Goal:
    """Issue 69's goal: auto's pooled tokens/s >= ``floor`` x the best of the chain and every fixed
    budget, on every target, and equal to AR (``auto_chain.csv``)."""
    auto = table[table.config == "ddtree-auto"]
    got = ", ".join(f"{r.arch} {r.vs_best:.3f} (paired {r.vs_best_paired:.3f} [{r.vs_best_lo:.3f}, {r.vs_best_hi:.3f}] "
                    f"vs {r.best_rival})" for r in auto.itertuples())
    return Goal(f"auto >= {floor} x the best of the chain and every fixed budget (pooled tokens/s), lossless",
                f">= {floor} on every target, equal to AR", got,
                bool(len(auto) >= 2 and (auto.vs_best >= floor).all() and (auto.matches_ar == 1.0).all()))


def validated_only_where_better(check: pd.DataFrame) -> Claim:
    """A published point is "validated" only where the cost model alone beats the trivial baseline
    (speedup = tau x c), and the kernel floor is "not validated" (``projection_validation.csv``)."""
    rows = check[check.verdict != "fitted"]
    better = rows.cost_only_error.abs() < rows.baseline_error.abs()
    consistent = ((rows.verdict == "validated") == better.fillna(False)).all()
    floor = check[check["stack"] == "kernel-floor"].verdict
    n = int((rows.verdict == "validated").sum())
    return Claim("'validated' only where the cost model beats the trivial baseline; the kernel floor not validated",
                 "verdicts agree with the errors; kernel floor 'not validated'",
                 f"{n} of {int(rows.cost_only_error.notna().sum())} predicted points validated; kernel floor: "
                 f"{', '.join(floor)}", bool(consistent and len(floor) and (floor == "not validated").all()))


def projection_rebuilt(stored: pd.DataFrame, rebuilt: pd.DataFrame) -> Claim:
    """The stored projection table (6 significant digits) equals the one rebuilt from the stores."""
    same = len(stored) == len(rebuilt)
    rel = float(((stored.predicted_speedup - rebuilt.predicted_speedup) / rebuilt.predicted_speedup).abs().max()) \
        if same else math.inf
    return _said("projection_rebuilt", bool(same and rel < 1e-5), rows=len(rebuilt), rel=rel)


# ----------------------------------------------------------------------------- 11

def families_naive_exact_before_branch(leak, departs=("JambaForCausalLM",)) -> Claim:
    """The naive verify (one stock forward of the flattened tree) equals each node's own path
    before the first branch, in every class but ``departs`` (whose stock forward of several tokens
    on a cache departs from its own decode: Jamba's scan starts from a zero state)."""
    rows = leak[~leak.after_branch & ~leak["class"].isin(departs)]
    worst = float(rows.max_dlogit.max()) if len(rows) else float("nan")
    return _said("families_naive_exact_before_branch", len(rows) > 0 and worst <= 1e-6, worst=worst,
                 classes=rows["class"].nunique())


def families_naive_leaks(leak) -> Claim:
    """After the first branch the naive verify departs from the node's own path, in every class."""
    per = leak[leak.after_branch].groupby("class").max_dlogit.max()
    return _said("families_naive_leaks", len(per) > 0 and bool((per > 1e-4).all()), classes=len(per),
                 smallest=per.min() if len(per) else None, which=per.idxmin() if len(per) else None)


def families_exact_equal_ar(table) -> Claim:
    """Exact tree verification's greedy output equals greedy decoding by the stock full forward
    on every prompt, family and budget (``matches_full_forward``: the truth where a stock decode
    step departs from the model's own prefill, as Nemotron-H's does)."""
    exact = table[table["mode"] == "exact"]
    low = float(exact.matches_full_forward.min()) if len(exact) else float("nan")
    return _said("families_exact_equal_ar", len(exact) > 0 and low == 1.0, low=low, rows=len(exact))


def families_naive_departs(table) -> Claim:
    """The leak is not only in the logits: the naive verify's output departs from AR on some
    prompt of every family at the largest budget."""
    top = table[(table["mode"] == "naive") & (table.budget == table.budget.max())]
    worst = top.set_index("family").matches_full_forward
    return _said("families_naive_departs", len(worst) > 0 and bool((worst < 1).all()),
                 shares=", ".join(f"{f} {v:.2f}" for f, v in worst.items()))


# ----------------------------------------------------------------------------- 12

def unlikelihood_goal(row, loops: str = "loop_share_tail", max_loops: float = 0.20, max_delta: float = 0.10) -> Claim:
    """Issue 70's goal for one fine-tuned target (a row of data/results/unlikelihood.csv): its
    greedy loop share (``loops``: the issue's tail lens, or "loop_share_lens") at most
    ``max_loops`` with its HumanEval-solution loss within ``max_delta`` nats of the shipped one's."""
    lens = "tail lens" if loops == "loop_share_tail" else "the lab's lens"
    return Claim(f"{row['arch']}: {row['run']} loops on <= {max_loops:.0%} of prompts ({lens}) within "
                 f"+{max_delta:.2f} nats of the shipped HumanEval-solution loss",
                 f"loop share <= {max_loops:.2f}, delta loss <= +{max_delta:.2f}",
                 f"loop share {fmt_vs(row[loops], max_loops)}, delta loss {row['delta_loss']:+.3f}",
                 bool(row[loops] <= max_loops and row["delta_loss"] <= max_delta))


def unlikelihood_deltas_consistent(table) -> Claim:
    """Every fine-tuned row's delta_loss is its solution loss minus its target's shipped row's
    (the table is one measurement, not numbers from two ways of computing the loss)."""
    shipped = table[table.candidates == "shipped"].set_index("arch").solution_loss
    tuned = table[table.candidates != "shipped"]
    gap = (tuned.delta_loss - (tuned.solution_loss - tuned.arch.map(shipped))).abs()
    worst = float(gap.max()) if len(tuned) else float("nan")
    return Claim("each fine-tune's delta loss is measured against its own shipped target's row",
                 "|delta - (loss - shipped loss)| <= 1e-9, a shipped row per arch",
                 f"{worst:.1e} over {len(tuned)} runs, shipped rows for {sorted(shipped.index)}",
                 bool(len(tuned) and set(tuned.arch) <= set(shipped.index) and worst <= 1e-9))
