"""The Mamba1 family (``families.mamba1``, Jamba's ``JambaMambaMixer``) against the stock layer:
the plain step vs the stock full forward and its cache, the fast depth-level ``tree`` vs the
generic ``fork``, a fork node vs ``chain`` over its path, and a committed state written into a
stock cache vs the stock full forward's logits. float64, tiny random models (``build_tiny``).
The checks themselves are the shared family checks of ``helpers`` (relative to each tensor's
max |ref|: the tiny model's mixer outputs and states are ~1e-5..1e-2)."""
import pytest
from helpers import (assert_chain_is_stock, assert_close, assert_fork_is_chain, assert_rel_close, assert_tree_is_fork,
                     commit_then_decode, generator, tiny_case, tree_case)

from ddtree_lab.core.families import mamba1
from ddtree_lab.core.families.tiny import HYBRIDS

CLASSES = [name for name, fam in HYBRIDS.items() if fam == "mamba1"]
T, L = 20, 9  # sequence length, prefill length
STEP_TOL = 1e-10  # relative; our step vs the stock full scan (same casts): ~1e-15 seen; 4e-8 unmirrored
TREE_TOL = 1e-12  # relative; fast tree vs fork: the same arithmetic, batched
# the stock one-token decode kernel (``mamba_selective_state_update``) updates the state in
# float32 even in a float64 run: its mixer output departs from the stock full forward's by ~4e-8
# relative (logits: ~1e-16, the tiny model's mixers barely move its residual stream)
DECODE_TOL = 2e-7


@pytest.fixture(scope="module", params=CLASSES)
def setup(request):
    """``helpers.tiny_case`` of one class over T random tokens."""
    return tiny_case(request.param, mamba1, T)


def test_step_is_stock(setup):
    """chain of the plain step from the stock L-prefill cache == the stock full forward's mixer
    outputs of tokens L..T-1, and its final state == the stock cache after prefilling all T."""
    assert_chain_is_stock(setup, L, STEP_TOL, relative=True)


@pytest.mark.parametrize("kind,budget", [("chain", 12), ("star", 10), ("deep", 19), ("random", 19)])
def test_tree_is_fork(setup, kind, budget):
    """The fast tree (the fork batched by depth level: everything but the recurrence computed once
    for all nodes, then one multiply-add per level from the parents' states) == the generic
    per-node fork: outputs, and commit of every node."""
    case = tree_case(setup, L, kind, budget, generator("mamba1 tree", kind, budget))
    assert_tree_is_fork(kind, mamba1, *case, TREE_TOL, relative=True)


@pytest.mark.parametrize("kind", ["deep", "random"])
def test_fork_node_is_chain(setup, kind):
    """A fork node == chain over its own path root..node (the exactness oracle)."""
    m, h, state, parents = tree_case(setup, L, kind, 19, generator("mamba1 tree", kind, 19))
    assert_fork_is_chain(kind, mamba1, m, h, state, parents, TREE_TOL, relative=True)


@pytest.mark.parametrize("source", ["chain", "tree"])
def test_commit_in_stock_cache(setup, source):
    """The state after tokens L..P-1 (chain's final state, or commit of that path in a tree with
    distractor branches), written into a stock cache prefilled to P whose recurrent states were
    then scrambled, then one stock decode step == the stock full forward's logits at P."""
    P = T - 3
    out, got = commit_then_decode(setup, L, P, source, generator("mamba1 commit", source))
    for i in setup.mixers:  # the tiny model's mixers add ~5e-5 to the residual: check them directly too
        assert_rel_close(f"{source} layer{i} stock decode mixer out at {P}", setup.outs[i][P], got[i], DECODE_TOL)
    assert_close(f"{source} logits at {P}", setup.logits[P], out, DECODE_TOL)


def test_stale_state_is_caught(setup):
    """The control of ``test_commit_in_stock_cache``: leaving the recurrent layers at the
    L-prefill state departs from the full forward by far more than DECODE_TOL."""
    P = T - 3
    err = (commit_then_decode(setup, L, P, "stale", None)[0] - setup.logits[P]).abs().max().item()
    print(f"stale state: max err {err:.3e}")
    assert err > 100 * DECODE_TOL
