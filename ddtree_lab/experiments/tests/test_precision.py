"""Exact masking on MLA + MoE (and GDN wy) up to rounding, per precision (DDTree, arXiv
2604.12989, section 4; docs/background.md section 4).

float64 under the harness: tree == per-path full forward to 1e-12 and identical MoE routing;
float32 stock: 1e-5; bfloat16: errors below half of every top-2 margin (so no argmax can
flip), and the tree's argmax equals chain verification's at every node (measured: all).
"""
import functools

import pandas as pd
import pytest
import torch

from ddtree_lab.experiments.studies import precision
from ddtree_lab.core.models import build_target
from ddtree_lab.core.tree import build_tree

PRESETS = ("mla-toy", "gdn-toy")
TOL = {(torch.float64, True): 1e-12, (torch.float32, False): 1e-5}


@functools.lru_cache(maxsize=None)
def make_case(preset):
    """(preset, float32 model, prefix, a branched 20-node tree)."""
    g = torch.Generator().manual_seed(4)
    prefix = torch.randint(0, 64, (6,), generator=g).tolist()
    tree = build_tree(torch.randn(5, 64, generator=g) * 2, 9, 20)
    return preset, build_target(preset), prefix, tree


@pytest.fixture(params=PRESETS)
def case(request):
    return make_case(request.param)


@pytest.mark.parametrize("dtype,harness", list(TOL), ids=["f64-harness", "f32-stock"])
def test_tree_matches_per_path_forward(case, dtype, harness):
    name, model, prefix, tree = case
    f = precision.per_node_errors(model, prefix, tree, dtype, harness)
    print(f"{name} {dtype} harness={harness}: max err {f.err.max():.2e}, flips {int(f.flip.sum())}")
    assert list(f.columns) == ["node", "depth", "dtype", "harness", "err", "argmax_tree", "argmax_path",
                               "margin", "flip"]
    assert len(f) == len(tree) and f.err.max() < TOL[dtype, harness] and not f.flip.any()
    assert next(model.parameters()).dtype == torch.float32  # the original is never cast


def test_bf16_rounding_cannot_flip_the_argmax(case):
    name, model, prefix, tree = case
    f = precision.per_node_errors(model, prefix, tree, torch.bfloat16, harness=False)
    flips = precision.near_tie_flips(f)
    print(f"{name} bf16: max err {f.err.max():.2e}, min margin {f.margin.min():.2e}, flips {len(flips)}")
    assert torch.isfinite(torch.tensor(f.err.to_numpy(dtype=float))).all() and f.err.max() < 0.05
    assert (f.margin > 2 * f.err).all()  # every top-2 gap exceeds what rounding can move
    assert flips.empty


def test_routing_identical_in_float64():
    name, model, prefix, tree = make_case("mla-toy")  # routing exists on the MoE model only
    r = precision.routing_identical(model, prefix, tree, dtype=torch.float64, harness=True)
    moe_layers = model.config.num_hidden_layers - model.config.first_k_dense_replace
    print(f"{name}: {len(r)} (node, layer) pairs, min score gap {r.score_gap.min():.2e}")
    assert list(r.columns) == ["node", "layer", "experts_tree", "experts_path", "same_experts", "score_gap"]
    assert len(r) == len(tree) * moe_layers and r.same_experts.all() and (r.score_gap >= 0).all()
    assert all(len(e) == model.config.num_experts_per_tok for e in r.experts_tree)


def test_near_tie_flips_selects_flips():
    f = pd.DataFrame({"node": [0, 1, 2], "err": [1e-3, 2e-3, 1e-3], "margin": [0.5, 1e-3, 0.2],
                      "flip": [False, True, False]})
    flips = precision.near_tie_flips(f)
    assert flips.node.tolist() == [1] and flips.margin_over_err.tolist() == [0.5]


def test_chain_vs_tree_bf16(case):
    name, model, prefix, tree = case
    f = precision.chain_vs_tree_bf16(model, prefix, tree)
    rates = f[["tree_eq_chain", "tree_eq_ar", "chain_eq_ar"]].mean().round(3).to_dict()
    print(f"{name} bf16 agreement: {rates}")
    assert list(f.columns) == ["node", "depth", "argmax_tree", "argmax_chain", "argmax_ar", "tree_eq_chain",
                               "tree_eq_ar", "chain_eq_ar", "margin"]
    assert len(f) == len(tree) and (f.margin >= 0).all()
    assert f.tree_eq_chain.all(), f[~f.tree_eq_chain]  # measured: every node, both toys


@pytest.mark.parametrize("mode", ["fork", "wy"])
def test_commit_state_error_is_rounding_only(mode):
    from ddtree_lab.core import harness
    from ddtree_lab.experiments.studies.precision import commit_state_error
    model = build_target("gdn-toy", dtype=torch.float64)
    tree = build_tree(torch.randn(4, 64) * 2, 3, 12)
    path = tree.path_to(int(tree.depths.argmax()))
    with harness.float64_harness():
        err = commit_state_error(model, [1, 2, 3, 4, 5], tree, path, mode)
    print(err)
    assert max(err.values()) < 1e-12
