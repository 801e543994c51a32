"""The results store and sweeps: resumable, never stale, nothing lost on a crash."""
import json

import pytest

from ddtree_lab.experiments.plumbing.results import STAMP_FIELDS, ResultsStore, row_key
from ddtree_lab.experiments.plumbing.meaning import SEMANTICS
from ddtree_lab.experiments.plumbing.sweep import expand_grid, normalise, run_sweep

GRID = dict(arch=["gdn", "mla"], method=["ar", "ddtree"], gdn_mode=["naive", "wy"], budget=[4, 16],
            block_size=[8], temperature=[0.0], max_new_tokens=[8])


class FakePair:
    """Stands in for a ``Pair``: an arch and the digests of its two models."""
    def __init__(self, arch, target="t0", drafter="d0"):
        self.arch, self.digests = arch, {"target": target, "drafter": drafter}


PAIRS = {"gdn": FakePair("gdn"), "mla": FakePair("mla")}


def fake_runner(calls, crash_at=None):
    def run(cfg, prompt, pair):
        calls.append((tuple(cfg.values()), prompt))
        if crash_at is not None and len(calls) == crash_at:
            raise KeyboardInterrupt("simulated crash")
        return {"tokens": [prompt] * 3, "tau": 1.5, "tokens_per_s": 10.0,
                "timings": {"total": 0.3}, "acceptance_lengths": [2, 1], "tree_sizes": [4, 4]}
    return run


def test_grid_normalises_ignored_axes():
    grid = expand_grid(**GRID)
    ar = [g for g in grid if g["method"] == "ar"]
    assert len(ar) == 2 and all(g["budget"] == 0 and g["gdn_mode"] == "wy" for g in ar)
    mla = [g for g in grid if g["arch"] == "mla" and g["method"] == "ddtree"]
    assert len(mla) == 2 and {g["gdn_mode"] for g in mla} == {"wy"}
    assert len(grid) == 2 + 4 + 2
    assert normalise({**grid[0], "extra": 1}) == grid[0]
    with pytest.raises(ValueError, match="axis"):
        expand_grid(arch=["gdn"])


def test_rerun_skips_finished_rows(tmp_path):
    store, calls = ResultsStore("s", tmp_path), []
    grid = expand_grid(**GRID)
    run_sweep(grid, [0, 1], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == len(grid) * 2
    run_sweep(grid, [0, 1], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == len(grid) * 2  # nothing recomputed
    run_sweep(grid, [0, 1, 2], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == len(grid) * 3  # only the new prompt
    assert len(store.rows()) == len(grid) * 3


def test_crash_loses_no_finished_row_and_resume_finishes(tmp_path):
    store, calls = ResultsStore("s", tmp_path), []
    grid = expand_grid(**GRID)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, [0, 1], store, PAIRS, progress=False, runner=fake_runner(calls, crash_at=5))
    assert len(store.rows()) == 4
    with open(store.path, "a") as f:
        f.write('{"key": "torn')  # a row torn mid-write by a kill
    assert len(store.rows()) == 4
    more = []
    frame = run_sweep(grid, [0, 1], store, PAIRS, progress=False, runner=fake_runner(more))
    assert len(more) == len(grid) * 2 - 4 and len(frame) == len(grid) * 2
    lines = store.path.read_text().splitlines()
    assert sum(1 for line in lines if line.startswith('{"key": "torn')) == 1  # sealed, not merged
    json.loads(lines[-1])


def test_changed_config_or_semantics_is_never_reused(tmp_path):
    store, calls = ResultsStore("s", tmp_path), []
    cfg = expand_grid(**{**GRID, "arch": ["gdn"], "method": ["ddtree"], "gdn_mode": ["wy"], "budget": [4]})
    run_sweep(cfg, [0], store, PAIRS, progress=False, runner=fake_runner(calls))
    changed = [{**cfg[0], "max_new_tokens": 9}]
    run_sweep(changed, [0], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == 2
    store.semantics = SEMANTICS + 1  # a bumped semantics version (ddtree_lab/semantics.py)
    frame = run_sweep(cfg, [0], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == 3 and len(frame) == 1  # stale rows are not shown either
    models = PAIRS["gdn"].digests
    assert row_key(cfg[0], 0, models, semantics=1) != row_key(cfg[0], 0, models, semantics=2)


def test_another_model_never_reuses_or_shows_rows(tmp_path):
    store, calls = ResultsStore("s", tmp_path), []
    cfg = expand_grid(**{**GRID, "arch": ["gdn"], "method": ["ddtree"], "gdn_mode": ["wy"], "budget": [4]})
    run_sweep(cfg, [0], store, PAIRS, progress=False, runner=fake_runner(calls))
    for other in (FakePair("gdn", target="t1"), FakePair("gdn", drafter="d1")):
        frame = run_sweep(cfg, [0], store, {"gdn": other}, progress=False, runner=fake_runner(calls))
        assert len(frame) == 1 and frame["_metrics"].map(len).all()
    assert len(calls) == 3 and len(store.rows()) == 3
    assert len(store.frame()) == 3 and len(store.frame(models={"gdn": PAIRS["gdn"].digests})) == 1


def test_rows_of_the_old_key_format_are_ignored(tmp_path):
    store, calls = ResultsStore("s", tmp_path), []
    cfg = expand_grid(**{**GRID, "arch": ["gdn"], "method": ["ddtree"], "gdn_mode": ["wy"], "budget": [4]})
    old = {"key": "old", "config": cfg[0], "prompt": 0, "metrics": {"tau": 9.0}, "semantics": store.semantics}
    store.path.write_text(json.dumps(old) + "\n")  # written before rows recorded their models
    frame = run_sweep(cfg, [0], store, PAIRS, progress=False, runner=fake_runner(calls))
    assert len(calls) == 1 and frame.tau.tolist() == [1.5]


def test_a_grid_arch_without_a_pair_is_refused(tmp_path):
    with pytest.raises(ValueError, match="missing \\['mla'\\]"):
        run_sweep(expand_grid(**GRID), [0], ResultsStore("s", tmp_path), {"gdn": PAIRS["gdn"]}, progress=False)


def test_rows_carry_provenance(tmp_path):
    store = ResultsStore("s", tmp_path)
    store.add({"arch": "gdn"}, 3, {"tau": 2.0}, PAIRS["gdn"].digests)
    row = store.rows()[0]
    assert row["models"] == {"target": "t0", "drafter": "d0"}
    assert row["semantics"] == SEMANTICS and "code" not in row and set(row["versions"]) == {"torch", "transformers"}
    assert set(STAMP_FIELDS) <= set(row) and row["threads"] >= 1 and row["date"].endswith("Z") and row["machine"]
    assert row["git"] and row["prompt"] == 3 and row["metrics"] == {"tau": 2.0}
