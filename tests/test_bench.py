"""The bench grid: T = 0 (every GDN mode, auto in the exact mode only) and T = 1 (exact modes)."""
from ddtree_lab.experiments.bench import bench_grid


def test_bench_grid_has_both_temperatures_and_no_auto_for_inexact_or_fork():
    grid = bench_grid(budgets=(1, 16), t1_budgets=(4,))
    keys = {(g["arch"], g["method"], g["gdn_mode"], g["budget"], g["temperature"]) for g in grid}
    assert len(keys) == len(grid)
    assert ("gdn", "ddtree", "naive", 16, 0.0) in keys and ("gdn", "ddtree", "wy", "auto", 0.0) in keys
    assert not any(g["budget"] == "auto" and g["gdn_mode"] in ("naive", "fork") for g in grid)
    t1 = {k for k in keys if k[4] == 1.0}
    assert t1 == {("gdn", "ar", "-", 0, 1.0), ("gdn", "dflash", "wy", 7, 1.0), ("gdn", "ddtree", "wy", 4, 1.0),
                  ("mla", "ar", "-", 0, 1.0), ("mla", "dflash", "-", 7, 1.0), ("mla", "ddtree", "-", 4, 1.0)}
