"""The short-conv family (``families.short_conv``: LFM2's and LFM2-MoE's gated short conv) against
the stock layers: the plain step vs the stock full forward and its cache, the fast ancestor-window
``tree`` vs the generic ``fork``, a fork node vs ``chain`` over its path, and a committed state
written into a stock cache vs the stock full forward's logits. float64, tiny random models
(``build_tiny``: kernel ``conv_L_cache`` = 3, no conv bias). The checks themselves are the shared
family checks of ``helpers`` (relative to each tensor's max |ref|: the tiny model's mixer outputs
are ~1e-4)."""
import pytest
from helpers import (assert_chain_is_stock, assert_close, assert_fork_is_chain, assert_step_keeps_input_state,
                     assert_tree_is_fork, commit_then_decode, generator, some_nodes, stock_cache, tiny_case, tree_case)

from ddtree_lab.core import families
from ddtree_lab.core.families import short_conv
from ddtree_lab.core.families.tiny import HYBRIDS

CLASSES = [name for name, fam in HYBRIDS.items() if fam == "short_conv"]
T, L = 20, 9  # sequence length, prefill length
STEP_TOL = 1e-12  # relative; step vs the stock full forward (F.conv1d, another summation order): ~1e-16 seen
TREE_TOL = 1e-12  # relative; tree vs fork: the same windows, gathered at once
DECODE_TOL = 1e-10  # logits of a stock decode from a written state vs the stock full forward (~1e-16 seen)


@pytest.fixture(scope="module", params=CLASSES)
def setup(request):
    """``helpers.tiny_case`` of one class over T random tokens."""
    return tiny_case(request.param, short_conv, T)


def test_stock_cache_has_no_recurrent_state(setup):
    """The stock cache layer holds one conv state [1, D, K] and no recurrent state, so
    the generic ``families.read_state`` gives {"conv": {0: [D, K]}, "rec": {}}."""
    cache = stock_cache(setup.model, setup.ids[:, :L])
    for i, (m, fam) in setup.mixers.items():
        assert cache.layers[i].recurrent_states == {0: None}
        state = families.state_of(fam, cache, i)
        assert state["rec"] == {} and state["conv"][0].shape == (m.conv.in_channels, m.conv_kernel_size)


def test_step_is_stock(setup):
    """chain of the plain step from the stock L-prefill cache == the stock full forward's mixer
    outputs of tokens L..T-1, and its final state == the stock cache after prefilling all T."""
    assert_chain_is_stock(setup, L, STEP_TOL, relative=True)


def test_step_keeps_input_state(setup):
    """The step returns a fresh state and leaves its input untouched."""
    assert_step_keeps_input_state(setup, L)


@pytest.mark.parametrize("kind,budget", [("chain", 12), ("star", 10), ("deep", 19), ("random", 19)])
def test_tree_is_fork(setup, kind, budget):
    """The fast ancestor-window tree (every node's conv window, its last K inputs along its own
    path, gathered at once) == the generic per-node fork: outputs, and commit (a window lookup)
    of every node."""
    gen = generator("short_conv tree", kind, budget)
    assert_tree_is_fork(kind, short_conv, *tree_case(setup, L, kind, budget, gen), TREE_TOL, relative=True)


@pytest.mark.parametrize("kind", ["deep", "random"])
def test_fork_node_is_chain(setup, kind):
    """A fork node == chain over its own path root..node (the exactness oracle)."""
    m, h, state, parents = tree_case(setup, L, kind, 19, generator("short_conv tree", kind, 19))
    nodes = some_nodes(parents, 1)  # node 1: a path shorter than K
    assert_fork_is_chain(kind, short_conv, m, h, state, parents, TREE_TOL, nodes, relative=True)


@pytest.mark.parametrize("source", ["chain", "tree"])
def test_commit_in_stock_cache(setup, source):
    """The state after tokens L..P-1 (chain's final state, or commit of that path in a tree with
    distractor branches), written into a stock cache prefilled to P whose conv states were then
    scrambled, then one stock decode step == the stock full forward's logits at P."""
    P = T - 3
    out, _ = commit_then_decode(setup, L, P, source, generator("short_conv commit", source))
    assert_close(f"{source} logits at {P}", setup.logits[P], out, DECODE_TOL)


def test_stale_state_is_caught(setup):
    """The control of ``test_commit_in_stock_cache``: leaving the conv states at the L-prefill
    departs from the full forward by far more than DECODE_TOL."""
    P = T - 3
    err = (commit_then_decode(setup, L, P, "stale", None)[0] - setup.logits[P]).abs().max().item()
    print(f"stale state: max err {err:.3e}")
    assert err > 100 * DECODE_TOL
