"""The golden check (``app.golden``): stores are keyed by meaning, so the fast lane
recomputes a fixed sample of every store and fails, naming the stores and the command, when a
change moved a stored result."""
import json
import sys

import pytest

from ddtree_lab.experiments.plumbing import meaning as semantics
from ddtree_lab.common import ROOT
from ddtree_lab.app import golden
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.app.registry import EXPERIMENTS, NOT_EXPERIMENTS, by_name


@pytest.fixture(scope="module")
def results():
    return golden.check()


@pytest.mark.xdist_group("golden")  # one worker: the golden check (30 s) runs once for both
def test_the_golden_sample_of_every_store_reproduces(results):
    assert all(r.ok for r in results), golden.report(results)
    checked = {r.store: r.checked for r in results}
    assert set(checked) == {name for e in EXPERIMENTS for name, _ in e.golden}
    assert all(n >= 1 for n in checked.values()), f"a store with no sampled row checks nothing: {checked}"


@pytest.mark.xdist_group("golden")  # one worker: the golden check (30 s) runs once for both
def test_the_sample_covers_both_targets_and_sampling(results):
    rows = [r for name in ("bench", "dflash2", "sweeps") for r in golden.sample(ResultsStore(name).current_rows())]
    assert {r["config"]["arch"] for r in rows} == {"gdn", "mla"}
    assert {r["config"]["temperature"] > 0 for r in rows} == {False, True}
    assert {"ddtree", "dflash"} <= {r["config"]["method"] for r in rows}


class _Models:
    digests = {"target": "t", "drafter": "d"}


def _store_with(tmp_path, metrics: dict, config: dict | None = None) -> str:
    config = config or {"arch": "gdn", "method": "ddtree", "budget": 16, "temperature": 0.0, "max_new_tokens": 8}
    ResultsStore("s", tmp_path).add(config, 0, metrics, _Models.digests)
    return "s"


def test_a_moved_token_fails_naming_the_store_and_the_command(tmp_path, monkeypatch):
    stored = {"tokens": [1, 2, 3], "acceptance_lengths": [2, 1], "tree_sizes": [5, 5], "entropy": 0.5}
    kind = golden.Kind(lambda arch: _Models(), lambda cfg, unit, m: {**stored, "tokens": [1, 2, 4]}, golden.GEN_FIELDS)
    result = golden.check_store(_store_with(tmp_path, stored), kind, {}, tmp_path)
    assert result.checked == 1 and not result.ok and "tokens: stored [1, 2, 3] -> now [1, 2, 4]" in result.moved[0]
    monkeypatch.setattr(golden, "owner_of", lambda store: by_name("quality"))
    text = golden.report([result])
    assert "ddtree-lab recompute quality" in text and "SEMANTICS" in text and "s:" in text


def test_an_unmoved_row_passes_and_entropy_allows_rounding_only(tmp_path):
    stored = {"tokens": [1], "acceptance_lengths": [1], "tree_sizes": [1], "entropy": 0.5}
    same = golden.Kind(lambda a: _Models(), lambda c, u, m: {**stored, "entropy": 0.5 * (1 + 1e-9)}, golden.GEN_FIELDS)
    assert golden.check_store(_store_with(tmp_path, stored), same, {}, tmp_path).ok
    off = golden.Kind(lambda a: _Models(), lambda c, u, m: {**stored, "entropy": 0.5001}, golden.GEN_FIELDS)
    assert not golden.check_store("s", off, {}, tmp_path).ok


def test_rows_of_other_models_or_a_timed_budget_are_not_sampled(tmp_path):
    store = ResultsStore("s", tmp_path)
    cfg = {"arch": "gdn", "method": "ddtree", "budget": "auto", "temperature": 0.0, "max_new_tokens": 8}
    store.add(cfg, 0, {"tokens": [1]}, _Models.digests)
    store.add({**cfg, "budget": 4}, 0, {"tokens": [1]}, {"target": "other", "drafter": "d"})
    calls = []
    kind = golden.Kind(lambda a: _Models(), lambda c, u, m: calls.append(c) or {"tokens": [1]}, ("tokens",))
    assert golden.check_store("s", kind, {}, tmp_path).checked == 0 and not calls


def test_the_sample_is_fixed_richest_method_then_cheapest():
    def row(method, budget, prompt, t=0.0, n=64):
        return {"config": {"arch": "mla", "method": method, "budget": budget, "temperature": t, "max_new_tokens": n},
                "prompt": prompt}
    rows = [row("ar", 0, 0), row("ddtree", 64, 3), row("ddtree", 16, 5), row("ddtree", 16, 2, n=128),
            row("dflash", 7, 0, t=1.0)]
    picked = golden.sample(rows)
    assert picked == [rows[0], rows[2]] and golden.sample(list(reversed(rows))) == picked  # T > 0: the tree rows only
    assert golden.sample([rows[0], rows[4]]) == [rows[0], rows[4]]  # a store without trees: its chain at T > 0


def test_semantics_changes_are_dated_and_count_to_the_version():
    semantics.check_changes()
    assert all(len(date) == 10 and date[4] == "-" for date, _, _ in semantics.CHANGES)
    with pytest.raises(ValueError, match="CHANGES must count"):
        semantics.check_changes(semantics.CHANGES, semantics.SEMANTICS + 1)


def test_no_key_reads_the_source():
    text = (ROOT / "ddtree_lab" / "experiments" / "plumbing" / "results.py").read_text()
    assert "read_bytes" not in text and "code_version" not in text
    row = json.loads((ROOT / "data" / "results" / "quality.jsonl").read_text().splitlines()[0])
    assert row["semantics"] == semantics.SEMANTICS and "code" not in row
    assert ResultsStore("quality").key(row["config"], row["prompt"], row["models"], row["run"]) == row["key"]


def test_every_script_is_an_experiment_or_says_why_not():
    """A script under scripts/ is the command line of a registry step's bench, or says why not."""
    benches = {s.function.split(":")[0].rsplit(".", 1)[1] + ".py" for e in EXPERIMENTS for s in e.run
               if s.function.startswith("ddtree_lab.experiments.benches.")}
    scripts = {p.name for p in (ROOT / "scripts").glob("*.py")}
    assert scripts == benches | set(NOT_EXPERIMENTS), (scripts - benches - set(NOT_EXPERIMENTS),
                                                       benches | set(NOT_EXPERIMENTS) - scripts)
    for name in benches:
        assert f"ddtree_lab.experiments.benches.{name[:-3]} import main" in (ROOT / "scripts" / name).read_text()


def test_every_step_is_an_in_process_function_of_the_package():
    """No argv and no subprocess: each step names a function that exists, with keyword arguments
    it accepts; sweep and compare-drafters are experiments too."""
    import importlib
    import inspect
    from ddtree_lab.app import cli, registry
    for e in EXPERIMENTS:
        assert e.run and all(isinstance(step, registry.Step) for step in e.run), e.name
        for step in e.run:
            module, name = step.function.split(":")
            fn = getattr(importlib.import_module(module), name)
            inspect.signature(fn).bind(**step.kwargs)
            if fn is cli.command:
                assert step.kwargs["name"] in next(a for a in cli.parser()._actions if hasattr(a, "choices")
                                                   and isinstance(a.choices, dict)).choices
    commands = {s.kwargs["name"] for e in EXPERIMENTS for s in e.run if s.function.endswith(":command")}
    assert {"sweep", "compare-drafters", "bench", "quality", "dflash2", "concurrency"} <= commands
    text = (ROOT / "ddtree_lab" / "app" / "registry.py").read_text() + (ROOT / "ddtree_lab" / "app" / "house.py").read_text()
    assert "import subprocess" not in text and "sys.executable" not in text


def test_every_stored_file_has_an_owner():
    owned = {f"{s}.jsonl" for e in EXPERIMENTS for s in e.stores} | {t for e in EXPERIMENTS for t in e.tables}
    import fnmatch
    results = ROOT / "data" / "results"
    files = [p.name for p in results.iterdir() if p.is_file() and p.suffix in (".jsonl", ".csv", ".gz")]
    orphans = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in owned)]
    assert not orphans, f"stored files no experiment owns (add them to app/registry.py): {orphans}"
