"""The round recorder and the calibration tables (docs/background.md sections 3 and 5).

Rows == draft nodes of every round; accepted nodes per round == acceptance length - 1;
reached / accepted are consistent with the accept walk; every table's counts add up to the
reached nodes and its rates lie in [0, 1].
"""
import math

import pandas as pd
import pytest
import torch

from ddtree_lab.experiments.studies import calibration
from ddtree_lab.core import decode
from helpers import toy_pair


@pytest.fixture(scope="module")
def runs():
    """(recorder, generations): a few short greedy DDTree generations on gdn-toy."""
    target, drafter = toy_pair("gdn-toy")
    rec = calibration.RoundRecorder()
    gens = []
    for p, (prompt, budget) in enumerate([([1, 2, 3, 4, 5], 80), ([7], 100), ([9, 8, 7, 6, 5, 4, 3], 16)]):
        rec.start(prompt, prompt=p)
        gens.append(decode.generate(target, drafter, prompt, method="ddtree", budget=budget, block_size=6,
                                    max_new_tokens=12, on_round=rec))
    return rec, gens


def test_rows_and_acceptance(runs):
    rec, gens = runs
    f = rec.frame()
    sizes = [s for g in gens for s in g.tree_sizes]
    lengths = [a for g in gens for a in g.acceptance_lengths]
    print(f"{len(sizes)} rounds, {len(f)} nodes, {int(f.accepted.sum())} accepted")
    assert list(f.columns) == ["prompt", "round", "node", "parent", "depth", "rank", "main_path", "q_cond",
                               "q_path", "reached", "accepted", "in_loop"]
    assert f.in_loop.notna().all()  # every round tagged (told each prompt); the tags: the next test
    assert len(f) == sum(sizes) and rec.rounds == len(sizes)
    assert f.groupby("round").size().tolist() == sizes
    assert f.groupby("round").accepted.sum().tolist() == [a - 1 for a in lengths]
    assert f.accepted.sum() > 0, "the test never exercised an accepted draft token"


def test_reached_accepted_consistency(runs):
    f = runs[0].frame()
    assert not (f.accepted & ~f.reached).any()
    assert f[f.depth == 1].reached.all()
    assert (f.groupby(["round", "depth"]).accepted.sum() <= 1).all()  # one path per round
    assert f.q_cond.between(0, 1).all() and (f.q_path <= f.q_cond + 1e-12).all()
    siblings = f.groupby(["round", "parent"])
    assert (siblings["rank"].min() == 0).all()
    rank0 = f[f["rank"] == 0].set_index(["round", "parent"]).q_cond
    assert rank0.sort_index().equals(siblings.q_cond.max().sort_index())  # rank 0 = most probable sibling


def test_sibling_ranks_by_conditional_probability():
    parents = [-1, 0, 0, 1, 0, 1]
    q = [1.0, 0.2, 0.5, 0.3, 0.2, 0.6]
    assert calibration.sibling_ranks(parents, q) == [0, 1, 0, 1, 2, 0]


@pytest.mark.parametrize("by", ["depth", "rank", "bins"])
def test_calibration_table(runs, by):
    f = runs[0].frame()
    t = calibration.calibration_table(f, by=by)
    print(t.to_string())
    assert t["count"].sum() == f.reached.sum()
    assert t.predicted.between(0, 1).all() and t.observed.between(0, 1).all()
    if by == "bins":
        assert (t.predicted >= t.bin_low - 1e-12).all() and (t.predicted <= t.bin_high + 1e-12).all()
    if by == "rank":
        assert set(t["rank"]) <= {"0", "1", "2", "3+"}


def test_surrogate_gap_and_tau_cost(runs):
    rec, gens = runs
    f = rec.frame()
    gap = calibration.surrogate_gap(f)
    print(gap.to_string())
    assert gap.group.tolist() == ["rank0", "rank1+"] and gap["count"].sum() == f.reached.sum()
    tau = calibration.tau_cost(f)
    print(tau)
    observed = sum(sum(g.acceptance_lengths) - len(g.acceptance_lengths) for g in gens) / rec.rounds
    assert tau["rounds"] == rec.rounds and math.isclose(tau["observed"], observed)
    assert tau["predicted"] > 0
    with pytest.raises(ValueError, match="by must be"):
        calibration.calibration_table(f, by="width")


def test_recorder_on_a_hand_made_round():
    from ddtree_lab.core.tree import build_tree
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(0)) * 3
    tree = build_tree(logits, 2, 12)
    deepest = int(tree.depths.argmax())
    path = tree.path_to(deepest)
    rec = calibration.RoundRecorder(run="x")
    rec(decode.Round(logits, tree, torch.zeros(len(tree), 16), torch.zeros(len(tree), dtype=torch.long),
                     path, 0))
    f = rec.frame()
    assert f.node.tolist() == list(range(1, len(tree))) and (f.run == "x").all()
    assert torch.allclose(torch.tensor(f.q_path.to_numpy()), tree.log_weights[1:].exp())
    assert f.accepted.tolist() == [i in path for i in range(1, len(tree))]
    assert f.reached.tolist() == [int(tree.parents[i]) in path for i in range(1, len(tree))]
    assert (f.depth > 1).any() and f[f.accepted]["rank"].eq(0).all()  # the deepest path follows rank 0


def test_continuation_after_sibling_vs_main_path():
    # one round: root -> a (rank 0), b (rank 1); a -> c; b -> d, e. Accepted path root, b, d.
    # round 2: root -> a (rank 0) -> c (rank 0), accepted root, a (c rejected).
    rows = [dict(round=0, node=1, parent=0, depth=1, rank=0, main_path=True, q_cond=0.6, q_path=0.6, reached=True, accepted=False),
            dict(round=0, node=2, parent=0, depth=1, rank=1, main_path=False, q_cond=0.3, q_path=0.3, reached=True, accepted=True),
            dict(round=0, node=3, parent=1, depth=2, rank=0, main_path=True, q_cond=0.9, q_path=0.54, reached=False, accepted=False),
            dict(round=0, node=4, parent=2, depth=2, rank=0, main_path=False, q_cond=0.5, q_path=0.15, reached=True, accepted=True),
            dict(round=0, node=5, parent=2, depth=2, rank=1, main_path=False, q_cond=0.2, q_path=0.06, reached=True, accepted=False),
            dict(round=1, node=1, parent=0, depth=1, rank=0, main_path=True, q_cond=0.8, q_path=0.8, reached=True, accepted=True),
            dict(round=1, node=2, parent=1, depth=2, rank=0, main_path=True, q_cond=0.7, q_path=0.56, reached=True, accepted=False)]
    t = calibration.continuation_table(pd.DataFrame(rows)).set_index(["depth", "group"])
    # node 4 (depth 2) has no children: left out; node 2 went on (predicted 0.5 + 0.2); round-1 node 1 did not (0.7)
    assert t.index.tolist() == [(1, "after_sibling"), (1, "main_path")]
    assert t.loc[(1, "after_sibling")].tolist() == pytest.approx([0.7, 1.0, 1])
    assert t.loc[(1, "main_path")].tolist() == pytest.approx([0.7, 0.0, 1])
    pooled = calibration.continuation_summary(pd.concat([t.reset_index(), t.reset_index().assign(depth=2, count=3)]))
    print(pooled)
    assert pooled.set_index("group").loc["main_path"].tolist() == pytest.approx([0.7, 0.0, 4])
    assert pooled.group.tolist() == ["after_sibling", "main_path"]


def test_rounds_are_tagged_by_the_loop_state_of_their_output():
    """Rounds are tagged as ``loops.round_loop_flags`` tags them from the generation: by the
    output before them (a prompt that repeats is given text: the first round never loops); a
    recorder without the prompt tags None, left out outside loops."""
    from ddtree_lab.train.loops import round_loop_flags
    target, drafter = toy_pair("gdn-toy")
    rec = calibration.RoundRecorder()
    flags = []
    for p, prompt in enumerate([[5, 6, 7] * 20, list(range(3, 60))]):
        rec.start(prompt, prompt=p)
        g = decode.generate(target, drafter, prompt, method="ddtree", budget=8, block_size=4, max_new_tokens=10,
                            on_round=rec)
        flags += round_loop_flags(prompt, g.tokens, g.acceptance_lengths)
    f = rec.frame()
    per_round = f.groupby(["prompt", "round"]).in_loop.first().tolist()
    print("recorded:", per_round, "\nexpected:", flags)
    assert per_round == flags and not flags[0]
    assert len(calibration.outside_loops(f)) == (~f.in_loop.astype(bool)).sum()
    assert len(calibration.outside_loops(f, looping=True)) == f.in_loop.astype(bool).sum()
    assert calibration.continuation_table(f.iloc[:0]).empty
    bare = calibration.RoundRecorder()
    decode.generate(target, drafter, [1, 2, 3], method="ddtree", budget=4, block_size=4, max_new_tokens=4, on_round=bare)
    assert bare.frame().in_loop.isna().all() and calibration.outside_loops(bare.frame()).empty
    with pytest.raises(ValueError, match="no in_loop column"):
        calibration.outside_loops(f.drop(columns="in_loop"))
