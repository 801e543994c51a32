"""Every notebook self-check can fail: each ``claims`` function, fed a right result, holds,
and fed a wrong one (a mutant: the result a broken lab would give), fails; ``lab.check``
then raises. Also: ``fmt_vs`` never rounds a value across the bound it is compared with."""
import re
from pathlib import Path

import pandas as pd
import pytest

from ddtree_lab.app import claims, lab
from ddtree_lab.core.decode import Generation


def s(values: dict) -> pd.Series:
    return pd.Series(values, dtype=float)


ERRORS_OK = pd.DataFrame({"err_naive": [0.0, 1e-6, 0.5, 2.0], "err_fork": [1e-7, 0.0, 2e-6, 1e-6],
                          "first_branch_before": [False, False, True, True]})
GAPS = pd.DataFrame({"arch": ["gdn"], "group": ["rank1+"], "predicted": [0.4], "observed": [0.1]})
CONT = pd.DataFrame({"predicted": [0.5, 0.7], "observed": [0.6, 1.0]})
RULES_OK = pd.DataFrame({"rule": ["DDTree", "mine"], "passed": [True, True], "p_value": [0.4, 0.9],
                         "temperature": [0.8, 0.8], "samples": [480, 480]})

# id: (check, right arguments, wrong arguments); a check returning several claims is indexed
LEAK = pd.DataFrame({"family": ["gdn"] * 2 + ["kda"] * 2, "class": ["A", "A", "B", "B"],
                     "after_branch": [False, True, False, True], "max_dlogit": [3e-8, 2e-3, 1e-8, 0.4]})
FAM = pd.DataFrame({"family": ["gdn", "gdn", "kda", "kda"], "budget": [64, 64, 64, 64],
                    "mode": ["exact", "naive", "exact", "naive"], "matches_full_forward": [1.0, 0.5, 1.0, 0.0]})
UL = pd.DataFrame({"run": ["gdn-shipped", "gdn-a", "gdn-b"], "arch": ["gdn"] * 3,
                   "candidates": ["shipped", "ngram", "lens"], "loop_share_tail": [0.65, 0.18, 0.15],
                   "loop_share_lens": [0.87, 0.1, 0.3], "solution_loss": [2.70, 2.75, 2.85],
                   "delta_loss": [0.0, 0.05, 0.15]})
CASES = {
    "08-lossless": (claims.dflash2_lossless, (164, 164), (163, 164)),
    "08-lossless-empty": (claims.dflash2_lossless, (3, 3), (0, 0)),
    "08-gain": (claims.conditional_tree_gain, ("gdn", 2.6, 2.0), ("gdn", 2.2, 2.0)),
    "08-sibling": (claims.sibling_collapse_closed, ("gdn", 0.9, 1.0, 40), ("gdn", 0.6, 1.0, 40)),
    "08-sibling-no-nodes": (claims.sibling_collapse_closed, ("gdn", 0.9, 1.0, 40), ("gdn", 0.9, 1.0, 0)),
    "00-same-tokens": (claims.same_tokens, ([1, 2, 3], [1, 2, 3]), ([1, 2, 4], [1, 2, 3])),
    "00-fewer-calls": (claims.fewer_calls, (10, 64), (64, 64)),
    "00-equals-spec": (claims.equals_specification, (Generation([1, 2], [2], [4]), Generation([1, 2], [2], [4])),
                       (Generation([1, 2], [2], [4]), Generation([1, 2], [1, 1], [4, 4]))),
    "01-heap": (claims.heap_matches_brute_force, (0, 100), (1, 100)),
    "01-heap-no-cases": (claims.heap_matches_brute_force, (0, 100), (0, 0)),
    "01-rises": (claims.acceptance_rises, ([0.5, 0.9, 1.2, 1.3],), ([0.5, 0.9, 0.8, 1.3],)),
    "01-diminishing": (claims.diminishing_returns, ([0.5, 0.9, 1.2, 1.3],), ([0.5, 0.6, 1.2, 1.3],)),
    "01-deeper": (claims.deeper_when_confident, (s({0.25: 9, 1: 5, 4: 2}),), (s({0.25: 5, 1: 9, 4: 2}),)),
    "01-bushier": (claims.bushier_when_unsure, (s({0.25: 1, 1: 3, 4: 8}),), (s({0.25: 3, 1: 1, 4: 8}),)),
    "02-clean-exact": (lambda e: claims.leakage_per_node(e)[0], (ERRORS_OK,),
                       (ERRORS_OK.assign(err_naive=[0.1, 0.0, 0.5, 2.0]),)),
    "02-leaky-wrong": (lambda e: claims.leakage_per_node(e)[1], (ERRORS_OK,),
                       (ERRORS_OK.assign(err_naive=[0.0, 0.0, 1e-5, 1e-5]),)),
    "02-leaky-none": (lambda e: claims.leakage_per_node(e)[1], (ERRORS_OK,),
                      (ERRORS_OK.assign(first_branch_before=False),)),
    "02-fork-exact": (lambda e: claims.leakage_per_node(e)[2], (ERRORS_OK,), (ERRORS_OK.assign(err_fork=0.01),)),
    "02-leak-costs": (claims.leakage_costs_acceptance, (2.5, 4.8, 128), (4.8, 4.8, 128)),
    "02-naive-peaks": (claims.naive_peaks_early, (s({1: 1.8, 4: 2.3, 128: 2.0}),), (s({1: 1.8, 4: 2.3, 128: 2.6}),)),
    "02-crop-leaks": (claims.crop_leaks_gdn, (s({1: 0.2, 2: 0.5}),), (s({1: 0.0, 2: 0.5}),)),
    "02-crop-mla": (claims.crop_exact_mla, (1e-7,), (1e-3,)),
    "02-official-departs": (claims.reference_loop_departs, (3, 40), (0, 40)),
    "02-official-no-runs": (claims.reference_loop_departs, (3, 40), (0, 0)),
    "03-float64": (lambda m: claims.precision_exact(m)[0], (s({"float64 + harness": 1e-15, "float32": 1e-6}),),
                   (s({"float64 + harness": 1e-9, "float32": 1e-6}),)),
    "03-float32": (lambda m: claims.precision_exact(m)[1], (s({"float64 + harness": 1e-15, "float32": 1e-6}),),
                   (s({"float64 + harness": 1e-15, "float32": 1e-2}),)),
    "03-routing": (claims.routing_identical, (1.0,), (0.998,)),
    "03-near-ties": (claims.flips_at_near_ties, ([0.001], 1.0), ([0.3], 1.0)),
    "03-near-ties-no-flips": (claims.flips_at_near_ties, ([0.001], 1.0), ([], 1.0)),
    "04-fork-wy-exact": (lambda f: claims.modes_exact_in_float64(f)[0], (s({"fork": 1e-15, "wy": 2e-15, "naive": 0.3}),),
                         (s({"fork": 1e-15, "wy": 1e-8, "naive": 0.3}),)),
    "04-naive-not": (lambda f: claims.modes_exact_in_float64(f)[1], (s({"fork": 1e-15, "wy": 2e-15, "naive": 0.3}),),
                     (s({"fork": 1e-15, "wy": 2e-15, "naive": 1e-15}),)),
    "04-commit": (claims.commit_exact, (s({"fork": 0.0, "wy": 1e-16}),), (s({"fork": 0.0, "wy": 1e-3}),)),
    "04-fork-equals-wy": (claims.fork_equals_wy, (s({1: 2.0, 8: 3.0}), s({1: 2.0, 8: 3.0})),
                          (s({1: 2.0, 8: 3.1}), s({1: 2.0, 8: 3.0}))),
    "04-restores": (claims.exact_restores_acceptance, (s({1: 1.8, 128: 4.9}), s({1: 1.8, 4: 2.3, 128: 2.6})),
                    (s({1: 1.8, 128: 2.2}), s({1: 1.8, 4: 2.3, 128: 2.6}))),
    "04-rises-like-mla": (claims.rises_like_mla, (s({1: 1.8, 128: 4.9}), s({1: 1.5, 128: 3.0})),
                          (s({1: 1.8, 128: 4.9}), s({1: 1.5, 128: 1.4}))),
    "05-equals-ar": (claims.equals_ar, ("exact", [1.0, 1.0]), ("exact", [1.0, 0.5])),
    "05-keeps-rising": (claims.tau_keeps_rising, ("gdn", s({1: 2.0, 16: 3.5, 256: 4.0})),
                        ("gdn", s({1: 2.0, 16: 3.5, 256: 3.4}))),
    "05-keeps-rising-small": (claims.tau_keeps_rising, ("gdn", s({1: 2.0, 4: 2.5})), ("gdn", s({1: 2.0, 4: 1.9}))),
    "05-tree-beats-chain": (claims.tree_beats_chain, ("gain", 3.0, 2.5), ("gain", 2.5, 2.5)),
    "06-ranks-ordered": (claims.ranks_ordered, (0.74, 0.03), (0.03, 0.74)),
    "06-branches-overpredicted": (claims.branches_overpredicted, (GAPS,), (GAPS.assign(observed=0.3),)),
    "06-surrogate-within": (claims.surrogate_within, ({"gdn": 1.1, "mla": 0.9},), ({"gdn": 1.7, "mla": 0.9},)),
    "06-continuation": (claims.continuation_valid, (CONT,), (CONT.assign(observed=[0.6, 1.2]),)),
    "06-continuation-empty": (claims.continuation_valid, (CONT,), (CONT.iloc[:0],)),
    "06-after-sibling": (claims.after_sibling_gap, ("gdn", 0.9, 0.2, 30), ("gdn", 0.9, 0.8, 30)),
    "06-after-sibling-none": (claims.after_sibling_gap, ("gdn", 0.9, 0.2, 30), ("gdn", 0.9, 0.2, 0)),
    "07-batching-pays": (claims.batching_pays, ("gdn", s({1: 50, 16: 400})), ("gdn", s({1: 50, 16: 40}))),
    "07-budget-shrinks": (claims.best_budget_shrinks, ("gdn", s({1: 16, 16: 4})), ("gdn", s({1: 16, 16: 16}))),
    "07-budget-shrinks-ties": (claims.best_budget_shrinks, ("gdn", s({1: 16, 16: 4}), pd.Series({1: (8, 16), 16: (4,)}, dtype=object)),
                               ("gdn", s({1: 16, 16: 4}), pd.Series({1: (8, 16), 16: (4, 8)}, dtype=object))),  # a tie reaching 8: not outside the noise
    "07-auto-near-best": (claims.auto_near_best, ("gdn", s({1: 0.95, 16: 0.91})), ("gdn", s({1: 0.95, 16: 0.896}))),
    "09-rules-lossless": (claims.rules_lossless, (RULES_OK,), (RULES_OK.assign(passed=[True, False]),)),
    "09-rules-lossless-none": (claims.rules_lossless, (RULES_OK,), (RULES_OK.iloc[:0],)),
    "09-biased-caught": (claims.biased_walk_caught, (1e-9,), (0.2,)),
    "11-naive-exact-before": (claims.families_naive_exact_before_branch, (LEAK,),
                              (LEAK.assign(max_dlogit=[3e-8, 2e-3, 1e-5, 0.4]),)),
    "11-naive-leaks": (claims.families_naive_leaks, (LEAK,), (LEAK.assign(max_dlogit=[3e-8, 2e-3, 1e-8, 1e-7]),)),
    "11-exact-equals-ar": (claims.families_exact_equal_ar, (FAM,), (FAM.assign(matches_full_forward=[1.0, 0.5, 0.8, 0.0]),)),
    "11-naive-departs": (claims.families_naive_departs, (FAM,), (FAM.assign(matches_full_forward=[1.0, 1.0, 1.0, 1.0]),)),
    "12-goal": (claims.unlikelihood_goal, (UL.iloc[1],), (UL.iloc[2],)),
    "12-goal-lens": (lambda r: claims.unlikelihood_goal(r, "loop_share_lens"), (UL.iloc[1],),
                     (UL.assign(loop_share_lens=[0.87, 0.4, 0.3]).iloc[1],)),
    "12-deltas": (claims.unlikelihood_deltas_consistent, (UL,), (UL.assign(delta_loss=[0.0, 0.05, 0.2]),)),
}


@pytest.mark.parametrize("check,right,wrong", CASES.values(), ids=CASES.keys())
def test_every_check_holds_on_a_right_result_and_fails_on_a_wrong_one(check, right, wrong):
    good, bad = check(*right), check(*wrong)
    assert good.ok is True, good
    assert bad.ok is False, bad
    lab.check(good)
    with pytest.raises(AssertionError, match="claim failed"):
        lab.check(bad)


def test_every_claims_function_has_a_mutant_case():
    """A new check in ``claims`` must come with a case above (directly or through a lambda)."""
    import inspect
    public = {n for n, f in inspect.getmembers(claims, inspect.isfunction)
              if f.__module__ == claims.__name__ and not n.startswith("_") and n not in ("fmt_vs", "below", "above", "check", "compare",
                                                                                          "monotone")}
    covered = {c[0].__name__ for c in CASES.values()} | {"leakage_per_node", "precision_exact",
                                                         "modes_exact_in_float64", "as_goal",
                                                         "drafter_grid_goals", "goal_count", "compiled_loop_goal"}
    seed = re.search(r"^CASES = \{.*?^\}", (Path(__file__).parent / "test_seed_claims.py").read_text(), re.S | re.M)
    covered |= set(re.findall(r"claims\.(\w+)", seed.group(0)))  # notebook 10's cases (right, wrong) live there
    assert public <= covered, sorted(public - covered)


@pytest.mark.parametrize("value,bound,shown", [(0.896, 0.9, "0.896"), (0.95, 0.9, "0.95"), (0.9, 0.9, "0.90"),
                                               (0.8999, 0.9, "0.8999"), (1.004, 1.0, "1.004"), (1.7, 1.25, "1.70")])
def test_fmt_vs_keeps_a_value_on_its_side_of_the_bound(value, bound, shown):
    assert claims.fmt_vs(value, bound) == shown


def test_auto_near_best_shows_the_digits_that_decide_it():
    c = claims.auto_near_best("gdn", s({16: 0.896}))
    assert not c.ok and "0.896 (c=16)" in c.got and "0.90 (c" not in c.got


def test_check_unless_says_what_it_skipped(capsys):
    lab.check_unless("SMOKE: too few prompts", claims.tree_beats_chain("gain", 2.0, 2.5))  # would fail: skipped
    out = capsys.readouterr().out
    assert out.startswith("skipped:  gain") and "why:      SMOKE: too few prompts" in out and "match" not in out
    with pytest.raises(AssertionError):
        lab.check_unless(False, claims.tree_beats_chain("gain", 2.0, 2.5))


def test_reference_loop_departs_says_what_it_counts():
    c = claims.reference_loop_departs(29, 40)
    assert c.got == "29 of 40 prompt x block runs" and "of the prompt x block runs" in c.expected


def test_no_flips_is_said_and_never_a_vacuous_match(capsys):
    c = claims.flips_at_near_ties([], 0.56)
    assert not c.ok and "no flips" in c.got and "0.0000" not in c.got
    lab.check_unless("no bf16 argmax flips on this run", c)
    assert "match" not in capsys.readouterr().out


def test_a_goal_prints_goal_got_met_and_never_fails(capsys):
    record = claims.Record()
    missed = claims.auto_near_best("gdn", s({1: 0.95, 16: 0.70}))
    assert record.goal(missed) is False                      # a missed goal: reported, not raised
    assert record.goal(claims.auto_near_best("mla", s({1: 0.95}))) is True
    out = capsys.readouterr().out
    assert "goal: gdn: auto stays within 10%" in out and "met:    no" in out and "met:    yes" in out
    assert "match" not in out and "reproduced" not in out    # a goal is neither a check nor a published claim
    listed = record.goal_list()
    assert listed.startswith("The lab's goals in this notebook: 1 of 2 met")
    assert "[missed] gdn: auto" in listed and "0.70 (c=16)" in listed and "[met] mla" in listed
    assert claims.Record().goal_list() == "This notebook sets no goals of the lab's own."


def test_record_keeps_checks_published_claims_and_why_not(capsys):
    record = claims.Record()
    record.check(claims.fewer_calls(10, 64))
    with pytest.raises(AssertionError):                      # a check still fails loudly
        record.check(claims.fewer_calls(64, 64))
    assert len(record.checks) == 1
    assert record.compare(claims.naive_peaks_early(s({1: 1.8, 128: 2.6})), why="it rises to 128") is False
    assert record.compare(claims.naive_peaks_early(s({1: 1.8, 4: 2.3, 128: 2.0})), why="unused") is True
    out = capsys.readouterr().out
    assert "reproduced: False\n  why not:    it rises to 128" in out and "unused" not in out
    assert [why for _, why in record.published] == ["it rises to 128", None]


def test_a_statistical_check_on_a_smoke_run_is_printed_not_asserted(capsys):
    record = claims.Record()
    record.check(claims.leakage_costs_acceptance(3.4, 2.8, 64), few_prompts=True)   # does not raise
    assert record.checks == []                                                      # nor counts as held
    out = capsys.readouterr().out
    assert "asserted: no (SMOKE: too few prompts" in out and "does not hold" in out and "match" not in out
    record.check(claims.leakage_costs_acceptance(2.5, 4.8, 64), few_prompts=True)    # one that holds says so
    out = capsys.readouterr().out
    assert "here it holds" in out and "does not hold" not in out and record.checks == []
    with pytest.raises(AssertionError):                                             # the full run asserts it
        record.check(claims.leakage_costs_acceptance(3.4, 2.8, 64))


def test_drafter_grid_goals_are_met_by_a_better_drafter_and_missed_by_a_worse_one():
    previous = pd.Series({"arch": "gdn", "decode_dflash_tau": 2.8, "decode_dflash_tau_outside_loops": 2.7,
                          "tf_dflash_tau": 1.16, "tf_ddtree64_tau": 1.85})
    better = previous.copy()
    better[["decode_dflash_tau", "decode_dflash_tau_outside_loops", "tf_dflash_tau", "tf_ddtree64_tau"]] = [3.1, 2.9, 1.5, 2.6]
    worse = previous.copy()
    worse[["decode_dflash_tau", "decode_dflash_tau_outside_loops", "tf_dflash_tau", "tf_ddtree64_tau"]] = [2.4, 2.3, 1.3, 2.2]
    assert all(g.met for g in claims.drafter_grid_goals(better, previous, 1.42, 41))
    goals = claims.drafter_grid_goals(worse, previous, 1.42, 41)
    assert len(goals) == 5 and not any(g.met for g in goals)
    assert "41 HumanEval prompts" in goals[0].goal and goals[3].target == ">= 1.42"


# ----------------------------------------------------------------------------- issue 60: no verdict on a rounding

def test_a_goal_whose_interval_holds_its_target_is_not_told_apart(capsys):
    """08's GDN goal read 'met' at '0.83 / 0.97 = 0.8501' while its table printed 0.826 / 0.972
    = 0.8498: the rates now carry the digits that divide to the ratio shown, with its interval."""
    c = claims.sibling_collapse_closed("gdn", 57 / 69, 0.971751, 69, interval={"lo": 0.65, "hi": 1.01})
    assert c.got == "0.8261 / 0.9718 = 0.8501 [0.65, 1.01] (69 nodes)"
    assert round(0.8261 / 0.9718, 4) == 0.8501                     # the digits shown divide to the ratio shown
    assert not c.ok and not c.decided
    record = claims.Record()
    record.goal(c)
    assert "met:    not told apart (the 95% interval holds the target)" in capsys.readouterr().out
    assert "[not told apart] gdn" in record.goal_list() and "0 of 1 met, 1 not told apart" in record.goal_list()
    apart = claims.sibling_collapse_closed("mla", 0.6838, 0.9557, 117, interval={"lo": 0.60, "hi": 0.83})
    assert apart.decided and not apart.ok                        # the interval lies below 0.85: missed


def test_the_conditional_gain_goal_shows_four_digits_and_its_interval():
    """08: '1.15x: conditional trees win' (6 prompts) stood beside '1.141, below the 1.15x goal' (164)."""
    c = claims.as_goal(claims.conditional_tree_gain("gdn", 4.4850, 3.9298, interval={"lo": 1.11, "hi": 1.17}))
    assert c.got == "4.4850 / 3.9298 = 1.1413 [1.11, 1.17]" and c.verdict == "not told apart"
    assert claims.as_goal(claims.conditional_tree_gain("gdn", 4.7, 3.9, interval={"lo": 1.16, "hi": 1.25})).verdict == "met"
    assert claims.as_goal(claims.conditional_tree_gain("gdn", 4.2, 3.9, interval={"lo": 1.02, "hi": 1.12})).verdict == "missed"


def test_the_published_after_sibling_gap_at_its_own_bound_is_not_told_apart(capsys):
    """06: GDN was 'NOT reproduced' at 0.753 against the 0.75 bound."""
    c = claims.after_sibling_gap("gdn", 0.98128, 0.73913, 69, interval={"lo": 0.65, "hi": 0.86})
    assert not c.decided and not c.ok and "0.7532 [0.65, 0.86]" in c.got
    record = claims.Record()
    record.compare(c, why="the interval holds the bound")
    out = capsys.readouterr().out
    assert "reproduced: not told apart" in out and "reproduced: False" not in out
    from ddtree_lab.app.reading import conclusion
    text = conclusion(record)
    assert "not told apart here" in text and "NOT reproduced" not in text
    shown = claims.after_sibling_gap("mla", 0.9624, 0.5455, 110, interval={"lo": 0.50, "hi": 0.64})
    assert shown.ok and shown.decided


def test_the_after_sibling_numbers_are_attributed_to_the_engines_not_to_caddtree():
    """06: '22% vs 65-84%' was attached both to CaDDTree's claim and to the engines' measurement."""
    gaps = pd.DataFrame({"arch": ["gdn"], "predicted": [0.04], "observed": [0.02]})
    assert "22%" not in claims.branches_overpredicted(gaps).claim and "CaDDTree" in claims.branches_overpredicted(gaps).claim
    assert "22% vs 65-84%" in claims.after_sibling_gap("gdn", 0.9, 0.5, 40).claim
    assert "CaDDTree" not in claims.after_sibling_gap("gdn", 0.9, 0.5, 40).claim


def test_auto_near_best_with_intervals_is_met_missed_or_not_told_apart():
    """07: 0.903 (c=4) beside a 0.90 floor: the verdict reads the interval, not the rounding."""
    r, lo, hi = s({1: 0.921, 4: 0.903}), s({1: 0.91, 4: 0.83}), s({1: 0.95, 4: 1.01})
    c = claims.auto_near_best("gdn", r, lo=lo, hi=hi)
    assert not c.decided and not c.ok and "0.903 [0.83, 1.01] (c=4)" in c.got
    assert claims.auto_near_best("gdn", r, lo=lo.clip(lower=0.91), hi=hi).ok
    below = claims.auto_near_best("gdn", s({1: 0.92, 16: 0.853}), lo=s({1: 0.91, 16: 0.84}), hi=s({1: 0.95, 16: 0.86}))
    assert below.decided and not below.ok


def test_the_compiled_loop_goal_reads_its_slowest_loop_with_its_interval():
    """05: 'got 1.29x' against a 1.30x goal, interval [1.18, 1.36]: not told apart."""
    loops = pd.DataFrame({"method": ["ddtree", "ddtree", "dflash"], "budget": [16, 64, 1],
                          "compiled/eager": [1.37, 1.2906, 1.52], "compiled/eager_lo": [1.23, 1.18, 1.41],
                          "compiled/eager_hi": [1.52, 1.36, 1.81], "graph_breaks": [0, 0, 0]})
    g = claims.compiled_loop_goal("gdn", loops)
    assert g.verdict == "not told apart" and "1.291x [1.18, 1.36] at its slowest loop (ddtree 64)" in g.got
    assert claims.compiled_loop_goal("gdn", loops.assign(**{"compiled/eager_hi": [1.52, 1.29, 1.81]})).verdict == "missed"
    assert claims.compiled_loop_goal("gdn", loops.assign(graph_breaks=[0, 2, 0])).verdict == "missed"
