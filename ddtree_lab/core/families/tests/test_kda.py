"""KDA family (``families/kda.py``) against the stock ``KimiLinearDeltaAttention``, float64 tiny
models: the plain step is the stock layer, the one-pass tree equals the per-node fork, a fork node
equals the chain over its path, and a committed state written into a stock cache decodes the stock
full forward's next logits.

The stock Kimi path casts to float32 inside (kernels, forget gate, norms, router, softmax, the
cached recurrent state), whatever the model dtype. ``float64_stock`` makes it float64 end to end,
apart from the code under test: in the stock modeling module ``torch.float32`` reads float64, the
forget gate drops its ``.float()`` casts, and the chunked kernel (whose decay mask is cast by
``.float()``) is replaced by the stock recurrent kernel, which runs a whole sequence token by token.
``test_step_is_stock_float32`` checks the shipped stock (chunked prefill, float32 casts) at float32
tolerance.
"""
import contextlib
import types

import pytest
import torch
from helpers import assert_close

import transformers.models.kimi_linear.modeling_kimi_linear as M
from ddtree_lab.core import families
from ddtree_lab.core.families import kda
from ddtree_lab.core.families.tiny import build_tiny
from ddtree_lab.core.tree import ancestor_mask_from_parents

CLASSES = [pytest.param("KimiLinearForCausalLM", id="kimi_linear")]
T, L = 12, 5  # sequence length, prefill length
TOL = 1e-10  # float64, scale-aware (helpers.assert_close)


class _Torch64(types.ModuleType):
    """``torch`` as the stock modeling module sees it under ``float64_stock``: float32 is float64."""
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def _forget_gate64(self, h):
    """``KimiLinearForgetGate.forward`` without its ``.float()`` casts: h [B, T, D] -> [B, T, H, d]."""
    g = (self.f_b_proj(self.f_a_proj(h)) + self.dt_bias).view(*h.shape[:2], -1, self.head_dim)
    return -self.A_log.exp() * torch.where(g > 20.0, g, torch.log(1.0 + torch.exp(g)))


@contextlib.contextmanager
def float64_stock():
    """The stock Kimi-Linear modules compute in the model's dtype while open (see the docstring)."""
    swaps = [(M, "torch", _Torch64("torch")), (M.KimiLinearForgetGate, "forward", _forget_gate64),
             (M, "chunk_kimi_delta_attention", M.recurrent_kimi_delta_attention)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in swaps]
    try:
        for obj, name, fn in swaps:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


def _capture(model, ids):
    """One stock full forward: (logits [T, V], {layer: (mixer input [T, D], mixer output [T, D])})."""
    seen, hooks = {}, []
    for i, (m, _) in families.recurrent_mixers(model).items():
        def hook(mod, args, kwargs, out, i=i):
            seen[i] = (kwargs["hidden_states"][0], out[0])
        hooks.append(m.register_forward_hook(hook, with_kwargs=True))
    try:
        logits = model(ids).logits[0]
    finally:
        for h in hooks:
            h.remove()
    return logits, seen


def _prefill_states(model, ids):
    """{layer: state} of the stock cache after prefilling ids [1, t]."""
    cache = model(ids, use_cache=True).past_key_values
    return {i: families.state_of(fam, cache, i) for i, (_, fam) in families.recurrent_mixers(model).items()}


def _unit_scale(model, seed: int = 0):
    """Redraw every KDA mixer's projections at std fan_in**-0.5 and its conv at std 0.5 (in place):
    O(1) outputs, states and per-channel gate spread (the default init's std 0.02 makes them
    ~1e-2, which the scale-aware tolerance would read as absolute). -> model."""
    gen = torch.Generator().manual_seed(seed)
    for m, _ in families.recurrent_mixers(model).values():
        with torch.no_grad():
            for lin in (m.q_proj, m.k_proj, m.v_proj, m.b_proj, m.g_a_proj, m.g_b_proj, m.o_proj,
                        m.forget_gate.f_a_proj, m.forget_gate.f_b_proj):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * lin.in_features ** -0.5)
            m.conv1d.weight.copy_(torch.randn(m.conv1d.weight.shape, generator=gen) * 0.5)
    return model


@pytest.fixture(scope="module", params=CLASSES)
def case(request):
    """The float64 model, its ids, the full forward's captures and the prefill / full states."""
    model = _unit_scale(build_tiny(request.param))
    ids = torch.randint(3, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), float64_stock():
        logits, seen = _capture(model, ids)
        prefix, full = _prefill_states(model, ids[:, :L]), _prefill_states(model, ids)
    return types.SimpleNamespace(model=model, ids=ids, logits=logits, seen=seen, prefix=prefix, full=full,
                                 mixers=families.recurrent_mixers(model))


def _assert_state(name, ref, out, tol):
    for part in ("conv", "rec"):
        assert ref[part].keys() == out[part].keys()
        for j in ref[part]:
            assert_close(f"{name} {part}[{j}]", ref[part][j], out[part][j], tol)


# ----------------------------------------------------------------------------- 1. the plain step is the stock layer

def test_step_is_stock(case):
    """chain over tokens L.. from the stock prefill state == the stock mixer outputs; its final
    state == the stock cache's after prefilling all T tokens (float64, tol 1e-10)."""
    assert set(case.mixers) == {0, 1, 2} and all(f is kda for _, f in case.mixers.values())
    with torch.no_grad():
        for i, (m, fam) in case.mixers.items():
            h, ref = case.seen[i]
            out, state = families.chain(fam, m, h[L:], case.prefix[i])
            assert_close(f"layer{i} step out", ref[L:], out, TOL)
            _assert_state(f"layer{i} step state", case.full[i], state, TOL)


def test_step_is_stock_float32():
    """The shipped stock (float32 casts, chunked prefill kernel) on a float32 model: the same
    checks at float32 tolerance (1e-5; measured ~1.5e-6, the chunked vs recurrent kernel)."""
    model = _unit_scale(build_tiny("KimiLinearForCausalLM", dtype=torch.float32))
    ids = torch.randint(3, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, seen = _capture(model, ids)
        prefix, full = _prefill_states(model, ids[:, :L]), _prefill_states(model, ids)
        for i, (m, fam) in families.recurrent_mixers(model).items():
            out, state = families.chain(fam, m, seen[i][0][L:], prefix[i])
            assert_close(f"layer{i} float32 step out", seen[i][1][L:], out, 1e-5)
            _assert_state(f"layer{i} float32 step state", full[i], state, 1e-5)


# ----------------------------------------------------------------------------- trees

def _random_parents(kind: str, n: int, gen: torch.Generator) -> torch.Tensor:
    """Parents [n] of a "chain", a "star" or a "deep" random tree (each node's parent among the
    3 nodes before it)."""
    if kind == "chain":
        return torch.arange(-1, n - 1)
    if kind == "star":
        return torch.tensor([-1] + [0] * (n - 1))
    lo = (torch.arange(1, n) - 3).clamp(min=0)
    draw = lo + (torch.rand(n - 1, generator=gen) * (torch.arange(1, n) - lo)).long()
    return torch.cat([torch.tensor([-1]), draw])


def _path(parents: torch.Tensor, i: int) -> list:
    path = [i]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return path[::-1]


TREES = [("chain", 12), ("star", 9), ("deep", 20)]


@pytest.mark.parametrize("kind,n", TREES, ids=[f"{k}{n}" for k, n in TREES])
def test_tree_is_fork(case, kind, n):
    """tree == fork (outputs) and commit(path to every node) == fork's state after that node,
    from the stock prefill state of every KDA layer (float64, tol 1e-11)."""
    gen = torch.Generator().manual_seed(n)
    parents = _random_parents(kind, n, gen)
    anc = ancestor_mask_from_parents(parents)
    h = torch.randn(n, case.model.config.hidden_size, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        for i, (m, fam) in case.mixers.items():
            ref, states = families.fork(fam, m, h, case.prefix[i], parents)
            out, record = fam.tree(m, h, case.prefix[i], parents, anc)
            assert_close(f"layer{i} {kind} tree out", ref, out, 1e-11)
            for node in range(n):
                _assert_state(f"layer{i} {kind} commit {node}", states[node], fam.commit(m, record, _path(parents, node)), 1e-11)


def test_fork_is_chain(case):
    """A fork node == the chain over its own path root..node (out and state), every node of a deep
    random tree (float64, tol 1e-12)."""
    gen = torch.Generator().manual_seed(7)
    parents = _random_parents("deep", 16, gen)
    h = torch.randn(16, case.model.config.hidden_size, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        for i, (m, fam) in case.mixers.items():
            outs, states = families.fork(fam, m, h, case.prefix[i], parents)
            for node in range(16):
                out, state = families.chain(fam, m, h[_path(parents, node)], case.prefix[i])
                assert_close(f"layer{i} fork node {node} out", outs[node], out[-1], 1e-12)
                _assert_state(f"layer{i} fork node {node}", states[node], state, 1e-12)


# ----------------------------------------------------------------------------- 4. model level

def test_commit_decodes_stock(case):
    """The stock cache after prefilling T-1 tokens, its KDA states overwritten with noise then with
    ``commit`` of a tree whose path holds tokens L..T-2, each path node after a random sibling
    (nodes 0, 2, 4, ...; the odd nodes random branches): one stock decode step of token T-1 ==
    the stock full forward's logits at T-1 (float64, tol 1e-10)."""
    P, gen = T - 1 - L, torch.Generator().manual_seed(3)
    path = list(range(0, 2 * P - 1, 2))  # [P]: the accepted path, node 2d at depth d
    parents = torch.tensor([-1] + [2 * (j // 2) for j in range(2 * P - 2)])  # nodes 2d-1, 2d: children of 2d-2
    anc, D = ancestor_mask_from_parents(parents), case.model.config.hidden_size
    with torch.no_grad(), float64_stock():
        cache = case.model(case.ids[:, :T - 1], use_cache=True).past_key_values
        for i, (m, fam) in case.mixers.items():
            h = torch.randn(2 * P - 1, D, generator=gen, dtype=torch.float64)  # branches: random inputs
            h[path] = case.seen[i][0][L:T - 1]
            _, record = fam.tree(m, h, case.prefix[i], parents, anc)
            layer = cache.layers[i]
            for t in (*layer.conv_states.values(), *layer.recurrent_states.values()):
                t.normal_(generator=gen)
            families.write_state(cache, i, fam.commit(m, record, path))
        logits = case.model(case.ids[:, T - 1:], past_key_values=cache, use_cache=True).logits[0, -1]
    assert_close("decode after commit logits", case.logits[T - 1], logits, TOL)
