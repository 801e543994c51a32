"""The copy baseline (``studies/lookup.py``): transformers' prompt-lookup loop and its cache-free
twin agree round for round and equal greedy AR; a stateful target falls back to the twin and
stores no time; a row with no time has no tokens/s."""
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from ddtree_lab.core import decode
from ddtree_lab.core.models import build_target
from ddtree_lab.experiments.plumbing.summary import summarize
from ddtree_lab.experiments.studies import bench, lookup


def looping_prompt(n: int = 24) -> list[int]:
    return [5, 9, 13, 17] * (n // 4)  # a repeated 4-gram: the lookup finds drafts at once


def test_rounds_from_the_forward_calls():
    """Prefill of 10 prompt tokens + a 3-token draft accepting 2 (cache then 11), a 1-token
    round (no draft), a 3-token draft accepting all and the output's end."""
    calls = [(0, 13), (11, 1), (12, 4)]
    out = lookup.rounds_from_calls(10, calls, n_tokens=7)
    assert out == {"acceptance_lengths": [2, 1, 4], "tree_sizes": [3, 0, 3]}


@pytest.mark.parametrize("prompt", [looping_prompt(), list(range(3, 40))], ids=["repeating", "fresh"])
def test_transformers_loop_and_its_twin_agree_and_equal_ar(prompt):
    target = build_target("mla-toy", seed=0).eval()
    ours = lookup.lookup_generate(target, prompt, max_new_tokens=20, num_tokens=4)
    twin = lookup.lookup_reference(target, prompt, max_new_tokens=20, num_tokens=4)
    ar = decode.generate(target, None, prompt, method="ar", max_new_tokens=20).tokens
    print("rounds", ours["acceptance_lengths"], "drafts", ours["tree_sizes"])
    assert ours == twin and ours["tokens"] == ar and sum(ours["acceptance_lengths"]) == 20


def test_a_stateful_target_runs_the_twin_and_stores_no_time():
    target = build_target("gdn-toy", seed=0).eval()
    with pytest.raises(ValueError, match="stateful"):
        lookup.lookup_generate(target, looping_prompt(), max_new_tokens=8, num_tokens=4)
    pair = SimpleNamespace(target=target)
    m = lookup.lookup_metrics(pair, looping_prompt(), num_tokens=4, max_new_tokens=16)
    assert m["loop"] == "reference" and math.isnan(m["timings"]["total"]) and math.isnan(m["tokens_per_s"])
    assert m["tokens"] == decode.generate(target, None, looping_prompt(), method="ar", max_new_tokens=16).tokens
    assert len(m["round_looping"]) == len(m["round_copyable"]) == m["rounds"] and m["tau"] >= 1


def test_a_row_without_a_time_has_no_tokens_per_s():
    def row(method, total):
        m = {"tokens": [1, 2, 3, 4], "acceptance_lengths": [2, 2], "tree_sizes": [3, 3], "timings": {"total": total},
             "tau": 2.0, "round_looping": [False, True], "round_copyable": [False, True], "ends_in_loop": True}
        return {"arch": "gdn", "method": method, "gdn_mode": "wy", "budget": 7, "block_size": 8, "temperature": 0.0,
                "max_new_tokens": 4, "prompt": 0, "tau": 2.0, "_metrics": m}
    s = summarize(pd.DataFrame([row("ar", 1.0), row("lookup", float("nan"))])).set_index("method")
    assert s.loc["ar", "tokens_per_s"] == 4 and math.isnan(s.loc["lookup", "tokens_per_s"])
    assert math.isnan(bench.wall_rate(row("lookup", float("nan"))["_metrics"]))


def test_the_bench_holds_the_copy_baseline_at_t0_drafting_as_far_as_dflash():
    grid = bench.bench_grid(("gdn", "mla"), budgets=(16,), sampled_budgets=(4,), temperatures=(1.0,))
    rows = [c for c in grid if c["method"] == "lookup"]
    dflash = {c["budget"] for c in grid if c["method"] == "dflash"}
    assert [(c["arch"], c["temperature"]) for c in rows] == [("gdn", 0.0), ("mla", 0.0)]
    assert {c["budget"] for c in rows} == dflash == {7} and {c["gdn_mode"] for c in rows} == {"wy"}
