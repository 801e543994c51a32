"""The batch-1 cost model prices the loop's own rounds (issue 69: an isolated verify priced a GDN
tree of 16 nodes like the chain's round, which the loop runs about 1.3x faster, so ``auto``
verified trees where the chain was quicker). Structure only: no timing is asserted."""
from __future__ import annotations

import pytest
import torch

from ddtree_lab.experiments.plumbing import costs
from helpers import toy_pair


def test_the_model_is_assembled_from_the_loops_rounds_without_the_warm_up(monkeypatch):
    """Every budget and the chain are timed as the loop runs them (the chain by method "dflash"),
    in turn each repeat; the warm-up is dropped; draft_s is the median draft + tree share, the
    verify curve the rest of each budget's round, never cheaper for a larger budget."""
    calls = []
    # (round, draft) seconds per config; the warm-up (first call of each) is far off and must not count
    fixed = {("ddtree", 1): (10.0, 3.0), ("ddtree", 4): (9.0, 4.0), ("ddtree", 16): (14.0, 5.0), ("dflash", 1): (8.0, 3.0)}

    def fake(target, drafter, prefix, *, method, budget, block_size, gdn_mode, tokens):
        calls.append((method, budget, tuple(prefix)))
        warm = calls.count((method, budget, tuple(prefix))) == 1
        r, d = fixed[(method, budget)]
        rounds = len(prefix)   # prefix [7] 1 round, [7, 8] 2: pooled, each round costs r
        return {"round": 1e3 if warm else r * rounds, "draft": 1e3 if warm else d * rounds, "rounds": rounds}

    monkeypatch.setattr(costs, "loop_round_seconds", fake)
    cm = costs.measure_cost_model(None, None, [[7], [7, 8]], block_size=8, budgets=(1, 4, 16), repeats=3)
    assert [c[:2] for c in calls[:8:2]] == [("ddtree", 1), ("ddtree", 4), ("ddtree", 16), ("dflash", 1)]  # interleaved
    assert len(calls) == 4 * 4 * 2                                                       # 3 repeats + warm-up, 2 prompts
    assert cm.draft_s == 4.0 and cm.chain_s == 8.0
    assert cm.verify_s == (6.0, 6.0, 10.0)       # 10-4, max(9-4, 6), 14-4
    assert cm.round_seconds(torch.tensor([1, 16])).tolist() == [10.0, 14.0]


def test_a_round_is_the_generation_less_its_prefill_per_round():
    target, drafter = toy_pair("gdn-toy", block_size=4)
    r = costs.loop_round_seconds(target, drafter, list(range(5, 17)), method="ddtree", budget=4, block_size=4,
                                 gdn_mode="wy", tokens=12)
    assert 0 < r["draft"] < r["round"] and r["rounds"] >= 1


@pytest.mark.parametrize("prefixes, expected", [([3, 4], [[3, 4]]), (torch.tensor([3, 4]), [[3, 4]]),
                                                ([[3], [4, 5]], [[3], [4, 5]])])
def test_one_prefix_or_several(prefixes, expected):
    assert costs.as_prefixes(prefixes) == expected


@pytest.mark.parametrize("prefixes", [[], [[1], []]])
def test_no_prefix_is_refused(prefixes):
    with pytest.raises(ValueError, match="prefixes must be"):
        costs.as_prefixes(prefixes)


def test_the_stored_model_is_read_back_and_its_key_says_how_it_was_timed(tmp_path, monkeypatch):
    target, drafter = toy_pair("gdn-toy", block_size=4)
    made = costs.CostModel((1, 2), (0.01, 0.02), 0.003, 0.012)
    monkeypatch.setattr(costs, "measure_cost_model", lambda *a, **k: made)
    assert costs.cost_model(target, drafter, [1, 2], block_size=4, directory=tmp_path) == made
    monkeypatch.setattr(costs, "measure_cost_model", lambda *a, **k: pytest.fail("measured twice"))
    assert costs.cost_model(target, drafter, [1, 2], block_size=4, directory=tmp_path) == made
    assert len(list(tmp_path.glob("cost-*.json"))) == 1
