"""The family study (notebook 11): the leak per node, the resumable tau rows and their table, the
cost of each one-pass tree form, and the stored tables the notebook reads."""
import pandas as pd
import pytest

from ddtree_lab import generate

from ddtree_lab.experiments.studies import families as fs


def test_the_leak_per_node_is_exact_before_the_first_branch_and_leaks_after():
    leak = fs.leak_by_node(("Lfm2ForCausalLM", "NemotronHForCausalLM"))
    before, after = leak[~leak.after_branch], leak[leak.after_branch]
    assert set(leak.family) == {"short_conv", "mamba2"} and len(after) and len(before)
    assert before.max_dlogit.max() <= 1e-6
    assert (after.groupby("class").max_dlogit.max() > 1e-4).all()


def test_the_tau_table_pools_rounds_and_prompts_from_the_store(tmp_path):
    store = fs.ResultsStore("families", tmp_path)
    config = fs._config("kda", "exact", 4, 8)
    metrics = dict(acceptance_lengths=[3, 1, 4], looping=[False, False, True], matches_ar=True,
                   matches_full_forward=True, **{"class": "KimiLinearForCausalLM"})
    models = {"target": "t", "drafter": "d"}
    store.add(config, 0, metrics, models)
    store.add(config, 1, {**metrics, "matches_ar": False}, models)
    store.add(fs._config("kda", "exact", 4, 16), 0, metrics, models)   # another length: not pooled
    got = fs.tau_table(store, new_tokens=8).iloc[0]
    assert got.tau == pytest.approx(16 / 6) and got.tau_outside_loops == pytest.approx(8 / 4)
    assert got.prompts == 2 and got.matches_ar == 0.5 and got.matches_full_forward == 1.0
    assert store.key(config, 1, models) in store.done_keys()


def test_family_pair_names_the_families_it_has():
    with pytest.raises(ValueError, match="family must be one of"):
        fs.family_pair("mamba3")


def test_the_cost_of_a_tree_form_is_timed_beside_the_stock_mixer():
    cost = fs.family_cost(("Lfm2ForCausalLM",), budgets=(4,), repeats=2, width=32)
    assert list(cost.columns[:3]) == ["family", "class", "budget"] and (cost.tree_ms > 0).all()


@pytest.mark.parametrize("path", [fs.LEAK_CSV, fs.TAU_CSV, fs.COST_CSV], ids=lambda p: p.name)
def test_the_stored_tables_cover_what_the_issue_asks(path):
    table = pd.read_csv(path)
    assert {"git", "machine", "date", "load_avg_1min", "threads"} <= set(table.columns)
    if path == fs.TAU_CSV:
        assert {"family", "class", "budget", "mode", "tau", "tau_outside_loops", "prompts", "matches_ar",
                "matches_full_forward"} <= set(table)
        assert set(table.family) >= {"gdn", "kda", "mamba2", "short_conv"}
        assert set(table.budget) >= {1, 4, 16, 64, 256} and set(table["mode"]) == {"naive", "exact"}
    if path == fs.LEAK_CSV:
        assert table["class"].nunique() == 12


def test_nemotron_hs_stock_decode_departs_from_its_full_forward_and_ddtree_follows_the_full_forward():
    """On the trained Mamba2 target (Nemotron-H) the stock AR decode departs from greedy decoding by
    the stock full forward: its decode step skips the dt clamp (``time_step_limit``) its chunked
    prefill applies, and trained heads fall below it. The exact tree verify follows the full
    forward token for token."""
    pair = fs.family_pair("mamba2")
    ids = pair.prompt_ids(2)
    truth = fs.full_forward_greedy(pair.target, ids, 40)
    ar = generate(pair.target, None, ids, method="ar", max_new_tokens=40).tokens
    tree = generate(pair.target, pair.drafter, ids, method="ddtree", budget=4, block_size=fs.BLOCK, max_new_tokens=40)
    assert ar != truth and tree.tokens == truth
    assert min(float(m.time_step_limit[0]) for m, _ in fs.verify.recurrent_mixers(pair.target).values()) > 0
