"""KDA family (``families/kda.py``) against the stock ``KimiLinearDeltaAttention``, float64 tiny
models: the plain step is the stock layer, the one-pass tree equals the per-node fork, a fork node
equals the chain over its path, and a committed state written into a stock cache decodes the stock
full forward's next logits (the shared family checks of ``helpers``).

The stock Kimi path casts to float32 inside (kernels, forget gate, norms, router, softmax, the
cached recurrent state), whatever the model dtype. ``float64_stock`` makes it float64 end to end,
apart from the code under test: ``harness.float64_harness`` swaps the norms, the router, the eager
softmax and the forget gate for dtype-preserving versions; what no class or function swap reaches
is swapped here: the mixer's own forward casts the recurrent state ``.to(torch.float32)`` before
the cache, and the kernels cast their inputs, so in the stock modeling module ``torch.float32``
reads float64 (a module-wide stand-in the shared harness does not take: it would upcast a float32
model too), and the chunked kernel (whose decay mask is cast by ``.float()``) is replaced by the
stock recurrent kernel, which runs a whole sequence token by token.
``test_step_is_stock_float32`` checks the shipped stock (chunked prefill, float32 casts) at float32
tolerance.
"""
import contextlib
import types

import pytest
import torch
from helpers import (assert_chain_is_stock, assert_close, assert_fork_is_chain, assert_tree_is_fork,
                     commit_then_decode, mixer_case, prefill_states, tree_parents)

import transformers.models.kimi_linear.modeling_kimi_linear as M
from ddtree_lab.core import families, harness
from ddtree_lab.core import verify
from ddtree_lab.core.families import kda
from ddtree_lab.core.families.tiny import build_tiny

CLASSES = [pytest.param("KimiLinearForCausalLM", id="kimi_linear")]
T, L = 12, 5  # sequence length, prefill length
TOL = 1e-10  # float64, scale-aware (helpers.assert_close)


class _Torch64(types.ModuleType):
    """``torch`` as the stock modeling module sees it under ``float64_stock``: float32 is float64."""
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def float64_stock():
    """The stock Kimi-Linear modules compute in the model's dtype while open (see the docstring)."""
    swaps = [(M, "torch", _Torch64("torch")), (M, "chunk_kimi_delta_attention", M.recurrent_kimi_delta_attention)]
    with harness.float64_harness(), harness.swapped(swaps):
        yield


def _unit_scale(model, seed: int = 0):
    """Redraw every KDA mixer's projections at std fan_in**-0.5 and its conv at std 0.5 (in place):
    O(1) outputs, states and per-channel gate spread (the default init's std 0.02 makes them
    ~1e-2, which the scale-aware tolerance would read as absolute). -> model."""
    gen = torch.Generator().manual_seed(seed)
    for m, _ in verify.recurrent_mixers(model).values():
        with torch.no_grad():
            for lin in (m.q_proj, m.k_proj, m.v_proj, m.b_proj, m.g_a_proj, m.g_b_proj, m.o_proj,
                        m.forget_gate.f_a_proj, m.forget_gate.f_b_proj):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * lin.in_features ** -0.5)
            m.conv1d.weight.copy_(torch.randn(m.conv1d.weight.shape, generator=gen) * 0.5)
    return model


@pytest.fixture(scope="module", params=CLASSES)
def case(request):
    """(``helpers.mixer_case`` of the float64 model under ``float64_stock``, {layer: the stock
    L-prefill state})."""
    model = _unit_scale(build_tiny(request.param))
    ids = torch.randint(3, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    with float64_stock():
        return mixer_case(model, ids, kda), prefill_states(model, ids[:, :L])


# ----------------------------------------------------------------------------- 1. the plain step is the stock layer

def test_step_is_stock(case):
    """chain over tokens L.. from the stock prefill state == the stock mixer outputs; its final
    state == the stock cache's after prefilling all T tokens (float64, tol 1e-10)."""
    setup, _ = case
    assert set(setup.mixers) == {0, 1, 2}
    with float64_stock():
        assert_chain_is_stock(setup, L, TOL)


def test_step_is_stock_float32():
    """The shipped stock (float32 casts, chunked prefill kernel) on a float32 model: the same
    checks at float32 tolerance (1e-5; measured ~1.5e-6, the chunked vs recurrent kernel)."""
    model = _unit_scale(build_tiny("KimiLinearForCausalLM", dtype=torch.float32))
    ids = torch.randint(3, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
    assert_chain_is_stock(mixer_case(model, ids, kda), L, 1e-5)


# ----------------------------------------------------------------------------- trees

TREES = [("chain", 12), ("star", 9), ("deep", 20)]


@pytest.mark.parametrize("kind,n", TREES, ids=[f"{k}{n}" for k, n in TREES])
def test_tree_is_fork(case, kind, n):
    """tree == fork (outputs) and commit(path to every node) == fork's state after that node,
    from the stock prefill state of every KDA layer (float64, tol 1e-11)."""
    setup, prefix = case
    gen = torch.Generator().manual_seed(n)
    parents = tree_parents(kind, n, gen)
    h = torch.randn(n, setup.model.config.hidden_size, generator=gen, dtype=torch.float64)
    for i, (m, fam) in setup.mixers.items():
        assert_tree_is_fork(f"layer{i} {kind}", fam, m, h, prefix[i], parents, 1e-11)


def test_fork_is_chain(case):
    """A fork node == the chain over its own path root..node (out and state), every node of a deep
    random tree (float64, tol 1e-12)."""
    setup, prefix = case
    gen = torch.Generator().manual_seed(7)
    parents = tree_parents("deep", 16, gen)
    h = torch.randn(16, setup.model.config.hidden_size, generator=gen, dtype=torch.float64)
    for i, (m, fam) in setup.mixers.items():
        assert_fork_is_chain(f"layer{i} fork", fam, m, h, prefix[i], parents, 1e-12, nodes=range(16))


# ----------------------------------------------------------------------------- 4. model level

def test_commit_decodes_stock(case):
    """The stock cache after prefilling T-1 tokens, its KDA states overwritten with noise then with
    ``commit`` of a tree whose path holds tokens L..T-2, each path node after a random sibling
    (``helpers.branched``): one stock decode step of token T-1 == the stock full forward's logits
    at T-1 (float64, tol 1e-10)."""
    setup, _ = case
    with float64_stock():
        logits, _ = commit_then_decode(setup, L, T - 1, "tree", torch.Generator().manual_seed(3))
    assert_close("decode after commit logits", setup.logits[T - 1], logits, TOL)
