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


def _bounds(pays_at=(0.5, 1.0), cells=2) -> pd.DataFrame:
    rows = [{"fixed_ms": f, "routing": r, "chain_tau": t, "tree_gain": g, "budget_64_plus_pays": f in pays_at}
            for f in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0) for r in ("i", "p", "f") for t in (3.6, 5.3)[:cells]
            for g in ("lab", "pub")]
    return pd.DataFrame(rows)


def _unions(held=0.10, other=0.20) -> pd.DataFrame:
    return pd.DataFrame({"fit": ["laguna-8", "laguna-8", "laguna-8", "toy"], "model": ["L", "L", "G", "L"],
                         "calibration": [True, False, False, False], "error": [0.0, held, other, 0.9]})


def _chain(vs=(0.97, 1.0), match=1.0) -> pd.DataFrame:
    return pd.DataFrame({"arch": ["gdn", "mla"], "config": "ddtree-auto", "vs_best": vs, "vs_best_paired": vs,
                         "vs_best_lo": 0.9, "vs_best_hi": 1.1, "best_rival": "chain", "matches_ar": match})


def _validation(verdict="validated", floor="not validated") -> pd.DataFrame:
    return pd.DataFrame({"stack": ["a", "a", "kernel-floor"], "verdict": ["fitted", verdict, floor],
                         "cost_only_error": [0.0, 0.01, float("nan")], "baseline_error": [0.0, 0.05, float("nan")]})


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
    "auto-measured": (claims.expert_auto_measured, (_measured(),), (_measured(110.0),)),
    "seed-large-budgets": (claims.seed_large_budgets, (_bounds(pays_at=(0.0, 0.5, 1.0, 2.0)),), (_bounds(),)),
    "bounds-cover": (claims.bounds_cover, (_bounds(),), (_bounds(cells=1),)),
    "tau-below-cap": (claims.no_tau_on_cap, (pd.Series([1.9, 2.6, 3.9], index=[1, 2, 4]),),
                      (pd.Series([1.9, 3.0, 3.9], index=[1, 2, 4]),)),
    "unions-predicted": (claims.unions_predicted, (_unions(),), (_unions(other=0.35),)),
    "unions-same-model": (claims.unions_predicted, (_unions(),), (_unions(held=0.16),)),
    "auto-never-loses": (claims.auto_never_loses, (_chain(),), (_chain((0.93, 1.0)),)),
    "auto-lossless": (claims.auto_never_loses, (_chain(),), (_chain(match=0.9),)),
    "validated-where-better": (claims.validated_only_where_better, (_validation(),),
                               (_validation("not validated"),)),
    "floor-not-validated": (claims.validated_only_where_better, (_validation(),), (_validation(floor="validated"),)),
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
