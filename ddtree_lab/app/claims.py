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
        met = {"met": "yes", "missed": "no", "not told apart": "not told apart (the 95% interval holds the target)"}
        return f"goal: {self.goal}\n  target: {self.target}\n  got:    {self.got}\n  met:    {met[self.verdict]}"


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
    print(f"{claim}\n  expected: {expected}\n  got:      {got}\n  match:    {bool(ok)}")
    if not ok:
        raise AssertionError(f"claim failed: {claim} (expected {expected}, got {got})")


def compare(claim, expected=None, got=None, reproduced=None) -> bool:
    """Print a PUBLISHED claim next to what this lab measured, without failing: the lab's
    answer may be that it does not reproduce here (the notebook then says so), or, for a
    ``Claim`` whose interval holds its threshold, that this run cannot tell."""
    decided = claim.decided if isinstance(claim, Claim) else True
    claim, expected, got, reproduced = _unpack(claim, expected, got, reproduced)
    shown = bool(reproduced) if decided else "not told apart (the 95% interval holds the threshold)"
    print(f"published: {claim}\n  expected:   {expected}\n  got:        {got}\n  reproduced: {shown}")
    return bool(reproduced)



class Record:
    """What one notebook checked, compared with publications and aimed at, in order.

    ``check`` = ``claims.check`` (raises on a failed check), ``compare`` = ``claims.compare`` plus,
    when the published claim does not reproduce, one rendered sentence on why; ``goal``
    prints goal / got / met and never raises. ``goal_list`` is the notebook's goals in one
    block; ``reading.conclusion`` reads the whole record."""

    def __init__(self) -> None:
        self.checks: list[Claim] = []
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
            return
        check(claim)
        self.checks.append(claim)

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
    return f"{met} of {len(goals)} met" + (f", {open_} not told apart (the interval holds the target)" if open_ else "")


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
    return f"{shown} [{lo:.2f}, {hi:.2f}]", not (lo <= bound <= hi)


def _series(values) -> str:
    """A short readable list, '1.00, 0.97, 0.95' (no brackets, no dict repr)."""
    return ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in values)


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
    return Claim("DDTree output equals AR token for token (T=0, exact verification)", "identical",
                 "identical" if same else "different", same)


def fewer_calls(spec_calls: int, ar_calls: int) -> Claim:
    """The speculative loop needs fewer target forwards than AR."""
    return Claim("DDTree needs fewer target calls than AR", f"< {ar_calls}", str(spec_calls), spec_calls < ar_calls)


def equals_specification(fast, spec) -> Claim:
    """The fast loop's ``Generation`` equals the one-page specification's
    (``reference_generate``): tokens, acceptance lengths and tree sizes."""
    fields = ("tokens", "acceptance_lengths", "tree_sizes")
    differ = [f for f in fields if list(getattr(fast, f)) != list(getattr(spec, f))]
    return Claim("generate equals the one-page specification (core/reference.py)", "identical " + ", ".join(fields),
                 "identical" if not differ else "different " + ", ".join(differ), not differ)


# ----------------------------------------------------------------------------- 01

def heap_matches_brute_force(mismatches: int, cases: int) -> Claim:
    """The heap builder equals brute force on every small case."""
    return Claim("heap builder == brute force (nodes and order)", f"0 mismatches in {cases}", str(mismatches),
                 cases > 0 and mismatches == 0)


def acceptance_rises(curve) -> Claim:
    """Expected acceptance is non-decreasing in the budget. curve: [B] values, budget 1..B."""
    gains = pd.Series(curve, dtype=float).diff().dropna()
    return Claim("expected acceptance rises with budget", "non-decreasing", f"min gain {gains.min():.2e}",
                 bool(len(gains) and gains.min() >= 0))


def diminishing_returns(curve, tol: float = 1e-12) -> Claim:
    """The gains never grow (nodes arrive in decreasing weight). curve: [B] values."""
    rise = pd.Series(curve, dtype=float).diff().diff().dropna()
    return Claim("with diminishing returns (nodes arrive in decreasing weight)", "non-increasing gains",
                 f"max increase of a gain {rise.max():.2e}", bool(len(rise) and rise.max() <= tol))


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
    return [below("nodes with only ancestors before them are exact under naive verify", clean.err_naive.max(), 1e-4),
            Claim("nodes after the first branch are wrong (leakage)", "median err > 1e-3",
                  f"{leaky.err_naive.median():.2e} over {len(leaky)} nodes",
                  bool(len(leaky) and leaky.err_naive.median() > 1e-3)),
            below("fork (per-node state) agrees with wy everywhere", errors.err_fork.max(), 1e-4)]


def leakage_costs_acceptance(naive_tau: float, exact_tau: float, budget: int) -> Claim:
    """Naive tau is below exact tau at the largest budget."""
    return Claim(f"leakage costs acceptance at the largest budget ({budget})", "naive tau < exact tau",
                 f"{naive_tau:.3f} vs {exact_tau:.3f}", bool(naive_tau < exact_tau))


def naive_peaks_early(naive_tau: pd.Series) -> Claim:
    """Published: naive tau peaks at a budget below the largest (index: budget)."""
    peak, big = int(naive_tau.idxmax()), int(naive_tau.index.max())
    return Claim("naive verification \"kills acceptance past a budget of ~15\" (TreeWY, arXiv 2608.20961): naive tau "
                 "peaks below the largest budget, then falls", f"peak < {big}",
                 f"peak at {peak} (tau {naive_tau[peak]:.2f})", peak < big)


def crop_leaks_gdn(min_error_per_k: pd.Series) -> Claim:
    """transformers' crop leaves rejected tokens in the GDN state at every k (min over prompts)."""
    return above("transformers' crop leaves the rejected tokens in the GDN state (every k)",
                 float(min_error_per_k.min()), 1e-3, "min over prompts and k")


def crop_exact_mla(max_error: float) -> Claim:
    """The same crop is exact on MLA."""
    return below("the same crop is exact on MLA (no recurrent state)", max_error, 1e-5)


def reference_loop_departs(departures: int, runs: int, unit: str = "prompt x block runs") -> Claim:
    """The reference loop departs from AR on at least one GDN run; ``runs``: how many runs the
    count is out of (e.g. prompts x block sizes), so the count says of what."""
    return Claim("the reference loop departs from AR on some prompt (GDN)", f">= 1 of the {unit}",
                 f"{departures} of {runs} {unit}", bool(runs > 0 and departures >= 1))


# ----------------------------------------------------------------------------- 03

def precision_exact(max_err: pd.Series) -> list[Claim]:
    """Tree vs path forward, per setting (index: setting name): float64 harness and float32."""
    return [below("float64 (harness): tree verification is exact to rounding", max_err["float64 + harness"], 1e-12),
            below("float32: exact to float32 rounding", max_err["float32"], 1e-4)]


def routing_identical(identical_share: float) -> Claim:
    """Expert routing is identical per token and layer (share of (node, layer) pairs)."""
    got = "1.0" if identical_share == 1.0 else f"{identical_share:.6f}"
    return Claim("expert routing identical per token and layer (float64)", "1.0", got, bool(identical_share == 1.0))


def flips_at_near_ties(flip_margins, median_margin: float, share: float = 0.05) -> Claim:
    """bf16 argmax flips only where the top-2 margin is < ``share`` of the median margin."""
    margins = list(flip_margins)
    if not margins:   # nothing to test: never a vacuous match (the notebook skips the check and says so)
        return Claim("bf16 argmax flips happen only at near-ties", f"flip margins < {share:.0%} of the median margin",
                     "no flips on this run: no margin to test", False)
    worst = max(margins)
    return Claim("bf16 argmax flips happen only at near-ties", f"flip margins < {share:.0%} of the median margin",
                 f"max margin of {len(margins)} flips {worst:.4f} vs median {median_margin:.3f}",
                 bool(worst < share * median_margin))


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
    return below("commit leaves the cache of a fresh prefill (float64)", float(commit_err.max()), 1e-12)


def fork_equals_wy(tau_fork: pd.Series, tau_wy: pd.Series) -> Claim:
    """fork and wy decode identically: same tau at every budget (index: budget)."""
    gap = float((tau_fork - tau_wy).abs().max())
    return Claim("fork and wy decode identically (both exact)", "same tau at every budget",
                 f"max |difference| {gap:.2e}", bool(gap < 1e-9))


def exact_restores_acceptance(tau_wy: pd.Series, tau_naive: pd.Series) -> Claim:
    """wy tau at the largest budget beats naive's best tau (index: budget)."""
    big = int(tau_wy.index.max())
    return Claim("exact verification restores acceptance: wy tau at the largest budget beats naive's best tau",
                 f"wy tau at {big} > naive's highest tau (any budget)",
                 f"{tau_wy[big]:.3f} vs {tau_naive.max():.3f}", bool(tau_wy[big] > tau_naive.max()))


def rises_like_mla(tau_gdn: pd.Series, tau_mla: pd.Series) -> Claim:
    """GDN (exact) and MLA tau both higher at the largest budget than at the smallest."""
    lo, hi = int(tau_gdn.index.min()), int(tau_gdn.index.max())
    ok = tau_gdn[hi] > tau_gdn[lo] and tau_mla[hi] > tau_mla[lo]
    return Claim("GDN exact tau rises with budget like MLA's", f"tau({hi}) > tau({lo}) for both",
                 f"gdn {tau_gdn[lo]:.2f}->{tau_gdn[hi]:.2f}, mla {tau_mla[lo]:.2f}->{tau_mla[hi]:.2f}", bool(ok))


# ----------------------------------------------------------------------------- 05

def tau_keeps_rising(arch: str, tau: pd.Series) -> Claim:
    """tau at the largest budget >= tau at 16 (or, when 16 is not below it, at the smallest
    budget: never the largest against itself) (index: budget)."""
    big = int(tau.index.max())
    ref = 16 if 16 in tau.index and 16 < big else int(tau.index.min())
    return Claim(f"{arch}: acceptance keeps rising up to the largest budgets", f"tau({big}) >= tau({ref})",
                 f"{tau[big]:.3f} vs {tau[ref]:.3f}", bool(ref < big and tau[big] >= tau[ref]))


def tree_beats_chain(claim: str, tree_tau: float, chain_tau: float, note: str = "") -> Claim:
    """DDTree tau / DFlash tau > 1 (outside loops, on real text, ...)."""
    ratio = tree_tau / chain_tau if chain_tau else math.inf
    return Claim(claim, "DDTree / DFlash tau > 1", f"{fmt_vs(ratio, 1.0)}{note}", bool(tree_tau > chain_tau))


# ----------------------------------------------------------------------------- 06

def ranks_ordered(rank0_observed: float, branch_observed: float) -> Claim:
    """The target accepts the drafter's rank-0 token more often than its rank-1+ branches."""
    return Claim("the drafter's rank 0 is accepted more often than its rank 1+ branches (observed)",
                 "rank 0 rate > rank 1+ rate", f"{rank0_observed:.3f} vs {branch_observed:.3f}",
                 bool(rank0_observed > branch_observed))


def branches_overpredicted(branch: pd.DataFrame) -> Claim:
    """Published: rank-1+ observed < 0.5 x predicted (rows: arch, predicted, observed)."""
    got = "; ".join(f"{r.arch}: predicted {r.predicted:.3f}, observed {r.observed:.3f}" for r in branch.itertuples())
    return Claim("rank-1+ branches are accepted far below the surrogate's prediction (the sibling-conditioning "
                 "gap, CaDDTree, arXiv 2606.01813)",
                 "observed < 0.5 x predicted for rank 1+", got,
                 bool(len(branch) and (branch.observed.values < 0.5 * branch.predicted.values).all()))


def surrogate_within(ratios: dict, tol: float = 0.25) -> Claim:
    """Observed / surrogate accepted tokens per round within 1 +- ``tol`` for every arch."""
    got = ", ".join(f"{a} {fmt_vs(r, 1 + tol if r > 1 else 1 - tol)}" for a, r in ratios.items())
    ok = all(1 - tol <= r <= 1 + tol for r in ratios.values())
    return Claim(f"the surrogate predicts accepted tokens per round within {tol:.0%}",
                 f"observed / surrogate in [{1 - tol:.2f}, {1 + tol:.2f}]", got, bool(ratios) and ok)


def continuation_valid(cont: pd.DataFrame) -> Claim:
    """The continuation table is non-empty and every rate a probability."""
    rates = cont[["predicted", "observed"]].stack()
    ok = len(cont) > 0 and bool(rates.between(0, 1).all())
    return Claim("the continuation table (outside loops) is non-empty, every rate a probability",
                 "rows > 0, in [0, 1]", f"{len(cont)} rows, rates in [{rates.min():.3g}, {rates.max():.3g}]"
                 if len(cont) else "0 rows", ok)


def after_sibling_gap(arch: str, main: float, sibling: float, n_sibling: int, interval: dict | None = None,
                      bound: float = 0.75) -> Claim:
    """Published (serving engines, a 27B target): after a rank >= 1 sibling the next depth is
    accepted < ``bound`` x the main path. interval: the 95% interval of sibling / main
    (``verdicts.pooled_ratio``); when it holds ``bound`` the claim is not told apart here."""
    ratio = sibling / main if main else math.nan
    shown, decided = _interval(ratio, interval, bound)
    return Claim(f"{arch}: after a rank >= 1 sibling the next depth is accepted far less often than on the main "
                 "path (a published 27B measurement: 22% vs 65-84%)",
                 f"after-sibling / main-path rate < {bound}, outside loops",
                 f"{sibling:.4f} / {main:.4f} = {shown} ({n_sibling:.0f} nodes after a sibling)",
                 bool(n_sibling > 0 and decided and ratio < bound), decided=bool(n_sibling > 0 and decided) or n_sibling == 0)


# ----------------------------------------------------------------------------- 07

def batching_pays(arch: str, ar_tokens_per_s: pd.Series) -> Claim:
    """Batched AR tokens/s higher at the largest concurrency than at the smallest (index: concurrency)."""
    lo, hi = ar_tokens_per_s.index.min(), ar_tokens_per_s.index.max()
    return Claim(f"{arch}: batching pays for AR", f"batched AR tokens/s at concurrency {hi} > at {lo}",
                 f"{ar_tokens_per_s[hi]:.1f} vs {ar_tokens_per_s[lo]:.1f}",
                 bool(hi > lo and ar_tokens_per_s[hi] > ar_tokens_per_s[lo]))


def best_budget_shrinks(arch: str, best_budget: pd.Series, tied: pd.Series | None = None) -> Claim:
    """Published (vLLM PR 42910; CAST): the best budget at the largest concurrency < at the
    smallest (index: concurrency). tied: per concurrency the budgets not told apart from the
    best (``concurrency_table.tied_budgets``); then it shrinks only when every budget tied at
    the largest concurrency is below every one tied at the smallest (outside the noise)."""
    lo, hi = best_budget.index.min(), best_budget.index.max()
    ties = tied if tied is not None else best_budget.map(lambda b: (int(b),))
    label = lambda c, b: f"{int(b)} (c={c})" if len(ties[c]) == 1 else f"{int(b)}, tied {'/'.join(map(str, ties[c]))} (c={c})"  # noqa: E731
    path = " -> ".join(label(c, b) for c, b in best_budget.items())
    return Claim(f"{arch}: the best tree budget shrinks as the batch grows (vLLM PR 42910, CAST)",
                 f"best budget at {hi} < at {lo}" + (", outside the noise" if tied is not None else ""), path,
                 bool(max(ties[hi]) < min(ties[lo])))


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
    return Claim(f"{arch}: auto stays within {1 - floor:.0%} of the best fixed budget at every concurrency",
                 f"auto tokens/s / best fixed >= {floor:.2f} everywhere", ratios, ok, decided)


# ----------------------------------------------------------------------------- 08

def dflash2_lossless(equal: int, total: int) -> Claim:
    """DFlash 2 decoding (linear and conditional trees) equals AR at T = 0 on every prompt row."""
    return Claim("DFlash 2 (linear and DDTree-64 conditional) equals AR at T = 0 on every prompt",
                 "all equal", f"{equal} / {total} equal", bool(total > 0 and equal == total))


def conditional_tree_gain(arch: str, conditional: float, marginal: float, goal: float = 1.15,
                          interval: dict | None = None) -> Claim:
    """Issue 20's goal: DDTree-64 tau outside loops over DFlash 2 conditional >= ``goal`` x over
    DFlash marginals (T = 0). interval: the ratio's 95% interval over prompts
    (``verdicts.pooled_ratio``): when it holds the goal, the goal is not told apart."""
    ratio = conditional / marginal if marginal else float("nan")
    shown, decided = _interval(ratio, interval, goal)
    return Claim(f"{arch}: DDTree-64 tau over DFlash 2 conditional >= {goal}x over DFlash marginals, outside loops, T = 0",
                 f">= {goal}", f"{conditional:.4f} / {marginal:.4f} = {shown}", bool(decided and ratio >= goal), decided)


def sibling_collapse_closed(arch: str, after_sibling: float, main_path: float, nodes: int, goal: float = 0.85,
                            interval: dict | None = None) -> Claim:
    """Issue 20's goal: right after a rank >= 1 sibling the next depth is accepted >= ``goal`` x as
    often as on the main path (conditional trees, outside loops); the two rates with the digits
    that divide to the ratio shown, and the ratio's 95% interval (``interval``) when given."""
    ratio = after_sibling / main_path if main_path else float("nan")
    shown, decided = _interval(ratio, interval, goal)
    return Claim(f"{arch}: right after a rank >= 1 sibling, conditional trees go on >= {goal}x as often as on the "
                 "main path", f">= {goal}", f"{after_sibling:.4f} / {main_path:.4f} = {shown} ({nodes} nodes)",
                 bool(nodes > 0 and decided and ratio >= goal), decided or nodes == 0)


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
    return Goal(f"{arch}: the lab's compiled loop >= {goal:.1f}x its eager loop, 0 graph breaks", f">= {goal:.2f}x, 0 breaks",
                f"{shown.replace(' [', 'x [', 1) if ' [' in shown else shown + 'x'} at its slowest loop "
                f"({worst.method} {worst.budget}), {breaks} breaks",
                met, decided or breaks > 0)


def drafter_grid_goals(pick: pd.Series, previous: pd.Series, tf_floor: float, prompts: int) -> list[Goal]:
    """Issue 27's goals for the drafter a grid picks (``drafter_grid.ship_rule`` row) of one
    target, against the previous release's drafter on the same lenses (``prompts``: HumanEval
    prompts decoded)."""
    arch, scope = pick["arch"], f"{prompts} HumanEval prompts, block 8"
    pairs = [("free-running DFlash tau, all rounds", "decode_dflash_tau"),
             ("free-running DFlash tau, outside loops", "decode_dflash_tau_outside_loops")]
    goals = [Goal(f"{arch}: {what} >= the previous drafter's ({scope})", f">= {previous[col]:.2f}",
                  f"{pick[col]:.2f}", bool(pick[col] >= previous[col])) for what, col in pairs]
    goals.append(Goal(f"{arch}: free-running DFlash tau >= 3.0 ({scope})", ">= 3.0", f"{pick['decode_dflash_tau']:.2f}",
                      bool(pick["decode_dflash_tau"] >= 3.0)))
    goals.append(Goal(f"{arch}: teacher-forced DFlash tau on real code >= the drafter shipped before the grid", f">= {tf_floor:.2f}",
                      f"{pick['tf_dflash_tau']:.2f}", bool(pick["tf_dflash_tau"] >= tf_floor)))
    goals.append(Goal(f"{arch}: teacher-forced DDTree-64 tau on real code >= 2.5", ">= 2.5",
                      f"{pick['tf_ddtree64_tau']:.2f}", bool(pick["tf_ddtree64_tau"] >= 2.5)))
    return goals



# ----------------------------------------------------------------------------- 09

def rules_lossless(table: pd.DataFrame) -> Claim:
    """Every rule passes ``check_lossless`` at T > 0. table: ``your_tree.lossless_table`` rows
    (rule, passed, p_value, temperature, samples)."""
    got = ", ".join(f"{r.rule} p = {r.p_value:.2g}" for r in table.itertuples())
    t = float(table.temperature.iloc[0]) if len(table) else math.nan
    return Claim(f"every rule, DDTree's and one's own, is lossless at T = {t:g} (check_lossless, "
                 f"{int(table.samples.max()) if len(table) else 0} runs each)", "passed: family p >= 0.001 for every rule",
                 got or "no rule checked", bool(len(table)) and bool(table.passed.all()))


def biased_walk_caught(p_value: float, epsilon: float = 1.0) -> Claim:
    """``check_lossless`` fails the deliberately biased walk (``lossless.biased_walk``)."""
    return Claim(f"check_lossless fails a walk biased on purpose (epsilon = {epsilon:g})", "p < 0.001",
                 f"p = {p_value:.2g}", bool(p_value < 1e-3))


# ----------------------------------------------------------------------------- notebook 10 (issue 61)

def independent_union_exact(union: pd.DataFrame, n: int, k: int) -> Claim:
    """The stored independent-routing rows equal n (1 - (1 - k/n)^(budget + 1)) (``expert_union.csv``)."""
    rows = union[union.kind == "independent"]
    want = n * (1 - (1 - k / n) ** (rows.budget + 1))
    err = float((rows.experts - want).abs().max()) if len(rows) else math.inf
    return Claim(f"independent-routing rows = n (1 - (1 - k/n)^(budget + 1)), n = {n}, k = {k}",
                 "max |stored - formula| < 1e-3", f"{err:.1e} over {len(rows)} rows", bool(len(rows) and err < 1e-3))


def union_grows_with_the_tree(union: pd.DataFrame) -> Claim:
    """Published (MoE-Spec, arXiv 2602.16052; EVICT, arXiv 2605.00342): a larger draft tree
    activates more distinct experts. The tree's mean union per layer by budget never falls and
    ends above one token's k."""
    tree = union[union.kind == "tree"].groupby("budget")["experts"].mean()
    token = float(union[union.kind == "token"].experts.mean())
    ok = bool(len(tree) > 1 and (tree.diff().dropna() >= 0).all() and tree.iloc[-1] > token)
    return Claim("a larger draft tree loads more distinct experts per MoE layer (MoE-Spec, EVICT)",
                 f"non-decreasing in the budget and above one token's {token:g}",
                 f"{tree.iloc[0]:.2f} at budget {tree.index[0]} -> {tree.iloc[-1]:.2f} at {tree.index[-1]}", ok)


def expert_auto_lossless(table: pd.DataFrame) -> Claim:
    """Every config of the expert-auto run (both ``auto`` variants included) equals AR at T = 0."""
    worst = float(table.matches_ar.min()) if len(table) else 0.0
    return Claim("expert-aware and node-count auto equal AR token for token (T = 0)", "every prompt: 1.0",
                 f"min share of prompts equal to AR {worst:.3f} over {len(table)} configs", bool(len(table) and worst == 1.0))


def one_calibration_per_stack(published: pd.DataFrame) -> Claim:
    """Each fitted stack has exactly one calibration point; every other published point is predicted."""
    counts = published.groupby("stack")["calibration"].sum()
    predicted = int((~published.calibration.astype(bool)).sum())
    return Claim("one calibration per software stack, every other published point a prediction",
                 "exactly 1 fitted point per stack", ", ".join(f"{s}: {int(c)}" for s, c in counts.items())
                 + f"; {predicted} predicted", bool(len(counts) and (counts == 1).all() and predicted >= 1))


def projection_reaches(table: pd.DataFrame, model: str, accelerator: str, budget: int = 512) -> Claim:
    """The projection holds ``model`` on ``accelerator`` to ``budget`` under every stack and routing bound."""
    rows = table[(table.model == model) & (table.accelerator == accelerator) & (table.method == "ddtree")]
    top = rows.groupby(["stack", "routing"])["budget"].max()
    return Claim(f"{model} on {accelerator}: projected to budget {budget} under every stack and routing bound",
                 f"every curve ends at {budget}", _series([f"{s}/{r}: {int(b)}" for (s, r), b in top.items()]),
                 bool(len(top) >= 2 and (top >= budget).all()))


def predictions_within(published: pd.DataFrame, tol: float = 0.25, least: int = 3) -> Goal:
    """Issue 61's goal: at least ``least`` published points predicted, each within ``tol``."""
    pred = published[~published.calibration.astype(bool)]
    worst = float(pred.error.abs().max()) if len(pred) else math.inf
    return Goal(f"every predicted published point within {tol:.0%} of its published speedup, >= {least} predicted",
                f"max |error| <= {tol:.2f}, >= {least} points", f"max |error| {fmt_vs(worst, tol)} over {len(pred)} points",
                bool(len(pred) >= least and worst <= tol))


def expert_auto_projected(policies: pd.DataFrame, where: str, floor: float = 0.97) -> Goal:
    """Issue 61's goal, projected: expert-aware auto >= ``floor`` x the best fixed budget and >= every
    node-count auto (``gpu_projection.auto_projection`` rows)."""
    rate = policies.set_index("policy")["vs_best_fixed"]
    mine = float(rate["expert-aware auto"])
    nodes = float(max(v for k, v in rate.items() if k.startswith("node-count")))
    return Goal(f"{where}: expert-aware auto >= {floor} x the best fixed budget and >= node-count auto (projected)",
                f">= {floor} and >= {nodes:.3f} (the better node-count auto)", f"{fmt_vs(mine, floor, 3)} x the best fixed",
                bool(mine >= floor and mine >= nodes))


def expert_auto_measured(table: pd.DataFrame) -> Goal:
    """Issue 61's goal on this CPU: expert-aware auto's tokens/s no worse than node-count auto's
    (one interleaved run) and lossless."""
    auto = table[table.budget.astype(str) == "auto"].set_index("cost")
    mine, nodes = float(auto.loc["experts", "tokens_per_s"]), float(auto.loc["nodes", "tokens_per_s"])
    return Goal("MLA target, this CPU: expert-aware auto tokens/s >= node-count auto's, lossless",
                f">= {nodes:.1f} tokens/s, equal to AR", f"{fmt_vs(mine, nodes, 1)} tokens/s, "
                f"equal to AR on {float(auto.loc['experts', 'matches_ar']):.0%} of prompts",
                bool(mine >= nodes and auto.loc["experts", "matches_ar"] == 1.0))


def seed_budget(stop: pd.DataFrame, where: str, low: int = 64) -> Claim:
    """The seed's hypothesis: on Kimi K2.6, budgets of 64-128+ keep paying. Reproduced when the
    best projected budget is at least ``low`` under every routing bound (``gpu_projection.stop_paying``)."""
    best = stop.set_index("routing")["best_budget"]
    return Claim(f"{where}: trees keep paying to budgets of 64-128+ (the seed)", f"best budget >= {low} under every bound",
                 ", ".join(f"{r}: best {int(b)}" for r, b in best.items()), bool(len(best) and (best >= low).all()))


def projection_rebuilt(stored: pd.DataFrame, rebuilt: pd.DataFrame) -> Claim:
    """The stored projection table (6 significant digits) equals the one rebuilt from the stores."""
    same = len(stored) == len(rebuilt)
    rel = float(((stored.predicted_speedup - rebuilt.predicted_speedup) / rebuilt.predicted_speedup).abs().max()) \
        if same else math.inf
    return Claim("the stored projection is rebuilt from the stores", "same rows, relative difference < 1e-5 "
                 "(the table's 6 significant digits)", f"{len(rebuilt)} rows, {rel:.1e}", bool(same and rel < 1e-5))


# ----------------------------------------------------------------------------- 11

def families_naive_exact_before_branch(leak, departs=("JambaForCausalLM",)) -> Claim:
    """The naive verify (one stock forward of the flattened tree) equals each node's own path
    before the first branch, in every class but ``departs`` (whose stock forward of several tokens
    on a cache departs from its own decode: Jamba's scan starts from a zero state)."""
    rows = leak[~leak.after_branch & ~leak["class"].isin(departs)]
    worst = float(rows.max_dlogit.max()) if len(rows) else float("nan")
    return Claim("the naive verify is exact before the first branch, every family",
                 "max |dlogit| <= 1e-6 on every class", f"{worst:.1e} over {rows['class'].nunique()} classes",
                 len(rows) > 0 and worst <= 1e-6)


def families_naive_leaks(leak) -> Claim:
    """After the first branch the naive verify departs from the node's own path, in every class."""
    per = leak[leak.after_branch].groupby("class").max_dlogit.max()
    got = f"smallest {per.min():.1e} ({per.idxmin()}), {len(per)} classes" if len(per) else "no branched node"
    return Claim("the naive verify leaks after the first branch, in every hybrid class",
                 "max |dlogit| > 1e-4 in every class", got, len(per) > 0 and bool((per > 1e-4).all()))


def families_exact_equal_ar(table) -> Claim:
    """Exact tree verification's greedy output equals greedy decoding by the stock full forward
    on every prompt, family and budget (``matches_full_forward``: the truth where a stock decode
    step departs from the model's own prefill, as Nemotron-H's does)."""
    exact = table[table["mode"] == "exact"]
    low = float(exact.matches_full_forward.min()) if len(exact) else float("nan")
    return Claim("exact tree verification equals greedy decoding by the full forward, every family and budget",
                 "share of prompts equal: 1.00", f"min {low:.2f} over {len(exact)} (family, budget) rows",
                 len(exact) > 0 and low == 1.0)


def families_naive_departs(table) -> Claim:
    """The leak is not only in the logits: the naive verify's output departs from AR on some
    prompt of every family at the largest budget."""
    top = table[(table["mode"] == "naive") & (table.budget == table.budget.max())]
    worst = top.set_index("family").matches_full_forward
    return Claim("the naive verify's output departs from greedy decoding in every family (largest budget)",
                 "share of prompts equal < 1 in every family",
                 ", ".join(f"{f} {v:.2f}" for f, v in worst.items()) or "no row",
                 len(worst) > 0 and bool((worst < 1).all()))
