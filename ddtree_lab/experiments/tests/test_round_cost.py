"""The round-cost study: the floor does the verify's work (same logits on an attention-only
target), a state is a real round of the loop, and the phase table reads the bench's timers."""
import pandas as pd
import pytest
import torch
from transformers import DynamicCache

from ddtree_lab.core import harness
from ddtree_lab.core import verify as verify_mod
from ddtree_lab.core.tree import build_tree
from ddtree_lab.core.verify import prefill, verify
from ddtree_lab.experiments.studies import round_cost
from helpers import assert_close, toy_pair


def test_the_floor_scores_what_verify_scores_on_an_attention_target():
    """The floor is a fair floor only if it computes the same thing: its logits equal verify's."""
    target, _ = toy_pair("mla-toy")
    target = target.double()
    seq = [3, 9, 27, 17, 51, 25]
    tree = build_tree(torch.randn(4, target.config.vocab_size, generator=torch.Generator().manual_seed(0)) * 3,
                      seq[-1], 12)
    with harness.float64_harness():
        cache, _ = prefill(target, seq[:-1])
        stock = DynamicCache(config=target.config)
        target(torch.as_tensor(seq[:-1])[None], past_key_values=stock, use_cache=True)
        floor = round_cost._floor_forward(target, stock, tree, len(seq) - 1).logits[0]
        assert_close("floor-vs-verify", verify(target, cache, tree).logits, floor, 1e-12)


def test_the_floor_pairs_time_the_verify_on_a_cache_as_the_loop_holds_it(monkeypatch):
    """The lab's side of a floor pair is the loop's steady round: its buffers grow at the
    warm-up verify only (a fresh copy per repeat would grow every buffer at every verify),
    and each verify is forgotten, so every repeat verifies the same committed rows."""
    from ddtree_lab.core.spec import gdn_mode
    target, drafter = toy_pair("mla-toy")
    growths, grown = [], verify_mod.grown
    monkeypatch.setattr(verify_mod, "grown", lambda *a: growths.append(a[1:]) or grown(*a))
    seq = [3, 9, 27, 17, 51, 25]
    tree = build_tree(torch.randn(4, target.config.vocab_size, generator=torch.Generator().manual_seed(0)) * 3,
                      seq[-1], 12)
    with torch.no_grad():
        out = round_cost._time_pair(target, seq, tree, tuple(drafter.cfg.target_layer_ids), gdn_mode("wy"), 6)
    assert len(growths) == 2 * target.config.num_hidden_layers  # keys and values of every layer, once
    assert out["lab_ms"] > 0 and out["floor_ms"] > 0 and out["ratio"] == out["ratio"]


def test_round_states_are_the_loops_own_rounds():
    target, drafter = toy_pair("mla-toy")
    pair = type("Pair", (), {"target": target, "drafter": drafter, "arch": "mla"})()
    states = round_cost.round_states(pair, [1, 2, 3, 4], 8, block_size=4, max_new_tokens=12, every=1)
    assert states and states[0][0] == [1, 2, 3, 4]
    for (seq, tree), (nxt, _) in zip(states, states[1:]):
        assert tree.tokens[0] == seq[-1] and len(nxt) > len(seq)  # the root is the last committed token


def test_phase_table_reads_milliseconds_per_round():
    metrics = lambda total: {"timings": {**dict.fromkeys(round_cost.PHASES, 0.001), "total": total},
                             "acceptance_lengths": [2, 3], "tokens": [1] * 5,
                             "forwards": {"prefill": 0.002, "target": 0.01, "drafter": 0.004}}
    rows = [{"arch": "mla", "method": m, "budget": b, "gdn_mode": "wy", "temperature": 0.0, "block_size": 8,
             "max_new_tokens": 5, "accept_rule": "rejection", "prompt": p, "_metrics": metrics(0.02 * (p + 1))}
            for m, b in (("dflash", 7), ("official", 7), ("ddtree", 16)) for p in range(3)]
    t = round_cost.phase_table(pd.DataFrame(rows)).set_index("method")
    assert t.loc["dflash", "verify_ms"] == pytest.approx(0.5) and t.loc["dflash", "total_ms"] == pytest.approx(20)
    assert t.loc["official", "verify_ms"] != t.loc["official", "verify_ms"]  # no phases: NaN
    assert t.loc["ddtree", "rounds"] == 6
    # the forwards, every loop alike, per round: target 10 ms / 2, drafter 4 ms / 2, and the rest of
    # the median prompt's total (40 ms) after the prefill and both: (40 - 16) / 2
    for method in ("dflash", "official"):
        assert t.loc[method, ["target_fwd_ms", "drafter_fwd_ms", "rest_ms"]].tolist() == pytest.approx([5, 2, 12])


def test_the_forward_clock_times_every_call_of_each_named_module_and_leaves_no_hook():
    from ddtree_lab.experiments.plumbing.measure import ForwardClock
    inner = torch.nn.Linear(3, 3)
    outer = torch.nn.Sequential(inner, torch.nn.ReLU())
    with ForwardClock({"outer": outer, "other": torch.nn.Identity()}) as clock:
        outer(torch.ones(3))
        outer(torch.ones(3))
    outer(torch.ones(3))  # after the block: not timed
    assert len(clock.calls["outer"]) == 2 and clock.calls["other"] == [] and min(clock.calls["outer"]) >= 0
    assert not outer._forward_hooks and not outer._forward_pre_hooks


def test_the_forward_clock_times_a_method_called_outside_the_forwards_and_restores_it():
    from ddtree_lab.experiments.plumbing.measure import ForwardClock
    model = torch.nn.Linear(3, 3)
    with ForwardClock({"model": model}, {"extra": (model, "extra_repr")}) as clock:
        text = model.extra_repr()
        model.extra_repr()
    assert text == model.extra_repr() and len(clock.calls["extra"]) == 2 and clock.calls["model"] == []
    assert "extra_repr" not in vars(model)  # the class's method again


@pytest.fixture(scope="module")
def mla_pair():
    from ddtree_lab import load_pair
    return load_pair("mla")


def test_every_loop_of_the_round_cost_run_has_its_forwards_timed_alike(mla_pair):
    """The lab's loops and the reference loop are split the same way, from outside: the prefill
    (the first target call), the other target calls, the drafter's forwards and its logits on
    the target's head (``compute_logits``, both loops), all inside the total; AR calls no
    drafter; no timer is left on the drafter."""
    for cfg in round_cost.round_grid(("mla",), budgets=(4,), max_new_tokens=12):
        m = round_cost.run_with_forwards(cfg, 0, mla_pair)
        f = m["forwards"]
        assert f["prefill"] > 0 and f["target"] > 0, cfg["method"]
        assert (f["drafter"] == 0) == (f["drafter_head"] == 0) == (cfg["method"] == "ar"), cfg["method"]
        assert sum(f.values()) <= m["timings"]["total"], cfg["method"]
    assert "compute_logits" not in vars(mla_pair.drafter.model)


def test_round_table_pairs_every_method_with_the_reference_loop_and_ar():
    """tokens/s over the reference loop's and AR's, paired per prompt: a method twice as fast
    as the reference loop on every prompt reads 2.0 whatever the prompts' own speeds."""
    rows = []
    for p in range(8):
        for method, budget, seconds in (("ar", 0, 4.0), ("official", 7, 2.0), ("dflash", 7, 1.0), ("ddtree", 16, 0.5)):
            secs = seconds * (1 + p)  # prompts of different speeds: only the pairing keeps the ratio exact
            m = {"timings": {**dict.fromkeys(round_cost.PHASES, 0.0), "total": secs}, "tokens": [1] * 10,
                 "acceptance_lengths": [5, 5], "tree_sizes": [budget] * 2,  # forwards: half of every loop's time
                 "forwards": {"prefill": 0.1 * secs, "target": 0.3 * secs, "drafter": 0.1 * secs}}
            rows.append({"arch": "mla", "method": method, "budget": budget, "gdn_mode": "wy", "temperature": 0.0,
                         "block_size": 8, "max_new_tokens": 10, "accept_rule": "rejection", "prompt": p, "tau": 5.0,
                         "run": "r", "_metrics": m})
    t = round_cost.round_table(pd.DataFrame(rows)).set_index("method")
    assert list(t.index) == ["official", "dflash", "ddtree"]
    assert t.loc["dflash", "vs_official"] == pytest.approx(2.0) and t.loc["ddtree", "vs_official"] == pytest.approx(4.0)
    assert t.loc["dflash", "vs_ar"] == pytest.approx(4.0) and t.loc["official", "vs_official"] == pytest.approx(1.0)
    assert t.loc["ddtree", "tau"] == pytest.approx(5.0)
    # the ceiling: a loop's tokens per second of forwards over the reference loop's tokens/s as it runs
    assert t.loc["dflash", "vs_official_fwd"] == pytest.approx(4.0) and t.loc["ddtree", "vs_official_fwd"] == pytest.approx(8.0)
    assert t.loc["official", "vs_official_fwd"] == pytest.approx(2.0)
    note = round_cost.ceiling_note(t.reset_index())
    assert "mla 8.00x" in note and "at budget 16" in note and "wall-clock 4.00x" in note


def test_the_ceiling_is_left_out_where_a_run_has_no_forward_timings():
    """A run stored before the forwards were timed: the ceiling reads '-', the note is empty,
    the wall-clock ratios stand."""
    rows = []
    for p in range(6):
        for method, budget, seconds in (("official", 7, 2.0), ("ddtree", 16, 1.0)):
            m = {"timings": {**dict.fromkeys(round_cost.PHASES, 0.0), "total": seconds * (1 + p)},
                 "tokens": [1] * 10, "acceptance_lengths": [5, 5], "tree_sizes": [budget] * 2}
            rows.append({"arch": "mla", "method": method, "budget": budget, "gdn_mode": "wy", "temperature": 0.0,
                         "block_size": 8, "max_new_tokens": 10, "accept_rule": "rejection", "prompt": p,
                         "run": "r", "_metrics": m})
    t = round_cost.round_table(pd.DataFrame(rows))
    shown = round_cost.round_display(t, archs=("mla",)).set_index("loop")
    assert shown.loc["lab DDTree 16", "ceiling vs reference loop"] == "-"
    assert shown.loc["lab DDTree 16", "vs reference loop"].startswith("2.00x")
    assert round_cost.ceiling_note(t) == ""
