"""Rules of one's own in the sweeps (``sweep.stored_config``) and notebook 09's study
(``studies.your_tree``): a rule object runs through a sweep, its rows are stored under its own
key beside the built-ins' labels, and the study's tables and sentences read what was stored."""
import pandas as pd
import pytest

from ddtree_lab import best_first, load_pair
from ddtree_lab.core.rules import as_rule, from_rank_paths, target_matching
from ddtree_lab.experiments.plumbing.results import ResultsStore
from ddtree_lab.experiments.plumbing.meaning import plugin_key
from ddtree_lab.experiments.plumbing.sweep import expand_grid, run_sweep, spec_of, stored_config
from ddtree_lab.experiments.studies import your_tree as yt


def two_chains(draft, root_token, budget, depth=2):
    """Two first tokens, a chain of ``depth`` under each."""
    paths = [p for d in range(1, depth + 1) for p in ((0,) * d, (1,) + (0,) * (d - 1))]
    return from_rank_paths(draft.logits, root_token, paths[:budget])


GRID = dict(arch=["mla"], method=["ar", "ddtree"], gdn_mode=["wy"], budget=[4], block_size=[8], temperature=[0.0],
            max_new_tokens=[8])


def test_a_rule_object_is_stored_under_its_key_and_a_label_config_is_stored_as_it_was():
    configs = expand_grid(**GRID, tree=[best_first, "unary", two_chains])
    stored = [stored_config(c) for c in configs]
    assert [c["tree"] for c in stored] == [None, "unary", plugin_key(as_rule(two_chains))]  # best_first and "unary": one config
    assert stored[2]["tree"].startswith("two_chains-") and spec_of(configs[2], 0).tree == as_rule(two_chains)
    plain = expand_grid(**GRID)[1]
    assert stored_config(plain) == plain and "tree" not in plain  # the stores' existing configs: keys unchanged
    walk = expand_grid(**{**GRID, "temperature": [0.8]}, accept_rule=[target_matching])[1]
    assert stored_config(walk)["accept_rule"] == "target"


def test_a_sweep_keeps_a_rules_rows_apart_and_an_edited_rule_gets_new_ones(tmp_path):
    class Fake:
        arch, digests = "mla", {"target": "t", "drafter": "d"}
    store, calls = ResultsStore("s", tmp_path), []

    def runner(cfg, prompt, pair):
        calls.append(cfg["tree"])
        return {"tokens": [1], "acceptance_lengths": [1], "tree_sizes": [1], "timings": {"total": 1.0}, "tau": 1.0}

    def wider(draft, root_token, budget, depth=3):
        return two_chains(draft, root_token, budget, depth)
    wider.__name__ = "two_chains"  # the same name, another definition: another key
    for rule in (two_chains, two_chains, wider):
        run_sweep(expand_grid(**GRID, tree=["unary", rule]), [0], store, {"mla": Fake()}, runner=runner,
                  progress=False)
    assert calls[:2] == [None, "unary"] and calls[2] is two_chains and calls[3] is wider  # stored rows skipped
    trees = [r["config"]["tree"] for r in ResultsStore("s", tmp_path).rows()]
    assert trees == [None, "unary", plugin_key(as_rule(two_chains)), plugin_key(as_rule(wider))]


@pytest.fixture(scope="module")
def mla():
    return load_pair("mla")


def test_the_study_runs_a_rule_beside_ddtree_and_reads_its_rows(tmp_path, mla):
    frame = yt.run([two_chains], {"mla": mla}, [0], ResultsStore("your_tree", tmp_path), budgets=(4,),
                   max_new_tokens=8, progress=False)
    s = yt.summary(frame, [two_chains])
    assert set(s.rule) == {"AR", "DDTree", "two_chains"} and (s.matches_ar == 1).all()
    table = yt.tau_table(s)
    assert list(table.columns) == ["DDTree", "two_chains"] and table.index.tolist() == [("mla", 4)]
    assert yt.reading(s).startswith("mla, budget 4: DDTree tau ")
    tree, path, labels = yt.first_round(two_chains, mla, 4)
    assert tree.num_nodes == 4 and path[0] == 0 and len(labels) == 5


def test_power_text_names_the_smallest_caught_bias_and_the_largest_missed():
    power = pd.DataFrame({"epsilon": [0.25, 0.5, 1.0], "samples": 480, "positions": 3,
                          "overrides_per_run": [0.2, 0.4, 0.7], "p_value": [0.2, 1e-9, 1e-40],
                          "caught": [False, True, True]})
    text = yt.power_text(power)
    assert "with probability 0.5 (0.40 overrides per run; p = 1e-09)" in text and "misses one at 0.25" in text
    assert "caught none" in yt.power_text(power.assign(caught=False))


def test_the_lossless_table_is_stored_per_rule(monkeypatch):
    seen = []
    monkeypatch.setattr(yt, "lossless_row", lambda rule, pair, ids, **kw: {"rule": yt.display_name(rule), **kw})

    class Fake:
        digests = {"target": "t"}

    def cache(name, key, compute):
        seen.append((name, key["rule"], key["samples"]))
        return compute()
    table = yt.lossless_table([two_chains], Fake(), range(2), cache=cache, samples=48)
    assert table.rule.tolist() == ["DDTree", "two_chains"]
    assert seen == [("your_tree_lossless", "unary", 48), ("your_tree_lossless", plugin_key(as_rule(two_chains)), 48)]
    assert yt.readable(pd.DataFrame({"p_value": [1e-74]})).p_value.tolist() == ["1e-74"]
