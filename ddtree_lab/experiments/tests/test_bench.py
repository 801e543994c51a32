"""The bench grid: T = 0 (every GDN mode, auto in the exact mode only) and every sampled T
(exact modes); speedups paired by prompt with their interval; the T = 0.3 goal lines."""
import pandas as pd
import pytest

from ddtree_lab.experiments.studies.bench import bench_grid, paired_speedups, sampled_goals


def test_bench_grid_has_every_temperature_and_no_auto_for_inexact_or_fork():
    grid = bench_grid(budgets=(1, 16), sampled_budgets=(4,))
    keys = {(g["arch"], g["method"], g["gdn_mode"], g["budget"], g["temperature"], g["accept_rule"]) for g in grid}
    assert len(keys) == len(grid)
    assert ("gdn", "ddtree", "naive", 16, 0.0, "rejection") in keys and ("gdn", "ddtree", "wy", "auto", 0.0, "rejection") in keys
    assert not any(g["budget"] == "auto" and g["gdn_mode"] in ("naive", "fork") for g in grid)
    assert sorted({k[4] for k in keys}) == [0.0, 0.3, 0.6, 1.0]
    for temp in (0.3, 0.6, 1.0):
        for rule in ("rejection", "target"):  # both acceptance rules at every T > 0, AR once
            sampled = {k[:4] for k in keys if k[4] == temp and (k[5] == rule or k[1] == "ar")}
            assert sampled >= {("gdn", "ar", "wy", 0), ("gdn", "dflash", "wy", 7), ("gdn", "ddtree", "wy", 4),
                               ("mla", "ar", "wy", 0), ("mla", "dflash", "wy", 7), ("mla", "ddtree", "wy", 4)}, temp
            # the reference loop runs its own rule (rejection) at every T, beside the lab's two
            assert (("gdn", "official", "wy", 7) in sampled) == (rule == "rejection"), (temp, rule)
    assert {k[5] for k in keys if k[4] == 0} == {"rejection"}  # one greedy walk: no second rule at T = 0
    assert not any(v == "-" for g in grid for v in g.values())  # no placeholder label
    only_one = bench_grid(budgets=(1,), sampled_budgets=(4,), temperatures=(1.0,))
    assert sorted({g["temperature"] for g in only_one}) == [0.0, 1.0]


def _frame(seconds: dict, prompts: int = 10) -> pd.DataFrame:
    """method -> seconds per prompt (8 tokens each); one arch, T = 0."""
    rows = []
    for method, secs in seconds.items():
        for p in range(prompts):
            rows.append({"arch": "gdn", "method": method, "gdn_mode": "wy", "budget": 0 if method == "ar" else 16,
                         "block_size": 8, "temperature": 0.0, "max_new_tokens": 8, "prompt": p,
                         "_metrics": {"tokens": list(range(8)), "timings": {"total": secs(p)}}})
    return pd.DataFrame(rows)


def test_paired_speedups_pair_by_prompt():
    # AR is slow on odd prompts; DDTree is exactly 2x AR on every prompt: a pooled rate hides
    # nothing here, the paired ratio is 2.0 with a zero-width interval and a tiny sign-test p
    frame = _frame({"ar": lambda p: 1.0 + p % 2, "ddtree": lambda p: (1.0 + p % 2) / 2})
    out = paired_speedups(frame).set_index("method")
    print(out.to_string())
    assert out.loc["ddtree", "speedup_paired"] == pytest.approx(2.0)
    assert out.loc["ddtree", ["speedup_paired_lo", "speedup_paired_hi"]].tolist() == pytest.approx([2.0, 2.0])
    assert out.loc["ddtree", "speedup_paired_p"] == pytest.approx(2 / 2 ** 10)
    assert out.loc["ar", "speedup_paired"] == pytest.approx(1.0)


def test_sampled_goals_pass_and_miss_with_the_figure():
    table = pd.DataFrame([
        {"arch": "gdn", "temperature": 0.3, "block_size": 8, "method": "dflash", "gdn_mode": "wy", "budget": "7", "tau": 3.2},
        {"arch": "gdn", "temperature": 0.3, "block_size": 8, "method": "ddtree", "gdn_mode": "wy", "budget": "64", "tau": 3.9},
        {"arch": "gdn", "temperature": 1.0, "block_size": 8, "method": "dflash", "gdn_mode": "wy", "budget": "7", "tau": 1.1}]
    ).assign(accept_rule="rejection")
    lines = sampled_goals(table)
    print("\n".join(lines))
    assert lines == ["PASS  gdn: T = 0.3 DFlash tau: 3.200 (goal >= 3.0)",
                     "MISS  gdn: T = 0.3 DDTree-64 tau: 3.900 (goal >= 4.0)"]
