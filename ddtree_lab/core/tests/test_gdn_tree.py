"""Tree GDN modes == per-path sequential recurrence; conventions pinned to transformers Qwen3.5."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_update, torch_recurrent_gated_delta_rule


from ddtree_lab.core.families.gdn import naive as gdn_naive
from ddtree_lab.core.tree import ancestor_windows, chain_parents
from ddtree_lab.core.families.gdn.wy import gated_delta_fork
from ddtree_lab.core.families.gdn.wy import commit_conv_state, gated_delta_wy, normalize_qk, tree_conv
from ddtree_lab.core.families.gdn.naive import gated_delta_chain
from ddtree_lab.core.tree import tree_depths, tree_path
from helpers import TREE_KINDS, assert_close, assert_identical, generator, random_tree

torch.set_num_threads(1)
H, NK, DK, DV, C, K = 4, 2, 8, 12, 10, 4
TOL = {torch.float64: 1e-12, torch.float32: 1e-6}  # float32: measured max 1.2e-7 (printed by the tests)
V = 64  # token ids of the random trees: only their shape (parents) matters here


def make_inputs(n, dtype, seed=0):
    """Realistic post-conv GDN inputs for n nodes: normalised q/k, g <= 0, beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    q, k = normalize_qk(randn(n, NK, DK), randn(n, NK, DK), H)
    g = -F.softplus(randn(n, H))
    beta = torch.sigmoid(randn(n, H))
    return q, k, randn(n, H, DV), g, beta, 0.1 * randn(H, DK, DV)


TREES = [(kind, n) for kind in TREE_KINDS for n in (1, 2, 7, 33, 128)]
TREES += [("chain", 257)]
DTYPES = [torch.float64, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("kind,n", TREES, ids=[f"{kind}{n}" for kind, n in TREES])
def test_fork_and_wy_match_reference(kind, n, dtype):
    parents = random_tree(kind, n - 1, V, generator(kind, n)).parents
    q, k, v, g, beta, S0 = make_inputs(n, dtype, seed=n)
    ref = gdn_naive.gated_delta(q, k, v, g, beta, parents, S0=S0)
    fork, _ = gated_delta_fork(q, k, v, g, beta, parents, depths=tree_depths(parents), S0=S0)
    assert_close(f"fork {kind}{n} {dtype}", ref, fork, TOL[dtype])
    assert_close(f"wy {kind}{n} {dtype}", ref, gated_delta_wy(q, k, v, g, beta, parents, S0=S0), TOL[dtype])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 1, exclude_max=True), max_size=24))
def test_wy_matches_reference_any_tree(fracs):
    parents = torch.tensor([-1] + [int(f * i) for i, f in enumerate(fracs, start=1)])  # parents[i] in [0, i)
    q, k, v, g, beta, S0 = make_inputs(parents.numel(), torch.float64, seed=len(fracs))
    ref = gdn_naive.gated_delta(q, k, v, g, beta, parents, S0=S0)
    assert_close("wy hypothesis tree", ref, gated_delta_wy(q, k, v, g, beta, parents, S0=S0), 1e-12)


def test_fork_states_are_path_final_states():
    parents = random_tree("random", 39, V, generator("fork-states")).parents
    q, k, v, g, beta, S0 = make_inputs(40, torch.float64, seed=3)
    _, states = gated_delta_fork(q, k, v, g, beta, parents, depths=tree_depths(parents), S0=S0)
    for i in range(40):
        path = tree_path(parents, i)
        _, S_path = gated_delta_chain(q[path], k[path], v[path], g[path], beta[path], S0)
        assert torch.allclose(states[i], S_path, rtol=0, atol=1e-13), f"node {i}"
    print("fork states == path replay for 40 nodes")


def test_chain_matches_transformers_recurrent():
    """Our conventions (normalisation, scaling, head expansion, update order) == the real model's."""
    L, gen = 20, torch.Generator().manual_seed(7)
    q_raw, k_raw = (torch.randn(L, NK, DK, generator=gen) for _ in range(2))
    v = torch.randn(L, H, DV, generator=gen)
    g = -F.softplus(torch.randn(L, H, generator=gen))
    beta = torch.sigmoid(torch.randn(L, H, generator=gen))
    S0 = 0.1 * torch.randn(H, DK, DV, generator=gen)
    o_hf, S_hf = torch_recurrent_gated_delta_rule(
        q_raw[None], k_raw[None], v[None], g[None], beta[None], initial_state=S0[None],
        output_final_state=True, use_qk_l2norm_in_kernel=True)
    q, k = normalize_qk(q_raw, k_raw, H)
    o, S = gated_delta_chain(q, k, v, g, beta, S0)
    assert_close("chain vs transformers o", o_hf[0], o, 1e-6)
    assert_close("chain vs transformers S", S_hf[0], S, 1e-6)
    parents = chain_parents(L - 1)
    assert_close("reference vs transformers", o_hf[0], gdn_naive.gated_delta(q, k, v, g, beta, parents, S0=S0), 1e-6)
    assert_close("wy vs transformers", o_hf[0], gated_delta_wy(q, k, v, g, beta, parents, S0=S0), 1e-5)


def test_ancestor_windows_small_tree():
    # 0 -> {1, 2}, 1 -> 3; rows 0..3 are conv state columns, row 4+i is node i
    windows = ancestor_windows(torch.tensor([-1, 0, 0, 1]), 4)
    assert windows.tolist() == [[1, 2, 3, 4], [2, 3, 4, 5], [2, 3, 4, 6], [3, 4, 5, 7]]


@pytest.mark.parametrize("kind", TREE_KINDS)
def test_tree_conv_matches_reference(kind):
    gen = torch.Generator().manual_seed(1)
    parents = random_tree(kind, 29, V, generator("conv", kind)).parents
    x, conv_state, weight = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((30, C), (C, K), (C, K)))
    assert_close(f"tree_conv {kind}", gdn_naive.tree_conv(x, conv_state, weight, parents),
                 tree_conv(x, conv_state, weight, parents), 1e-14)


@pytest.mark.parametrize("prefix", [0, 2, 6], ids=lambda p: f"prefix{p}")
def test_chain_conv_and_commit_match_transformers(prefix, threads):
    """Conv window and conv-state update == transformers' causal_conv1d_update on the same sequence
    (the state update is a copy of the last K inputs: bit-identical, with 1 and 2 threads)."""
    L, gen = 9, torch.Generator().manual_seed(prefix)
    weight = torch.randn(C, K, generator=gen)
    conv_state = torch.zeros(C, K)  # zero-left-padded short prefix, as the cache keeps it
    if prefix:
        conv_state[:, -min(prefix, K):] = torch.randn(C, min(prefix, K), generator=gen)
    x = torch.randn(L, C, generator=gen)
    hf_state = conv_state.clone()[None]
    y_hf = causal_conv1d_update(x.T[None], hf_state, weight, None, "silu")[0].T  # [L, C]; updates hf_state
    assert_close("tree_conv chain vs transformers", y_hf, tree_conv(x, conv_state, weight, chain_parents(L - 1)), 1e-6)
    assert_identical("commit_conv_state vs transformers", hf_state[0], commit_conv_state(conv_state, x))
    assert_identical("commit short path", torch.cat([conv_state[:, 2:], x[:2].T], 1), commit_conv_state(conv_state, x[:2]))


def test_naive_flattening_is_wrong_on_branched_tree():
    parents = random_tree("bushy", 63, V, generator("naive")).parents
    q, k, v, g, beta, S0 = make_inputs(64, torch.float64, seed=5)
    ref = gdn_naive.gated_delta(q, k, v, g, beta, parents, S0=S0)
    err_wy = (gated_delta_wy(q, k, v, g, beta, parents, S0=S0) - ref).abs().max().item()
    err_naive = (gated_delta_wy(q, k, v, g, beta, chain_parents(63), S0=S0) - ref).abs().max().item()
    print(f"naive err {err_naive:.3e}, wy err {err_wy:.3e}")
    assert err_naive > 1e3 * max(err_wy, 1e-300)
    assert err_naive > 1e-2
