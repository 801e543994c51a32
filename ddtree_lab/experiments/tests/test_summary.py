"""summarize's loop split: pooled tau over all rounds, outside loops, by copying and clean."""
import math

import pandas as pd
import pytest

from ddtree_lab.experiments.plumbing.summary import summarize


def _row(method, prompt, tokens, acc, flags, ends, entropy=0.5, copyable=None):
    cfg = {"arch": "mla", "method": method, "gdn_mode": "wy", "budget": 0 if method == "ar" else 7,
           "block_size": 0 if method == "ar" else 8, "temperature": 0.0, "max_new_tokens": len(tokens),
           "accept_rule": "rejection"}
    m = {"tokens": tokens, "acceptance_lengths": acc, "tree_sizes": [7] * len(acc), "timings": {"total": 1.0},
         "tau": sum(acc) / len(acc), "round_looping": flags, "ends_in_loop": ends, "entropy": entropy,
         "round_copyable": [False] * len(acc) if copyable is None else copyable}
    return {**cfg, "prompt": prompt, "tau": m["tau"], "_metrics": m}


def test_tau_outside_loops_pools_the_untagged_rounds():
    toks = list(range(12))
    frame = pd.DataFrame([_row("ar", 0, toks, [1] * 12, [False] * 12, False),
                          _row("ar", 1, toks, [1] * 12, [False] * 6 + [True] * 6, True),
                          _row("dflash", 0, toks, [2, 2, 8], [False, False, True], True, 1.0),
                          _row("dflash", 1, toks, [4, 8], [False, True], False, 2.0)])
    s = summarize(frame).set_index("method")
    assert s.loc["dflash", "tau"] == pytest.approx(24 / 5)                  # the one tau: pooled over rounds
    assert s.loc["dflash", "tau_prompt_mean"] == pytest.approx((4 + 6) / 2) # its own name: mean of per-prompt tau
    assert s.loc["dflash", "tau_outside_loops"] == pytest.approx(8 / 3)     # rounds 2, 2, 4
    assert s.loc["dflash", "loop_round_share"] == pytest.approx(2 / 5)
    assert s.loc["dflash", "loop_prompts"] == 0.5 and s.loc["dflash", "entropy"] == 1.5
    assert s.loc["ar", "loop_round_share"] == pytest.approx(6 / 24) and s.loc["ar", "tau_outside_loops"] == 1


def test_copyable_and_clean_tau_pool_their_rounds():
    """Copyable share and tau in copyable rounds and the others; the clean tau: rounds neither
    looping nor copyable."""
    toks = list(range(12))
    frame = pd.DataFrame([_row("dflash", 0, toks, [2, 2, 8], [False, False, True], True, copyable=[False, True, True]),
                          _row("dflash", 1, toks, [4, 8], [False, False], False, copyable=[False, True])])
    s = summarize(frame).iloc[0]
    assert s.copyable_share == pytest.approx(3 / 5) and s.tau_copyable == pytest.approx(18 / 3)
    assert s.tau_not_copyable == pytest.approx(6 / 2) and s.tau_clean == pytest.approx(6 / 2)
    assert s.tau_outside_loops == pytest.approx(16 / 4) and s.loop_round_share == pytest.approx(1 / 5)


def test_rows_stored_before_loop_tags_give_nan_not_a_number():
    row = _row("ar", 0, [1, 2], [1, 1], None, False)
    del row["_metrics"]["round_looping"], row["_metrics"]["round_copyable"], row["_metrics"]["ends_in_loop"]
    s = summarize(pd.DataFrame([row]))
    assert math.isnan(s.tau_outside_loops[0]) and math.isnan(s.loop_prompts[0]) and math.isnan(s.tau_clean[0])


def test_quality_tables_merge_per_target(tmp_path):
    """Targets measured by separate processes land in one quality file, in target order."""
    import json
    from ddtree_lab.experiments.studies.quality import merge_quality
    path = tmp_path / "q.json"
    mla = merge_quality(path, {"targets": [{"arch": "mla", "x": 1}], "decoding": [{"arch": "mla", "tau": 2}]}, ("mla",))
    path.write_text(json.dumps(mla))
    both = merge_quality(path, {"targets": [{"arch": "gdn", "x": 3}], "decoding": [{"arch": "gdn", "tau": 4}]}, ("gdn",))
    assert [r["arch"] for r in both["targets"]] == ["gdn", "mla"] and both["decoding"][1]["tau"] == 2
    path.write_text(json.dumps(both))
    again = merge_quality(path, {"targets": [{"arch": "gdn", "x": 5}], "decoding": []}, ("gdn",))
    assert [r["x"] for r in again["targets"]] == [5, 1] and [r["arch"] for r in again["decoding"]] == ["mla"]


def test_a_speed_curve_that_mixes_runs_fails():
    """Timings divided across runs (AR from one pass, a budget from another) are refused;
    the same rows from one run summarise."""
    toks = list(range(12))
    rows = [_row("ar", 0, toks, [1] * 12, [False] * 12, False), _row("dflash", 0, toks, [4, 8], [False, True], False, 2.0)]
    one = pd.DataFrame(rows).assign(run="05_sweeps")
    assert len(summarize(one)) == 2
    mixed = one.assign(run=["03_mla_loops", "05_sweeps"])
    with pytest.raises(ValueError, match="mixes runs"):
        summarize(mixed)
