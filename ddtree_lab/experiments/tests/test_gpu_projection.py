"""The round-cost model on named accelerators (issue 61 items 2-3; a projection): the public
shapes against their published parameter counts, the roofline on hand-computed cases, the
calibration reproducing its one published point, the stored table's structure (one fitted
point per stack, K2.6 on H200 to budget 512, independent unions equal to the formula, the
published drafter's block), the fixed cost per forward, and the validation against the trivial
baseline (issue 69)."""
import numpy as np
import pandas as pd
import pytest

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.studies import acceptance_model as am
from ddtree_lab.experiments.studies import expert_union as eu
from ddtree_lab.experiments.studies import gpu_projection as gp
from ddtree_lab.experiments.studies.gpu_specs import (ACCELERATORS, DRAFTERS, PUBLISHED, STACKS, TARGETS)


@pytest.mark.parametrize("name,total,active", [("Qwen3-8B", 8.19e9, None), ("Qwen3-Coder-30B-A3B", 30.5e9, 3.3e9),
                                               ("Qwen3.6-27B", 27e9, None), ("Kimi K2.6", 1.03e12, 32e9)],
                         ids=lambda v: str(v))
def test_shapes_give_the_published_parameter_counts(name, total, active):
    m = TARGETS[name]
    print(name, m.total_params() / 1e9, m.active_params() / 1e9)
    assert m.total_params() == pytest.approx(total, rel=0.03)
    if active:
        assert m.active_params() == pytest.approx(active, rel=0.1)


def _floor(model="Qwen3-8B", acc="h200", gpus=1):
    return gp.Setting(TARGETS[model], DRAFTERS[model], ACCELERATORS[acc], gpus, STACKS["kernel-floor"])


def test_one_token_is_bandwidth_bound_and_a_big_tree_compute_bound():
    s = _floor()
    m, acc = s.model, s.acc
    weights = m.dense_params() * m.bytes_per_param
    one = float(gp.forward_seconds(s, 1, 0))
    assert weights / (gp.ETA_BANDWIDTH * acc.bandwidth) <= one <= 1.1 * weights / (gp.ETA_BANDWIDTH * acc.bandwidth)
    big = float(gp.forward_seconds(s, 4096, 0))
    assert big == pytest.approx(float(gp.target_flops(m, 4096)) / (gp.ETA_COMPUTE * acc.bf16_flops))


def test_moe_bytes_grow_with_the_union_and_gpus_divide_the_time():
    s = _floor("Kimi K2.6", "h200", 8)
    assert float(gp.forward_seconds(s, 16, 384)) > 5 * float(gp.forward_seconds(s, 16, 8))
    assert float(gp.forward_seconds(_floor("Kimi K2.6", "h200", 4), 1, 8)) == pytest.approx(2 * float(gp.forward_seconds(s, 1, 8)))


def test_chain_union_independent_equals_the_formula():
    m = TARGETS["Kimi K2.6"]
    assert gp.chain_union(m, 16, gp.INDEPENDENT) == pytest.approx(float(eu.independent_union(384, 8, 16)))
    assert gp.chain_union(TARGETS["Qwen3-8B"], 16, gp.INDEPENDENT) == 0.0


def test_a_fixed_cost_is_added_to_every_forward():
    s = _floor("Kimi K2.6", "h200", 8)
    f = gp.Setting(s.model, s.drafter, s.acc, s.gpus, s.stack, 0.0, 2e-3)
    assert float(gp.forward_seconds(f, 9, 40)) == pytest.approx(float(gp.forward_seconds(s, 9, 40)) + 2e-3)
    assert gp.draft_seconds(f) == pytest.approx(gp.draft_seconds(s) + 2e-3)
    assert float(gp.round_seconds(f, 9, 40)) == pytest.approx(float(gp.round_seconds(s, 9, 40)) + 4e-3)


def test_the_published_kimi_drafter():
    from ddtree_lab.experiments.studies.gpu_specs import CHAIN_TAU, KIMI_TAU_BAND
    assert DRAFTERS["Kimi K2.6"].block == 8 and "block_size 8" in DRAFTERS["Kimi K2.6"].source
    tau, source = CHAIN_TAU["Kimi K2.6"]
    assert min(KIMI_TAU_BAND) <= tau <= max(KIMI_TAU_BAND) and "Kimi-K2.5-DFlash" in source
    assert min(KIMI_TAU_BAND) >= 3.6 and max(KIMI_TAU_BAND) <= 5.5 and all(KIMI_TAU_BAND.values())


def _inputs() -> gp.Inputs:
    return gp.Inputs({"path": 0.5, "sibling": 0.6}, {"path": 0.3, "sibling": 0.4}, am.Shape("t", 0.5, 0.25, ""))


@pytest.mark.parametrize("stack", ["transformers-eager", "lucebox"])
def test_calibration_reproduces_its_one_published_point(stack):
    inputs = _inputs()
    st = STACKS[stack]
    overhead = gp.calibrate(st, inputs.fitted, inputs.shape)
    point = PUBLISHED[st.calibration]
    got = gp.predict(point, gp.setting_of(point, st, overhead), inputs.fitted, inputs.shape)
    print(stack, overhead, got)
    assert overhead > 0 and got["speedup"] == pytest.approx(point.speedup, rel=1e-6)


def test_a_projected_curve_stays_below_its_cap_and_loads_the_union_of_its_tree():
    s = _floor("Kimi K2.6", "h200", 8)
    c = gp.curve(s, gp.INDEPENDENT, 5.3, _inputs().shape)
    trees = c[c.method == "ddtree"].set_index("budget")
    assert (trees.tau[trees.index >= 2] < trees.index[trees.index >= 2] + 1).all() and (c.block_size == 8).all()
    assert np.allclose(trees.experts_per_layer, eu.independent_union(384, 8, trees.index + 1), rtol=1e-9)
    assert float(c[c.method == "dflash"].tau.iloc[0]) == 5.3


def test_the_stored_projection():
    table = pd.read_csv(RESULTS_DIR / gp.PROJECTION_CSV)
    pub = table[table.published_speedup.notna()]
    assert (pub.groupby("stack").calibration.sum() == 1).all() and (~pub.calibration).sum() >= 3
    kimi = table[(table.model == "Kimi K2.6") & (table.accelerator == "h200") & (table.method == "ddtree")]
    assert set(kimi["stack"]) == {"transformers-eager", "kernel-floor"}
    assert set(kimi.routing) == {"independent", gp.FITTED} and (kimi.block_size == 8).all()
    assert (kimi.groupby(["stack", "routing"]).budget.max() == 512).all()
    assert (kimi.tau[kimi.budget >= 2] < kimi.budget[kimi.budget >= 2] + 1).all()
    ind = kimi[kimi.routing == "independent"]
    assert np.allclose(ind.experts_per_layer, eu.independent_union(384, 8, ind.budget + 1), rtol=1e-4)
    assert set(gp.COLUMNS[:9]) <= set(table.columns) and "block_size" in table


def test_the_stored_validation():
    """'validated' exactly where the cost model alone beats the baseline; the floor not validated."""
    from ddtree_lab.app import claims
    check = pd.read_csv(RESULTS_DIR / gp.VALIDATION_CSV)
    assert claims.validated_only_where_better(check).ok
    assert len(check[check.verdict == "fitted"]) == sum(s.calibration is not None for s in STACKS.values())
