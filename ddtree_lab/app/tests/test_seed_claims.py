"""Notebook 10's checks and goals can fail (issue 61): each ``claims`` function of the notebook,
fed a right result, holds, and fed a wrong one (what a broken lab would give), fails."""
import pandas as pd
import pytest

from ddtree_lab.app import claims


def _union(formula_off: float = 0.0, shrink: bool = False) -> pd.DataFrame:
    rows = [{"budget": b, "kind": "independent", "layer": 1, "experts": 8 * (1 - 0.75 ** (b + 1)) + formula_off}
            for b in (1, 4, 16)]
    tree = [3.0, 4.5, 4.0 if shrink else 6.0]
    rows += [{"budget": b, "kind": "tree", "layer": 1, "experts": e} for b, e in zip((1, 4, 16), tree)]
    return pd.DataFrame(rows + [{"budget": 0, "kind": "token", "layer": 1, "experts": 2.0}])


def _published(err=0.1, calibrations=(1, 1)) -> pd.DataFrame:
    rows = []
    for stack, cal in zip(("a", "b"), calibrations):
        rows += [{"stack": stack, "calibration": i < cal, "error": 0.0 if i < cal else err} for i in range(3)]
    return pd.DataFrame(rows)


def _projection(top=512) -> pd.DataFrame:
    return pd.DataFrame([{"model": "K", "accelerator": "h200", "method": "ddtree", "stack": s, "routing": r, "budget": b}
                         for s in ("x", "y") for r in ("independent", "measured") for b in (1, 64, top)])


def _auto(expert=1.0, nodes=0.99) -> pd.DataFrame:
    return pd.DataFrame({"policy": ["best fixed (8)", "node-count auto (mean of the trees)", "expert-aware auto"],
                         "vs_best_fixed": [1.0, nodes, expert]})


def _measured(expert=120.0, match=1.0) -> pd.DataFrame:
    return pd.DataFrame({"budget": ["auto", "auto", 16], "cost": ["nodes", "experts", "nodes"],
                         "tokens_per_s": [115.0, expert, 119.0], "matches_ar": [1.0, match, 1.0]})


CASES = {
    "independent-exact": (claims.independent_union_exact, (_union(), 8, 2), (_union(0.1), 8, 2)),
    "union-grows": (claims.union_grows_with_the_tree, (_union(),), (_union(shrink=True),)),
    "lossless": (claims.expert_auto_lossless, (_measured(),), (_measured(match=0.9),)),
    "one-calibration": (claims.one_calibration_per_stack, (_published(),), (_published(calibrations=(1, 2)),)),
    "reaches-512": (claims.projection_reaches, (_projection(), "K", "h200"), (_projection(256), "K", "h200")),
    "within-25": (claims.predictions_within, (_published(0.2),), (_published(0.3),)),
    "auto-projected": (lambda p: claims.expert_auto_projected(p, "K"), (_auto(),), (_auto(0.96, 0.95),)),
    "auto-below-nodes": (lambda p: claims.expert_auto_projected(p, "K"), (_auto(),), (_auto(0.98, 0.99),)),
    "auto-measured": (claims.expert_auto_measured, (_measured(),), (_measured(110.0),)),
    "seed-budget": (lambda s: claims.seed_budget(s, "K"),
                    (pd.DataFrame({"routing": ["independent", "measured"], "best_budget": [128, 256]}),),
                    (pd.DataFrame({"routing": ["independent", "measured"], "best_budget": [4, 8]}),)),
    "rebuilt": (claims.projection_rebuilt, (pd.DataFrame({"predicted_speedup": [1.0, 2.0]}),
                                            pd.DataFrame({"predicted_speedup": [1.0, 2.000001]})),
                (pd.DataFrame({"predicted_speedup": [1.0, 2.0]}), pd.DataFrame({"predicted_speedup": [1.0, 2.1]}))),
}


def _ok(result) -> bool:
    return bool(result.met if isinstance(result, claims.Goal) else result.ok)


@pytest.mark.parametrize("name", sorted(CASES))
def test_right_holds_and_wrong_fails(name):
    check, right, wrong = CASES[name]
    good, bad = check(*right), check(*wrong)
    print(good, bad, sep="\n")
    assert _ok(good) and not _ok(bad)
