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
                                    concurrency_reading, exact_nodes_reading, loop_reading, naive_peak_why,
                                    sibling_gap_why, table_text)

GAPS = pd.DataFrame({"arch": ["gdn", "gdn"], "group": ["rank0", "rank1+"], "predicted": [0.528, 0.038],
                     "observed": [0.742, 0.028], "count": [1092, 7178]})


def test_calibration_reading_states_the_measured_numbers():
    text = calibration_reading(GAPS, {"gdn": 1.696})
    assert "rank 0 predicted 0.53, accepted 0.74" in text and "rank 1+ predicted 4%, accepted 3%" in text
    assert "does not show" in text
    assert "1.70 x" in text and "outside 25%" in text and "underestimates" in text
    assert "within 25%" in calibration_reading(GAPS, {"gdn": 1.1})
    shows = GAPS.assign(observed=[0.742, 0.01])
    assert "(the published gap shows)" in calibration_reading(shows, {"gdn": 1.0})


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
    assert "NaN" not in text and "nan" not in text and "n/a" in text and text.endswith("n/a: no linear form")
    assert "n/a" not in table_text(grid.fillna(1.0), "no linear form")


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
    assert "1 checks held" in text and "NOT reproduced" in text and "because the main path carries" in text
    assert "reproduced here: the same crop is exact on MLA" in text
    assert "0 of 1 met; missed: gdn: auto" in text and "0.70" in text
    empty = conclusion(claims.Record())
    assert "nothing was checked" in empty


def test_loop_reading_says_when_the_generation_loops_and_gives_tau_outside():
    prompt = list(range(100, 160))
    clean = list(range(200, 264))
    assert loop_reading(prompt, clean, [4] * 16).startswith("No repetition loop")
    loop = list(range(200, 216)) + [7, 8, 9] * 40                         # falls into a period-3 loop
    lengths = [4] * 4 + [8] * 15              # rounds start at 16 + 8k: looping once 48 loop tokens are in
    text = loop_reading(prompt, loop, lengths)
    assert "repetition loop (period 3 tokens" in text and "inflated" in text and "47% of 19 rounds" in text
    assert "tau outside the loop is 6.40 over 10 rounds" in text and "No repetition" not in text
    starting = list(range(200, 244)) + [5, 6] * 10                # 20 repeating tokens at the end: below the window
    text = loop_reading(prompt, starting, [4] * 16)
    assert text.startswith("The generation ends repeating a 2-token pattern, but fewer than 48 periodic tokens")
    assert "No repetition" not in text


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
    assert "0.62 vs 0.80" in text and "0.78x" not in text and "0.77x" in text and "120 nodes" in text
    assert "accepted 4% and they are accepted 3%" in branches_why(
        pd.DataFrame({"arch": ["gdn"], "predicted": [0.038], "observed": [0.028]}))


T0 = pd.DataFrame({"best_budget": [16, 16, 4, 8, 16], "best_speedup": [1.35, 1.4, 1.3, 1.4, 1.48],
                   "dflash_speedup": [1.0, 1.0, 1.0, 1.0, 1.0], "auto_vs_best": [0.96, 0.9, 0.8, 0.75, 0.70]},
                  index=pd.Index([1, 2, 4, 8, 16], name="concurrency"))


def test_concurrency_reading_says_which_way_each_went():
    text = concurrency_reading("gdn", T0)
    assert "best budget goes 16, 16, 4, 8, 16 (ends where it started" in text
    assert "1.35 -> 1.48 (widens)" in text and "0.70-0.96" in text
    falls = concurrency_reading("gdn", T0.assign(best_budget=[16, 8, 8, 4, 4], best_speedup=[1.5, 1.4, 1.3, 1.2, 1.1]))
    assert "(falls from c=1 to c=16)" in falls and "(narrows)" in falls
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
