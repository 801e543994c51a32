"""The round-cost model on named accelerators (issue 61 items 2-3; a projection): the public
shapes against their published parameter counts, the roofline on hand-computed cases, the
calibration reproducing its one published point, the stored table's structure (one fitted
point per stack, K2.6 on H200 to budget 512, independent unions equal to the formula), and the
projected expert-aware ``auto`` equal to node-count ``auto`` when routing is independent."""
import numpy as np
import pandas as pd
import pytest

from ddtree_lab.common import RESULTS_DIR
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


def test_tau_ratio_interpolates_and_extrapolates_in_log_budget():
    shape = {1: 0.4, 16: 1.0, 32: 1.05, 64: 1.1, 128: 1.2, 256: 1.3}
    assert gp.tau_ratio(shape, 16) == pytest.approx(1.0)
    assert gp.tau_ratio(shape, 8) == pytest.approx(0.4 + 0.6 * 3 / 4)
    assert gp.tau_ratio(shape, 1024) > 1.3
    assert gp.capped_tau(5.0, 1, 16) == 2.0 and gp.capped_tau(20.0, 512, 16) == 16.0


def _inputs(rhos=None) -> gp.Inputs:
    trees = [[-1, 0, 0, 1, 1, 2, 3, 3, 0, 4, 5, 6, 7, 8, 9, 10, 11], [-1] + list(range(16))]
    gains = [list(np.linspace(0.9, 0.1, 16)), list(np.geomspace(0.9, 0.2, 16))]
    cases = pd.DataFrame({"case": [0, 1], "_metrics": [{"parents": t, "gains": g} for t, g in zip(trees, gains)]})
    shape = {1: 0.4, 4: 0.7, 16: 1.0, 32: 1.05, 64: 1.1, 128: 1.2, 256: 1.3}
    return gp.Inputs(cases, rhos or {"path": 0.5, "sibling": 0.7}, shape)


@pytest.mark.parametrize("stack", ["transformers-eager", "lucebox"])
def test_calibration_reproduces_its_one_published_point(stack):
    inputs = _inputs()
    st = STACKS[stack]
    overhead = gp.calibrate(st, inputs.measured, inputs.trees, inputs.shape)
    point = PUBLISHED[st.calibration]
    got = gp.predict(point, gp.setting_of(point, st, overhead), inputs.measured, inputs.trees, inputs.shape)
    print(stack, overhead, got)
    assert overhead > 0 and got["speedup"] == pytest.approx(point.speedup, rel=1e-6)


def test_auto_projection_priced_by_experts_equals_node_count_under_independent_routing():
    inputs = _inputs({"path": 0.0, "sibling": 0.0})
    s = _floor("Kimi K2.6", "h200", 8)
    policies = gp.auto_projection(s, inputs, 6.49, anchor=8).set_index("policy")["tokens_per_s"]
    print(policies)
    assert policies["expert-aware auto"] == pytest.approx(policies["node-count auto (independent profile)"])


def test_the_stored_projection():
    table = pd.read_csv(RESULTS_DIR / gp.PROJECTION_CSV)
    pub = table[table.published_speedup.notna()]
    assert (pub.groupby("stack").calibration.sum() == 1).all() and (~pub.calibration).sum() >= 3
    kimi = table[(table.model == "Kimi K2.6") & (table.accelerator == "h200") & (table.method == "ddtree")]
    assert set(kimi["stack"]) == {"transformers-eager", "kernel-floor"} and set(kimi.routing) == {"independent", "measured"}
    assert (kimi.groupby(["stack", "routing"]).budget.max() == 512).all()
    ind = kimi[kimi.routing == "independent"]
    assert np.allclose(ind.experts_per_layer, eu.independent_union(384, 8, ind.budget + 1), rtol=1e-4)
    assert set(gp.COLUMNS[:9]) <= set(table.columns)
