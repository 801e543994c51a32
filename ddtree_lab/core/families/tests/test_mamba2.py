"""The Mamba2 (SSD) family (``families/mamba2.py``) against the stock transformers mixers, float64.

The stock mixers cast to float32 inside (``A_log.float()``, ``mamba2_chunk_scan``'s
``hidden_states.float()``, the gated norms' ``.to(torch.float32)``), and the stock cache then
keeps the SSM state in float32. ``stock_float64`` keeps float64 tensors float64 through those
casts (and the eager attention's float32 softmax) while the stock decoder layers run, so the
stock code itself is the float64 truth. (The shared ``harness.float64_harness`` does not list
these modules: it swaps classes and module functions, and the casts here sit inside the mixer's
own forward, ``A = -torch.exp(self.A_log.float())``, and in the SSM kernels, which only the
Tensor-method swaps around each decoder layer reach; the gated norms also gate before the norm,
unlike the harness's.) Its decode then equals its full forward to ~1e-16 for every class, given
explicit ``position_ids`` (``BambaModel.forward`` restarts them at 0 on every call: a stock bug on
the attention side, not the mixer's), and given softplus(dt + dt_bias) >= time_step_min (the
``-dtclamp`` cases: the stock decode skips the full forward's clamp; the step follows the full
forward). Tolerances: 1e-11 (scale-aware, ``assert_close``); errors seen: ~1e-15. The checks
themselves are the shared family checks of ``helpers``.
"""
import contextlib
import functools

import pytest
import torch
import transformers as hf
from helpers import (assert_chain_is_stock, assert_close, assert_fork_is_chain, assert_tree_is_fork,
                     decode_from_states, mixer_case, prefill_states, tree_parents)

from ddtree_lab.core import families
from ddtree_lab.core import verify
from ddtree_lab.core.families import mamba2
from ddtree_lab.core.families.tiny import tiny_config
from ddtree_lab.core.tree import ancestor_mask_from_parents

TOL = 1e-11
# case id -> (class, config overrides, dt_bias low on half the heads so (D)'s clamp is active)
CASES = {
    "NemotronH": ("NemotronHForCausalLM", {}, False),
    "NemotronH-dtclamp": ("NemotronHForCausalLM", {}, True),
    "FalconH1": ("FalconH1ForCausalLM", {}, False),
    "FalconH1-norm": ("FalconH1ForCausalLM", {"mamba_rms_norm": True, "mamba_norm_before_gate": True}, False),
    "FalconH1-gatenorm-g2": ("FalconH1ForCausalLM", {"mamba_rms_norm": True, "mamba_norm_before_gate": False,
                                                     "mamba_n_groups": 2, "ssm_in_multiplier": 0.7,
                                                     "ssm_multipliers": [0.9, 1.2, 0.8, 1.1, 1.3]}, False),
    "GraniteMoeHybrid": ("GraniteMoeHybridForCausalLM", {}, False),
    "Bamba": ("BambaForCausalLM", {}, False),
    "Bamba-g2": ("BambaForCausalLM", {"mamba_n_groups": 2}, False),
    "Zamba2": ("Zamba2ForCausalLM", {}, False),
    "Zamba2-dtclamp": ("Zamba2ForCausalLM", {}, True),
}
L, T = 5, 21  # prefill length, sequence length (T > chunk_size 16: the full forward crosses chunks)


# ----------------------------------------------------------------------------- stock in float64

_FLOAT, _TO, _SOFTMAX = torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax


def _keep_float(self, *args, **kwargs):
    return self if self.dtype is torch.float64 else _FLOAT(self, *args, **kwargs)


def _keep_to(self, *args, **kwargs):
    """Tensor.to where a float64 tensor asked for float32 stays float64."""
    if self.dtype is torch.float64:
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if kwargs.get("dtype") is torch.float32:
            kwargs["dtype"] = torch.float64
    return _TO(self, *args, **kwargs)


def _keep_softmax(x, *args, dtype=None, **kwargs):
    """The eager attention's ``softmax(..., dtype=torch.float32)`` in float64 for float64 input."""
    return _SOFTMAX(x, *args, dtype=torch.float64 if x.dtype is torch.float64 else dtype, **kwargs)


@contextlib.contextmanager
def stock_float64(model):
    """While open, the stock decoder layers of ``model`` keep float64 through their float32 casts."""
    def wrap(forward):
        def run(*args, **kwargs):
            torch.Tensor.float, torch.Tensor.to = _keep_float, _keep_to
            torch.nn.functional.softmax = _keep_softmax
            try:
                return forward(*args, **kwargs)
            finally:
                torch.Tensor.float, torch.Tensor.to = _FLOAT, _TO
                torch.nn.functional.softmax = _SOFTMAX
        return run
    for layer in model.model.layers:
        layer.forward = wrap(layer.forward)
    try:
        yield
    finally:
        for layer in model.model.layers:
            del layer.forward


# ----------------------------------------------------------------------------- models and runs

def _redraw(m, gen, dt_low):
    """Mixer weights of O(1) outputs and slow decays (the stock init gives tiny ones)."""
    H, D, I = m.num_heads, m.hidden_size, m.intermediate_size
    with torch.no_grad():
        m.in_proj.weight.copy_(torch.randn(m.in_proj.weight.shape, generator=gen, dtype=torch.float64) / D ** 0.5)
        m.out_proj.weight.copy_(torch.randn(m.out_proj.weight.shape, generator=gen, dtype=torch.float64) / I ** 0.5)
        m.conv1d.weight.copy_(0.5 * torch.randn(m.conv1d.weight.shape, generator=gen, dtype=torch.float64))
        m.A_log.copy_(torch.empty(H, dtype=torch.float64).uniform_(0.05, 0.5, generator=gen).log())
        m.dt_bias.copy_(torch.empty(H, dtype=torch.float64).uniform_(-1.0, 0.5, generator=gen))
        if dt_low:  # softplus(dt + dt_bias) ~ 1e-4 < time_step_min = 1e-3 on half the heads
            m.dt_bias[: H // 2] = -9.0
        m.D.copy_(torch.randn(H, generator=gen, dtype=torch.float64))
        if hasattr(m.norm, "weight"):
            m.norm.weight.copy_(1 + 0.2 * torch.randn(I, generator=gen, dtype=torch.float64))


@functools.lru_cache(maxsize=None)
def model_of(case: str):
    """The tiny float64 model of ``case`` with redrawn mixer weights, eval mode."""
    name, overrides, dt_low = CASES[case]
    cfg = tiny_config(name)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    model = getattr(hf, name)(cfg).to(torch.float64).eval()
    gen = torch.Generator().manual_seed(1)
    for m, fam in verify.recurrent_mixers(model).values():
        assert fam is mamba2
        _redraw(m, gen, dt_low)
    return model


def ids_of(case):
    return torch.randint(3, 64, (1, T + 2), generator=torch.Generator().manual_seed(len(case)))


@functools.lru_cache(maxsize=None)
def stock_runs(case: str):
    """``helpers.mixer_case`` of one stock full forward over T+2 tokens, and {layer: the stock
    state after prefilling L tokens}."""
    model, ids = model_of(case), ids_of(case)
    with stock_float64(model):
        return mixer_case(model, ids, mamba2), prefill_states(model, ids[:, :L])


# ----------------------------------------------------------------------------- 1. step = stock

@pytest.mark.parametrize("case", list(CASES))
def test_step_chain_is_stock(case):
    """chain from the stock cache after L tokens = the stock full forward's mixer outputs of
    tokens L..T-1, and its final state = the stock cache after T tokens (tol 1e-11)."""
    run = stock_runs(case)[0]
    with stock_float64(run.model):
        assert_chain_is_stock(run, L, TOL, t=T)


@pytest.mark.parametrize("case", ["NemotronH-dtclamp", "Zamba2-dtclamp"])
def test_stock_decode_skips_dt_clamp(case):
    """Stock quirk pinned: with softplus(dt + dt_bias) < time_step_min the stock one-token decode
    (``mamba2_selective_state_update``, no dt_limit) departs from the stock full forward
    (``mamba2_chunk_scan`` clamps); the step follows the full forward (test above)."""
    model, ids = model_of(case), ids_of(case)
    m = verify.recurrent_mixers(model)[0][0]
    assert torch.nn.functional.softplus(m.dt_bias).min() < m.time_step_limit[0]
    logits = stock_runs(case)[0].logits
    with torch.no_grad(), stock_float64(model):
        cache = model(ids[:, :L], use_cache=True).past_key_values
        decoded = torch.stack([model(ids[:, t:t + 1], past_key_values=cache, position_ids=torch.tensor([[t]]),
                                     use_cache=True).logits[0, -1] for t in range(L, T)])
    err = (decoded - logits[L:T]).abs().max().item()
    print(f"{case}: stock decode vs stock full forward, max abs logit err {err:.2e}")
    assert err > 1e-6


# ----------------------------------------------------------------------------- 2, 3. tree = fork = chain

def _random_state(m, gen) -> dict:
    """A random state of mixer m: conv [C, K], rec [H, P, N], float64."""
    conv = torch.randn(m.conv_dim, m.conv_kernel_size, generator=gen, dtype=torch.float64)
    rec = torch.randn(m.num_heads, m.head_dim, m.ssm_state_size, generator=gen, dtype=torch.float64)
    return {"conv": {0: conv}, "rec": {0: rec}}


TREE_CASES = ["NemotronH-dtclamp", "FalconH1-gatenorm-g2", "GraniteMoeHybrid", "Bamba-g2", "Zamba2"]


@pytest.mark.parametrize("case", TREE_CASES)
def test_tree_is_fork(case):
    """tree = fork (outputs), commit = fork's per-node state (every node), on 4 trees of 20 nodes
    (a chain, a star, a deep random tree: each node's parent among the 3 before it, a bushy one);
    and each fork node = chain over its own path (the exactness oracle)."""
    m = verify.recurrent_mixers(model_of(case))[0][0]
    gen = torch.Generator().manual_seed(7)
    state = _random_state(m, gen)
    trees = {kind: tree_parents(kind, 20, gen) for kind in ("chain", "star", "deep", "bushy")}
    for kind, parents in trees.items():
        h = torch.randn(20, m.hidden_size, generator=gen, dtype=torch.float64)
        assert_tree_is_fork(f"{case} {kind}", mamba2, m, h, state, parents, TOL)
        nodes = (19, int(torch.randint(20, (1,), generator=gen)))
        assert_fork_is_chain(f"{case} {kind} fork", mamba2, m, h, state, parents, TOL, nodes=nodes)


def test_step_leaves_state_alone():
    """step, tree and commit never write into the state they are given."""
    m = verify.recurrent_mixers(model_of("Bamba"))[0][0]
    gen = torch.Generator().manual_seed(3)
    state = _random_state(m, gen)
    copy = {k: {0: v[0].clone()} for k, v in state.items()}
    h, parents = torch.randn(6, m.hidden_size, generator=gen, dtype=torch.float64), torch.tensor([-1, 0, 1, 0, 3, 3])
    with torch.no_grad():
        mamba2.step(m, h[0], state)
        _, record = mamba2.tree(m, h, state, parents, ancestor_mask_from_parents(parents))
        mamba2.commit(m, record, [0, 3, 5])
    for k in state:
        assert torch.equal(state[k][0], copy[k][0])


# ----------------------------------------------------------------------------- 4. model level

def _distracted_tree(n_main: int, gen: torch.Generator) -> tuple[torch.Tensor, list]:
    """Parents of a tree whose path ``main`` (n_main nodes from the root) carries the real tokens,
    with 1-2 distractor nodes (a child, sometimes a grandchild) off every main node."""
    parents, main = [-1], [0]
    for _ in range(1, n_main):
        parents.append(main[-1])  # distractor sibling of the next main node
        if torch.rand(1, generator=gen) < 0.5:
            parents.append(len(parents) - 1)  # and its child
        main.append(len(parents))
        parents.append(main[-2])
    return torch.tensor(parents), main


@pytest.mark.parametrize("case", list(CASES))
def test_commit_then_stock_decode(case):
    """Per recurrent layer, the stock mixer inputs of tokens L..T-1 as the accepted path of a tree
    with distractors, from the stock state after L tokens: the path's tree outputs = the stock
    mixer outputs; its committed states, written into a stock cache after T tokens, then one
    stock decode step (token T) = the stock full forward's logits at T; and so does a stock
    2-token continuation (T, T+1: the chunked path). The dtclamp cases skip the one-token
    decode: there the stock decode departs from the full forward (``test_stock_decode_skips_dt_clamp``).
    Every stock call passes its positions (``BambaModel`` would start them at 0)."""
    run, start = stock_runs(case)
    model, ids, ins, outs, logits = run.model, run.ids, run.ins, run.outs, run.logits
    gen = torch.Generator().manual_seed(11)
    parents, main = _distracted_tree(T - L, gen)
    anc, committed = ancestor_mask_from_parents(parents), {}
    for i, (m, fam) in verify.recurrent_mixers(model).items():
        h = torch.randn(len(parents), m.hidden_size, generator=gen, dtype=torch.float64)
        h[main] = ins[i][L:T]
        with torch.no_grad():
            out, record = fam.tree(m, h, start[i], parents, anc)
        assert_close(f"{case} layer{i} tree path out", outs[i][L:T], out[main], TOL)
        committed[i] = fam.commit(m, record, main)
    with stock_float64(model):
        if not CASES[case][2]:
            one = decode_from_states(model, ids, T, committed, positions=True)[0]
            assert_close(f"{case} logits at T (stock decode)", logits[T], one[0], TOL)
        two = decode_from_states(model, ids, T, committed, n=2, positions=True)[0]
    assert_close(f"{case} logits at T, T+1 (stock chunked)", logits[T:T + 2], two, TOL)
