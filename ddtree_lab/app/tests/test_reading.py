"""The "Reading" of a notebook agrees with its output: its numbers are rendered from the
measured tables (``app.reading``), and no committed "Reading" markdown states a number of
its own."""
import re

import nbformat
import pandas as pd
import pytest

from ddtree_lab.app.notebooks import notebook_paths
from ddtree_lab.app import claims
from ddtree_lab.app.reading import (best_budget_why, bf16_reading, branches_why, calibration_reading, conclusion,
                                    concurrency_reading, dflash2_winners, ece_reading, entropy_note,
                                    exact_nodes_reading, loop_reading, naive_above_exact, naive_peak_why,
                                    sampled_reading, sibling_gap_why, sweep_reading, table_text, winners)
from ddtree_lab.experiments.plumbing.verdicts import prompt_sums

GAPS = pd.DataFrame({"arch": ["gdn", "gdn"], "group": ["rank0", "rank1+"], "predicted": [0.528, 0.038],
                     "observed": [0.742, 0.028], "count": [1092, 7178]})


def test_calibration_reading_states_the_measured_numbers():
    text = calibration_reading(GAPS, {"gdn": 1.696})
    assert "rank 0 predicted 0.53, accepted 0.74" in text and "rank 1+ predicted 0.038, accepted 0.028" in text
    assert "does not show" in text
    assert "1.70 x" in text and "outside 25%" in text and "underestimates" in text
    assert "within 25%" in calibration_reading(GAPS, {"gdn": 1.1})
    shows = GAPS.assign(observed=[0.742, 0.01])
    assert "so the published gap shows)" in calibration_reading(shows, {"gdn": 1.0})
    assert "neither under- nor overestimates" in calibration_reading(GAPS, {"gdn": 1.001})


def test_bf16_reading_never_says_bit_identical_when_an_error_was_measured():
    rates = pd.Series({"tree_eq_chain": 1.0, "tree_eq_ar": 0.97, "chain_eq_ar": 0.97})
    table = pd.DataFrame({"max_err": [6.25e-2], "flips": [1], "nodes": [36]}, index=["bfloat16"])
    text = bf16_reading(table, rates)
    assert "bit-identical" not in text and "6.25e-02" in text and "1 of 36 nodes" in text and "97%" in text
    assert "bit-identical" in bf16_reading(table.assign(max_err=0.0, flips=0), rates)


READINGS = [(p, c.source) for p in notebook_paths() for c in nbformat.read(p, as_version=4).cells
            if c.cell_type == "markdown" and c.source.startswith("**Reading.**")]
MEASURED = re.compile(r"\b\d+\.\d+|\b\d+(\.\d+)?\s*%|\babout \d")   # 0.8, 5%, "about 5"


@pytest.mark.parametrize("path,source", READINGS, ids=[p.stem for p, _ in READINGS])
def test_reading_markdown_states_no_number_of_its_own(path, source):
    """A measured number belongs in the output (rendered from the data), not in markdown,
    where the next run can contradict it."""
    assert not MEASURED.search(source), f"{path.name}: {MEASURED.search(source).group(0)!r} in the Reading"


def test_notebook_03_no_longer_claims_bf16_bit_identical():
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[3], as_version=4).cells)
    assert "bit-identical" not in source and "bf16_reading(" in source


def s(values: dict) -> pd.Series:
    return pd.Series(values, dtype=float)


def test_table_text_names_every_missing_cell():
    grid = pd.DataFrame({"DFlash": [2.1, 3.0], "DFlash 2 unary": [float("nan"), 3.2]}, index=["linear", 64])
    text = table_text(grid, "no linear form")
    assert "NaN" not in text and "nan" not in text and " -" in text and text.endswith("-: no linear form")
    assert "-:" not in table_text(grid.fillna(1.0), "no linear form")


def test_conclusion_names_what_reproduced_what_did_not_and_why(capsys):
    record = claims.Record()
    record.check(claims.fewer_calls(10, 64))
    record.compare(claims.naive_peaks_early(s({1: 1.8, 128: 2.6})), why="the main path carries the tokens")
    record.compare(claims.crop_exact_mla(1e-7))
    record.goal(claims.auto_near_best("gdn", s({16: 0.70})))
    capsys.readouterr()
    text = conclusion(record, ["tau 3.19 over all rounds"])
    lines = text.splitlines()
    assert lines[0] == "What this notebook showed:" and 4 <= len(lines) <= 7
    assert "- tau 3.19 over all rounds" in lines
    assert "1 check held" in text and "NOT reproduced" in text and "because the main path carries" in text
    assert "reproduced here: the same crop is exact on MLA" in text
    assert "0 of 1 met; missed: gdn: auto" in text and "0.70" in text
    empty = conclusion(claims.Record())
    assert "nothing was checked" in empty


def test_loop_reading_says_when_the_generation_loops_and_gives_tau_outside():
    prompt = list(range(100, 160))
    clean = list(range(200, 264))
    text = loop_reading(prompt, clean, [4] * 16)
    assert text.startswith("No repetition loop") and "0% of its rounds accepted a block" in text
    assert "tau over the 16 clean rounds (neither looping nor copyable) is 4.00" in text
    loop = list(range(200, 216)) + [7, 8, 9] * 40                         # falls into a period-3 loop
    lengths = [4] * 4 + [8] * 15              # rounds start at 0, 4, 8, 12, 16, 24, ...: the loop counts at 24
    text = loop_reading(prompt, loop, lengths)
    assert "repetition loop (period 3 tokens" in text and "inflated" in text and "74% of 19 rounds" in text
    assert "tau outside the loop is 4.80 over 5 rounds" in text and "No repetition" not in text
    assert "68% of its rounds accepted a block that occurs earlier" in text   # every round from 32 on copies
    copying = list(range(100, 110)) + list(range(200, 254))  # repeats the prompt's first ten tokens, then new text
    text = loop_reading(prompt, copying, [5, 5] + [6] * 9)   # round 1 copies (its lead 102-104 is the prompt's too)
    assert text.startswith("No repetition loop") and "9% of its rounds accepted a block" in text
    assert "tau over the 10 clean rounds" in text


def test_naive_peak_why_follows_the_curve():
    rising = naive_peak_why(s({1: 1.8, 16: 2.3, 128: 2.56}), s({1: 1.8, 16: 2.6, 128: 3.4}))
    assert "highest at the largest budget swept (128: 2.56" in rising and "25% below exact" in rising
    peaked = naive_peak_why(s({1: 1.8, 16: 2.6, 128: 2.0}), s({1: 1.8, 16: 2.7, 128: 3.4}))
    assert peaked.startswith("naive tau peaks at budget 16 (2.60) and falls to 2.00")


def test_exact_nodes_reading_never_says_fewer_when_the_count_holds():
    same = exact_nodes_reading(s({16: 1.75, 64: 1.75}))
    assert "16: 1.75, 64: 1.75" in same and "the same at every budget" in same and "fewer as" not in same
    assert "fewer as the budget grows" in exact_nodes_reading(s({16: 3.0, 64: 1.5}))
    assert "not fewer" in exact_nodes_reading(s({16: 1.5, 32: 1.0, 64: 2.0}))


def test_sibling_and_branch_reasons_render_the_numbers():
    assert "too few to decide" in sibling_gap_why("gdn", 0.8, 0.7, 5)
    text = sibling_gap_why("gdn", 0.80, 0.62, 120)
    assert "0.6200 vs 0.8000" in text and "0.7750x" in text and "120 nodes" in text and "above the published" in text
    assert "predicted 0.038, accepted 0.028 (0.74x the prediction" in branches_why(
        pd.DataFrame({"arch": ["gdn"], "predicted": [0.038], "observed": [0.028]}))


T0 = pd.DataFrame({"best_budget": [16, 16, 4, 8, 16], "best_speedup": [1.35, 1.4, 1.3, 1.4, 1.48],
                   "dflash_speedup": [1.0, 1.0, 1.0, 1.0, 1.0], "auto_vs_best": [0.96, 0.9, 0.8, 0.75, 0.70]},
                  index=pd.Index([1, 2, 4, 8, 16], name="concurrency"))


def test_concurrency_reading_says_which_way_each_went():
    text = concurrency_reading("gdn", T0)
    assert "best budget goes 16, 16, 4, 8, 16 (ends where it started" in text
    assert "1.35x -> 1.48x from c=1 to c=16, no interval, so no change in the gap is told apart" in text
    assert "0.70-0.96" in text
    falls = concurrency_reading("gdn", T0.assign(best_budget=[16, 8, 8, 4, 4], best_speedup=[1.5, 1.4, 1.3, 1.2, 1.1]))
    assert "(falls from c=1 to c=16)" in falls and "narrows" not in falls   # no interval: no narrowing told apart
    assert "16 (c=1), 16 (c=2), 4 (c=4), 8 (c=8), 16 (c=16)" in best_budget_why("gdn", T0)


def test_why_the_best_budget_did_not_shrink_is_read_from_the_ties_and_the_speedup():
    """The reason names what the claim's rule saw (the budgets tied best at both ends, or the
    largest load's best not below the smallest's) and the best tree's speedup at the largest
    load as measured: never 'paid for itself' where it ran below batched AR."""
    ties = T0.assign(best_budget=[8, 16, 4, 8, 4], best_speedup=[2.3, 1.5, 1.4, 0.92, 0.85],
                     tied_budgets=[(4, 8, 16), (16,), (4,), (8,), (4, 8)])
    text = best_budget_why("gdn", ties)
    assert "budgets 4, 8 are among the best at both c=1 and c=16" in text
    assert text.endswith("at c=16 the best tree runs at 0.85x batched AR")
    apart = best_budget_why("gdn", T0.assign(best_budget=[16, 16, 4, 8, 32]))
    assert "the best at c=16 (32) is not below every best at c=1 (16)" in apart and "1.48x" in apart


# ----------------------------------------------------------------------------- issue 60: conclusions that say what the numbers say

def test_two_readings_agree_on_the_tie_or_the_winner():
    """A difference inside its interval is a tie, whichever side its point estimate falls on."""
    from ddtree_lab.experiments.plumbing.verdicts import axis_verdict
    tie = axis_verdict("tokens/s", "DDTree-31", "DFlash", "1.86x AR", "1.87x AR", {"ratio": 0.997, "lo": 0.85, "hi": 1.15})
    assert tie.startswith("tokens/s: a tie (") and "0.997x [0.85, 1.15]; the interval holds 1" in tie
    chain = axis_verdict("tokens/s", "DDTree-32", "DFlash", "1.78x AR", "2.04x AR", {"ratio": 0.872, "lo": 0.82, "hi": 0.92})
    assert chain.startswith("tokens/s: DFlash wins (")                        # the chain beats the tree: said


def test_exact_nodes_do_not_move_with_the_budget_because_pop_order_is_one_order():
    """02: 'as the budget grows, a sibling can appear earlier' stood beside '16: 1.88, 64: 1.88'.
    A larger budget appends nodes to the same pop order, so the chain before the first branch
    cannot move; the reading says so, and the tree builder holds it."""
    import torch
    from ddtree_lab.core.tree import build_tree
    torch.manual_seed(0)
    logits = torch.randn(6, 40) * 2
    small, big = build_tree(logits, root_token=3, budget=16), build_tree(logits, root_token=3, budget=64)
    assert big.tokens.tolist()[:17] == small.tokens.tolist() and big.parents.tolist()[:17] == small.parents.tolist()
    text = exact_nodes_reading(s({16: 1.88, 64: 1.88}))
    assert "16: 1.88, 64: 1.88" in text and "only appends nodes to the same order" in text and "earlier" not in text
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[2], as_version=4).cells)
    assert "a sibling can appear earlier" not in source and "appends nodes to the same order" in source


def test_naive_above_exact_is_said_and_why():
    """04: naive tau (4.344) above exact (4.290) at budget 8, with no comment."""
    tau_naive, tau_exact = s({4: 2.607, 8: 4.344, 16: 2.576}), s({4: 3.435, 8: 4.290, 16: 4.916})
    text = naive_above_exact(tau_naive, tau_exact, s({4: 0.375, 8: 0.125, 16: 0.0}))
    assert "at 1 budget (budget 8: 4.344 vs 4.290, naive equal to AR on 12% of the prompts)" in text
    assert "no acceptance gain" in text
    assert naive_above_exact(tau_exact - 1, tau_exact, s({4: 0, 8: 0, 16: 0})) == "naive tau is at or below exact tau at every budget"


def _frame(rows):
    """A results frame: per row (config columns, prompt, acc: accepted lengths, seconds) -> _metrics."""
    out = []
    for r in rows:
        acc, secs = r.pop("acc"), r.pop("seconds")
        out.append({**r, "_metrics": {"acceptance_lengths": acc, "tokens": list(range(int(sum(acc)))),
                                      "timings": {"total": secs}}})
    return pd.DataFrame(out)


def _sweep(chain_seconds: float, jitter: float = 0.0):
    """gdn block 16, T = 0, 6 prompts: DFlash tau 4, trees 16 (tau 5) and 64 (tau 6); ``jitter``:
    the chain's seconds swing by that much, prompt to prompt (faster, slower, ...)."""
    base = {"arch": "gdn", "block_size": 16, "temperature": 0.0}
    rows = []
    for p in range(6):
        secs = chain_seconds + 0.01 * p + (jitter if p % 2 else -jitter)
        rows.append({**base, "method": "dflash", "budget": 15, "prompt": p, "acc": [4] * 10, "seconds": secs})
        rows.append({**base, "method": "ddtree", "budget": 16, "prompt": p, "acc": [5] * 8, "seconds": 0.20 + 0.01 * p})
        rows.append({**base, "method": "ddtree", "budget": 64, "prompt": p, "acc": [6] * 7, "seconds": 0.30 + 0.02 * p})
    frame = _frame(rows)
    sums = prompt_sums(frame)
    g = sums.groupby(["method", "budget"], sort=False).agg(acc=("acc_sum", "sum"), n=("acc_n", "sum"),
                                                           tok=("tokens", "sum"), sec=("seconds", "sum")).reset_index()
    ar_tps = 100.0
    summary = pd.DataFrame({"arch": "gdn", "block_size": 16, "temperature": 0.0, "method": g.method,
                            "budget": g.budget.astype(object), "n_prompts": 6, "tau": g.acc / g.n,
                            "tokens_per_s": g.tok / g.sec, "speedup": g.tok / g.sec / ar_tps, "mean_tree_size": g.budget})
    return summary, sums


def test_the_sweep_reading_names_the_chain_when_it_wins_tokens_per_s():
    """05: the DFlash chain was 1.87x / 2.05x over AR, the best tree 1.86x / 1.78x, and the
    conclusion said only where tokens/s peaks."""
    summary, sums = _sweep(chain_seconds=0.12)          # the chain: 40 tokens in 0.12 s, faster than any tree
    text = sweep_reading("gdn", 16, summary, sums)
    assert "tau: DDTree-64 wins (DDTree-64 6.00 vs DFlash 4.00" in text
    assert "tokens/s: DFlash wins (DDTree-16" in text
    assert "tokens/s peaks at budget 16" in text or "not told apart among budgets" in text


def test_the_sweep_reading_calls_an_overlapping_interval_a_tie():
    summary, sums = _sweep(chain_seconds=0.225, jitter=0.08)   # as fast as the best tree, give or take: noise
    text = sweep_reading("gdn", 16, summary, sums)
    assert "tokens/s: a tie (" in text and "the interval holds 1" in text


def test_entropy_at_t0_is_said_to_be_computed_at_t1_where_it_is_shown():
    """05: the entropy column read 2.268 at T = 0 and 0.297 at T = 0.3, because T = 0 is computed at T = 1."""
    table = pd.DataFrame({"arch": "gdn", "temperature": [0.0, 0.3, 1.0], "method": "dflash", "entropy": [2.268, 0.297, 3.626]})
    note = entropy_note(table)
    assert "the T = 0 rows (greedy) report it at T = 1" in note and "2.268 above its 0.297 at T = 0.3" in note
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[5], as_version=4).cells)
    assert "print(entropy_note(at))" in source


def test_the_ece_and_the_per_round_miss_are_read_together():
    """06: the titles show 'ECE 0.051' while observed / predicted accepted tokens per round is 1.82."""
    text = ece_reading("gdn", 0.051, 5995, 0.63, 0.85, 1.82)
    assert "ECE 0.051 is a mean over 5995 reached nodes" in text and "predicts 0.63 and the target accepts 0.85" in text
    assert "1.82x too few" in text


def test_why_the_after_sibling_gap_is_not_told_apart_names_no_drafter_size():
    """06: GDN 'NOT reproduced' at 0.753 against 0.75, blamed on the tiny drafter, while the
    equally tiny MLA reproduces it."""
    text = sibling_gap_why("gdn", 0.9813, 0.7391, 69, interval={"lo": 0.65, "hi": 0.86}, shown_on=("mla",))
    assert "0.7532x [0.65, 0.86]" in text and "holds the published 0.75 bound" in text
    assert "the gap does show on mla" in text and "27B" not in text and "tiny drafter" not in text


T_EDGE = pd.DataFrame({"best_budget": [16, 8, 4], "best_speedup": [2.41, 1.38, 0.92], "dflash_speedup": [2.64, 1.41, 0.94],
                       "auto_vs_best": [0.92, 0.90, 0.85], "best_over_dflash": [0.91, 0.95, 0.98],
                       "best_over_dflash_lo": [0.85, 0.90, 0.95], "best_over_dflash_hi": [0.97, 0.99, 1.02]},
                      index=pd.Index([1, 4, 16], name="concurrency"))


def test_the_concurrency_reading_says_dflash_wins_when_the_ratio_stays_below_one():
    """07: 'the best tree's speedup over DFlash's goes 0.91 -> 0.98 (widens)' while below 1 at every load."""
    text = concurrency_reading("gdn", T_EDGE)
    assert "DFlash wins at c=1, 4; a tie at c=16" in text
    assert "0.91x [0.85, 0.97] -> 0.98x [0.95, 1.02] from c=1 to c=16, the two intervals overlap: no change in the gap" in text
    assert "widens" not in text and "narrows" not in text


def test_the_sampled_reading_says_every_method_runs_below_batched_ar():
    """07 at T = 1: every method at 0.29-0.79x batched AR, and no sentence said so."""
    t1 = pd.DataFrame({"dflash_speedup": [0.73, 0.29], "dflash_speedup_hi": [0.74, 0.29], "best_speedup": [0.78, 0.33],
                       "best_speedup_hi": [0.91, 0.34], "auto_speedup": [0.76, 0.30], "auto_speedup_hi": [0.82, 0.31],
                       "best_over_dflash": [1.11, 1.17], "best_over_dflash_lo": [0.95, 1.15],
                       "best_over_dflash_hi": [1.25, 1.18]}, index=pd.Index([1, 16], name="concurrency"))
    text = sampled_reading("gdn", t1, 1.0)
    assert text.startswith("gdn, T = 1: every method runs below batched AR at every load, every interval below 1")
    assert "DFlash 0.29-0.73x" in text and "the best tree wins at c=16; a tie at c=1" in text


def test_the_dflash2_winners_name_the_linear_draft_when_it_is_faster():
    """08: the DFlash 2 linear draft beats every tree on MLA in tokens/s (2.45x vs 2.18x)."""
    rows = []
    for p in range(6):
        at = {"arch": "mla", "temperature": 0.0, "prompt": p}
        rows.append({**at, "method": "dflash", "drafter": "dflash2", "tree": "conditional", "budget": 7,
                     "acc": [5] * 10, "seconds": 0.10 + 0.005 * p})
        rows.append({**at, "method": "ddtree", "drafter": "dflash2", "tree": "conditional", "budget": 16,
                     "acc": [6] * 9, "seconds": 0.16 + 0.005 * p})
    frame = _frame(rows)
    sums = prompt_sums(frame)
    summary = pd.DataFrame({"arch": "mla", "temperature": 0.0, "method": ["dflash", "ddtree"], "drafter": "dflash2",
                            "tree": "conditional", "budget": [7, 16], "n_prompts": 6, "tau": [5.0, 6.0],
                            "speedup": [2.45, 2.18]})
    (line,) = dflash2_winners(summary, sums)
    assert "tau: DDTree-16 DFlash 2 conditional wins" in line and "tokens/s: DFlash 2 linear wins" in line


def test_winners_name_both_axes():
    summary, sums = _sweep(chain_seconds=0.12)
    rows = summary.set_index("budget")
    text = winners(sums, {"method": "ddtree", "budget": 64}, {"method": "dflash"}, "DDTree-64", "DFlash",
                   rows.loc[64], rows.loc[15])
    assert text.startswith("tau: DDTree-64 wins") and "; tokens/s: DFlash wins" in text


# ----------------------------------------------------------------------------- issue 67: verdicts that follow their own intervals

def test_one_rule_reads_the_interval_as_printed():
    """'[1.00, 1.55]' and '[0.77, 1.00]' both hold 1 as printed: both ties, never a win and a tie."""
    from ddtree_lab.experiments.plumbing.verdicts import apart, decide, versus
    assert decide(1.004, 1.55) == "tie" and decide(0.77, 0.9996) == "tie"
    assert decide(1.006, 1.55) == "above" and decide(0.5, 0.994) == "below"
    assert decide(float("nan"), 1.2) == "tie" and decide(1.31, 1.4, 1.3) == "above" and decide(1.23, 1.301, 1.3) == "tie"
    assert apart({"lo": 0.80, "hi": 1.10}, {"lo": 0.95, "hi": 1.02}) == "tie"
    assert apart({"lo": 1.15, "hi": 1.18}, {"lo": 0.95, "hi": 1.12}) == "above"
    assert versus(9.71, 10.0) == "below" and versus(4.191, 4.189) == "tie" and versus(4.8, 3.0) == "above"


def _interval_of(text: str) -> tuple[float, float]:
    lo, hi = re.search(r"\[(\d+\.\d+), (\d+\.\d+)\]", text).groups()
    return float(lo), float(hi)


def test_08_the_same_printed_bound_gets_one_verdict():
    """08 printed '1.265x [1.00, 1.55]: conditional trees win here' beside '0.892x [0.77, 1.00]; the
    interval holds 1'. Rendered from such numbers, both are ties, in the reading and in the goal."""
    from ddtree_lab.experiments.studies import dflash2 as d2
    study = pd.DataFrame({"arch": "gdn", "temperature": [0.0, 0.0, 1.0, 1.0], "method": "ddtree", "budget": 64,
                          "drafter": ["dflash2", "dflash", "dflash2", "dflash"],
                          "tree": ["conditional", "unary", "conditional", "unary"],
                          "tau": [5.06, 4.0, 2.23, 2.5], "n_prompts": 6})
    spreads = iter([{"ratio": 1.265, "lo": 1.0004, "hi": 1.55}, {"ratio": 0.892, "lo": 0.77, "hi": 1.0001}])
    original = d2.tau_ratio
    d2.tau_ratio = lambda *a, **k: next(spreads)
    try:
        text = d2.reading(pd.DataFrame({"arch": []}), pd.DataFrame(), study, frame=study)
    finally:
        d2.tau_ratio = original
    lines = [l for l in text.splitlines() if "DDTree-64 tau" in l]
    assert len(lines) == 2
    for line in lines:
        assert "[1.00," in line or "1.00]" in line
        assert "a tie: the interval holds 1" in line and "win here" not in line and "lose here" not in line, line
    goal = claims.conditional_tree_gain("gdn", 5.06, 4.0, goal=1.0, interval={"lo": 1.0004, "hi": 1.55})
    assert not goal.decided and not goal.ok


def test_00_tau_is_called_inflated_only_when_it_is_above_tau_outside_the_loop():
    """00: 'tau over all rounds 9.71 is inflated by it; tau outside the loop is 10.00'."""
    from ddtree_lab.experiments.plumbing.verdicts import versus
    prompt = list(range(100, 160))
    loop = list(range(200, 216)) + [7, 8, 9] * 40
    for lengths in ([4] * 4 + [8] * 15, [8] * 2 + [4] * 30):   # the loop's rounds accept more, then fewer
        text = loop_reading(prompt, loop[:sum(lengths)], lengths)
        every = float(re.search(r"tau over all rounds (\d+\.\d+)", text).group(1))
        outside = float(re.search(r"tau outside the loop is (\d+\.\d+)", text).group(1))
        said = "is inflated by it" in text
        assert said == (versus(every, outside) == "above"), text
    assert "is not inflated by it" in text


def test_05_the_figure_and_the_sentence_name_the_same_peak():
    """05: the figure labelled 'peak 1.86 @ 31' while the text said the peak 'is not told apart
    among budgets 8, 16, 31, 32'. One rule words both."""
    from ddtree_lab.app import plots
    from ddtree_lab.app.reading import peak_label, peak_text, peak_ties
    summary, sums = _sweep(chain_seconds=0.225, jitter=0.08)
    rows = summary[summary.method != "ar"]
    ties = peak_ties("gdn", 16, rows, sums)
    text = sweep_reading("gdn", 16, rows, sums)
    top = int(rows[rows.method == "ddtree"].set_index("budget").tokens_per_s.astype(float).idxmax())
    label = peak_label(top, 1.0, ties)
    assert ("not told apart among budgets" in text) == ("tied" in label) == (len(ties) > 1)
    assert peak_text(31, pd.Series({8: 1.75, 31: 1.86}), [8, 31], "x AR").startswith("the tokens/s peak is not told apart")
    assert peak_label(31, 1.86, [8, 16, 31, 32]) == "highest 1.86 @ 31, tied 8-32"
    assert peak_label(31, 1.86, [31]) == "peak 1.86 @ 31" and peak_label(31, 1.86, None) == "highest 1.86 @ 31"
    curves = summary.assign(gdn_mode="wy", max_new_tokens=64)
    fig = plots.plot_budget_curves(curves, "gdn", metrics=("tokens_per_s",), mark_budget=None, ties={"tokens_per_s": [16, 64]})
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert any(n.startswith("highest") and "tied 16-64" in n for n in notes) and not any(n.startswith("peak") for n in notes)


def test_readme_chain_against_trees_follows_the_intervals():
    """README: the chain 'decodes more tokens per second than the best tree budget on both targets'
    while 05 printed a tie for gdn. Overlapping speedup intervals are said to be a tie."""
    from ddtree_lab.app.readme import chain_against_trees
    rows = []
    for arch, (c, c_lo, c_hi), (t, t_lo, t_hi) in (("gdn", (2.97, 1.94, 3.94), (2.62, 2.02, 3.16)),
                                                   ("mla", (2.45, 2.30, 2.60), (1.86, 1.70, 2.00))):
        rows.append({"arch": arch, "gdn_mode": "wy", "method": "dflash", "budget": "7", "tokens_per_s": 100 * c,
                     "tau": 4.0, "speedup_paired": c, "speedup_paired_lo": c_lo, "speedup_paired_hi": c_hi})
        rows.append({"arch": arch, "gdn_mode": "wy", "method": "ddtree", "budget": "16", "tokens_per_s": 100 * t,
                     "tau": 5.0, "speedup_paired": t, "speedup_paired_lo": t_lo, "speedup_paired_hi": t_hi})
    text = chain_against_trees(pd.DataFrame(rows))
    assert "gdn: not told apart; mla: the chain is faster" in text and "2.97x [1.94, 3.94] against 2.62x" in text
    assert "not told apart on both targets" in chain_against_trees(pd.DataFrame(rows).assign(speedup_paired_lo=1.5))
    assert "more tokens per second than the best tree budget on both targets" not in text


def test_06_rank_one_branches_are_never_said_to_be_accepted_about_as_rarely():
    """06: 'accepted about as rarely' as predicted, against 0.024 vs 0.043 and 0.021 vs 0.073."""
    branch = pd.DataFrame({"arch": ["gdn", "mla"], "predicted": [0.043, 0.073], "observed": [0.024, 0.021]})
    text = branches_why(branch)
    assert "0.56x the prediction: below it, not below half of it" in text
    assert "0.29x the prediction: below it, below half of it, so the published gap shows" in text
    assert "as rarely" not in text
    reading = calibration_reading(branch.assign(group="rank1+").pipe(
        lambda b: pd.concat([b.assign(group="rank0", predicted=0.5, observed=0.7), b])), {"gdn": 1.0, "mla": 1.0})
    assert "accepted 0.024 (0.56x the prediction: below it" in reading
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[6], as_version=4).cells)
    assert "about as rarely" not in source


def test_07_the_figure_is_described_as_drawn():
    """07: the markdown said '(solid: T = 0, dashed: T = 1)' of a figure that draws markers only."""
    from ddtree_lab.app.plots import plot_best_budget
    table = pd.DataFrame({"arch": "gdn", "temperature": [0.0, 0.0, 1.0, 1.0], "concurrency": [1, 16, 1, 16],
                          "best_budget": [16, 8, 4, 4], "tied_budgets": [(8, 16), (8,), (4,), (4,)]})
    fig = plot_best_budget(table)
    drawn = [l for l in fig.axes[0].lines if len(l.get_xdata())]
    assert drawn and all(l.get_linestyle() == "None" for l in drawn)       # markers only
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[7], as_version=4).cells)
    assert "solid: T = 0" not in source and "dashed: T = 1" not in source and "filled markers" in source


def test_07_falls_and_narrows_only_outside_the_noise():
    """07: gdn '(falls from c=1 to c=16)' beside 'no shrinkage is told apart', and 'the gap narrows'
    of 0.93x [0.80, 1.10] -> 0.98x [0.95, 1.02], two ties."""
    t = pd.DataFrame({"best_budget": [8, 16, 4], "tied_budgets": [(8, 16, 32), (16, 32), (4, 8)],
                      "best_speedup": [2.0, 1.5, 0.92], "dflash_speedup": [2.1, 1.6, 0.94],
                      "auto_vs_best": [0.92, 0.94, 0.85], "best_over_dflash": [0.93, 0.95, 0.98],
                      "best_over_dflash_lo": [0.80, 0.90, 0.95], "best_over_dflash_hi": [1.10, 1.01, 1.02]},
                     index=pd.Index([1, 4, 16], name="concurrency"))
    text = concurrency_reading("gdn", t)
    assert "falls" not in text and "narrows" not in text and "widens" not in text
    assert "a tie at both ends: no gap to narrow or widen" in text and "no move is told apart" in text
    why = best_budget_why("gdn", t)
    assert "no shrinkage is told apart" in why
    claim = claims.best_budget_shrinks("gdn", t.best_budget, t.tied_budgets)
    assert not claim.ok                                          # the sentence and the claim agree
    shrinks = t.assign(tied_budgets=[(16, 32), (16,), (4,)], best_over_dflash_lo=[0.80, 0.90, 1.12],
                       best_over_dflash=[0.85, 0.95, 1.15], best_over_dflash_hi=[0.90, 1.01, 1.18])
    text = concurrency_reading("gdn", shrinks)
    assert "(falls from c=1 to c=16)" in text and "the gap narrows" not in text
    assert claims.best_budget_shrinks("gdn", shrinks.best_budget, shrinks.tied_budgets).ok


def test_09_a_rule_beats_ddtree_only_outside_its_interval():
    """09: on mla sibling_capped 'beats' DDTree (5.00 vs 4.94, '101%') on 4 prompts, with no interval."""
    from ddtree_lab.app.reading import rules_reading
    rows = []
    for p in range(4):
        for tree, acc, secs in (("unary", [5, 5, 4, 6], 0.20), ("sibling_capped-abc", [6, 4, 5, 5], 0.21)):
            rows.append({"arch": "mla", "method": "ddtree", "budget": 64, "tree": tree, "prompt": p,
                         "acc": acc[p:] + acc[:p], "seconds": secs + 0.01 * p})
    sums = prompt_sums(_frame(rows))
    summary = pd.DataFrame({"arch": "mla", "method": "ddtree", "budget": 64, "tree": ["unary", "sibling_capped-abc"],
                            "rule": ["DDTree", "sibling_capped"], "n_prompts": 4, "tau": [4.94, 5.00],
                            "tokens_per_s": [100.0, 95.0]})
    (line,) = rules_reading(summary, sums)
    assert line.startswith("mla, budget 64 (4 prompts), sibling_capped against DDTree: tau: a tie (")
    assert "beats" not in line and "sibling_capped wins" not in line


def test_every_printed_check_is_counted(capsys):
    """08 said '1 checks held' with two 'match: True' printed: a check_unless was not counted."""
    record = claims.Record()
    ok = claims.Claim("a", "x", "x", True)
    record.check(ok)
    record.check_unless(None, ok)
    record.check_unless("SMOKE: too few prompts", ok)
    record.check(ok, few_prompts=True)
    printed = capsys.readouterr().out
    assert printed.count("match:    True") == 2 and "skipped:" in printed and "asserted: no" in printed
    assert len(record.checks) == 2 and len(record.skipped) == 2
    assert "- 2 checks held, 2 skipped (printed with why, not asserted)" in conclusion(record)
    with pytest.raises(AssertionError):
        record.check_unless(None, claims.Claim("b", "x", "y", False))


def test_committed_notebooks_count_every_check_they_print():
    """No notebook checks through ``lab.check_unless`` (uncounted): ``record.check_unless``."""
    for path in notebook_paths():
        if path.name[:2] in {f"{n:02d}" for n in range(10)}:
            source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            assert "lab.check_unless(" not in source and "lab.check(" not in source, path.name


def test_a_missing_value_prints_as_a_dash_explained_once(capsys):
    """05 printed 'gdn lookup 7 2.400 NaN NaN', 08 'gain NaN' in 6 of 8 rows."""
    from ddtree_lab.app import lab
    frame = pd.DataFrame({"method": ["ar", "lookup"], "tokens_per_s": [178.3, float("nan")]})
    lab.table(frame, missing="prompt lookup on the GDN hybrid is not timed")
    out = capsys.readouterr().out
    assert "NaN" not in out and "nan" not in out and " -" in out
    assert out.count("-: prompt lookup on the GDN hybrid is not timed") == 1
    lab.table(frame.fillna(1.0))
    assert "-:" not in capsys.readouterr().out


@pytest.mark.parametrize("number", ["05", "07", "08", "09"])
def test_timed_notebooks_print_the_load_they_were_timed_at(number):
    """09 showed AR at 40-45 tokens/s (05: about 167) and never said its run's load was 4.79:
    every notebook that shows stored timings prints their stamp (``lab.measured_at``: machine,
    date, load)."""
    path = next(p for p in notebook_paths() if p.name.startswith(number))
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert "lab.measured_at(" in source, path.name


def test_measured_at_prints_the_load(tmp_path, monkeypatch, capsys):
    from ddtree_lab.app import lab
    from ddtree_lab.experiments.plumbing.results import ResultsStore
    store = ResultsStore("timed", tmp_path)
    monkeypatch.setattr(lab, "store", lambda name, smoke: store)
    monkeypatch.setattr("ddtree_lab.experiments.plumbing.results.stamp",
                        lambda: {"git": "abc1234", "machine": "m", "date": "2026-12-07", "load_avg_1min": 4.79, "threads": 1})
    store.add({"method": "ar"}, 0, {"tokens": [1]}, {}, run="r")
    lab.measured_at("timed", False, run="r")
    assert "load 4.8-4.8" in capsys.readouterr().out
