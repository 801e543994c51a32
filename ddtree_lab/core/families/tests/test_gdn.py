"""The Gated DeltaNet family (``families/gdn.py``) against the stock transformers layers, float64.

Classes: Qwen3.5 (``build_tiny``), Qwen3.5-MoE and Qwen3-Next (small configs here, linear heads
1 key : 2 value so the key-head expansion and Qwen3-Next's per-group fusion are exercised), and
OLMo-hybrid (``build_tiny``; plus a 1 : 2 variant without negative eigenvalues, so both beta
branches run).

Precision: the stock GDN kernels and gated norms cast to float32 even in a float64 model, so the
float64 comparisons run under ``harness.float64_harness`` (the stock float32 casts swapped for
dtype-preserving twins, and ``adapter.kernel_dtype`` with them). That harness lists no OLMo-hybrid
module (``harness.MODULES``), so ``float64_everywhere`` applies the harness's own per-module swaps
(``harness._module_patches``) to OLMo-hybrid's modeling module too. The harness replaces the stock
chunk / recurrent kernels by the lab's sequential twin, so one test also runs WITHOUT it: the step
(mirroring the float32 casts through ``kernel_dtype``) against the untouched stock kernels.
"""
import contextlib
import importlib

import pytest
import torch
import transformers as hf
from helpers import assert_close

from ddtree_lab.core import families, harness
from ddtree_lab.core.families import gdn
from ddtree_lab.core.families.tiny import build_tiny, tiny_config
from ddtree_lab.core.tree import ancestor_mask_from_parents

OLMO = importlib.import_module("transformers.models.olmo_hybrid.modeling_olmo_hybrid")
LINEAR = dict(linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=1,
              linear_num_value_heads=2, layer_types=["linear_attention"] * 3 + ["full_attention"])
SMALL = dict(vocab_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=32, intermediate_size=64,
             num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
             max_position_embeddings=256, tie_word_embeddings=True, **LINEAR)
MOE = dict(moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2)


def _config(case: str):
    """The config of one test case (eager attention and experts)."""
    if case == "qwen3_5_moe":
        cfg = hf.Qwen3_5MoeTextConfig(**SMALL, **MOE)
    elif case == "qwen3_next":
        cfg = hf.Qwen3NextConfig(**SMALL, **MOE, decoder_sparse_step=1)
    elif case == "olmo_hybrid_gqa":
        cfg = tiny_config("OlmoHybridForCausalLM")
        cfg.linear_num_key_heads, cfg.linear_allow_neg_eigval = 1, False
    cfg._attn_implementation = cfg._experts_implementation = "eager"
    return cfg


CASES = {"qwen3_5": "Qwen3_5ForCausalLM", "qwen3_5_moe": "Qwen3_5MoeForCausalLM",
         "qwen3_next": "Qwen3NextForCausalLM", "olmo_hybrid": "OlmoHybridForCausalLM",
         "olmo_hybrid_gqa": "OlmoHybridForCausalLM"}
_MODELS: dict = {}


def model_of(case: str):
    """The float64 random model of a case (built once per session)."""
    if case not in _MODELS:
        if case in ("qwen3_5", "olmo_hybrid"):
            _MODELS[case] = build_tiny(CASES[case])
        else:
            torch.manual_seed(0)
            _MODELS[case] = getattr(hf, CASES[case])(_config(case)).to(torch.float64).eval()
    return _MODELS[case]


@contextlib.contextmanager
def float64_everywhere():
    """``harness.float64_harness`` plus the same swaps in OLMo-hybrid's modeling module."""
    extra = harness._module_patches(OLMO)
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in extra]
    with harness.float64_harness():
        try:
            for obj, name, fn in extra:
                setattr(obj, name, fn)
            yield
        finally:
            for obj, name, fn in saved:
                setattr(obj, name, fn)


def mixers(model) -> dict:
    mods = families.recurrent_mixers(model)
    assert len(mods) == 3 and all(fam is gdn for _, fam in mods.values())
    return mods


@torch.no_grad()
def stock_run(model, ids):
    """One stock forward over ids [1, T] with a cache: (logits [T, V], the cache,
    {layer: (mixer input [T, D], mixer output [T, D])})."""
    seen, hooks = {}, []
    for i, (m, _) in mixers(model).items():
        def hook(mod, args, kwargs, out, i=i):
            seen[i] = (kwargs.get("hidden_states", args[0] if args else None)[0], out[0])
        hooks.append(m.register_forward_hook(hook, with_kwargs=True))
    try:
        out = model(ids, use_cache=True)
    finally:
        for h in hooks:
            h.remove()
    return out.logits[0], out.past_key_values, seen


def random_ids(T: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 64, (1, T), generator=torch.Generator().manual_seed(seed))


def assert_same_state(name: str, ref: dict, out: dict, tol: float) -> None:
    assert ref["conv"].keys() == out["conv"].keys() == {0} and ref["rec"].keys() == out["rec"].keys() == {0}
    assert_close(f"{name} conv", ref["conv"][0], out["conv"][0], tol)
    assert_close(f"{name} rec", ref["rec"][0], out["rec"][0], tol)


# ----------------------------------------------------------------------------- 1. step == stock

# absolute: the tiny models' mixer outputs are ~1e-3. float64 (harness): <= 4e-18 seen; the stock
# float32 kernels: <= 1e-9 seen (relative rms ~1e-7: float32 rounding in another order)
PRECISIONS = {"float64": (float64_everywhere, 1e-13), "stock_float32_kernels": (contextlib.nullcontext, 1e-8)}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_step_is_the_stock_layer(case, precision):
    """chain(step) from the stock prefill's state over the remaining tokens' mixer inputs ==
    the stock mixer outputs of one full forward; its final state == the stock cache's."""
    context, tol = PRECISIONS[precision]
    model, ids, L = model_of(case), random_ids(), 5
    with context(), torch.no_grad():
        _, full_cache, seen = stock_run(model, ids)
        _, prefix_cache, _ = stock_run(model, ids[:, :L])
        for i, (m, fam) in mixers(model).items():
            h, ref = seen[i]
            out, state = families.chain(fam, m, h[L:], families.state_of(fam, prefix_cache, i))
            assert_close(f"{case} layer{i} out", ref[L:], out, tol)
            assert_same_state(f"{case} layer{i}", families.state_of(fam, full_cache, i), state, tol)


# ----------------------------------------------------------------------------- 2, 3. tree == fork == chain

def tree_parents(kind: str, gen: torch.Generator) -> torch.Tensor:
    """parents [n] of a chain (12), a star (10), a deep random tree (20: each node's parent among
    the 3 previous nodes) or a bushy random tree (20)."""
    n = {"chain": 12, "star": 10, "deep": 20, "bushy": 20}[kind]
    if kind == "chain":
        return torch.arange(-1, n - 1)
    if kind == "star":
        return torch.tensor([-1] + [0] * (n - 1))
    low = (lambda i: max(0, i - 3)) if kind == "deep" else (lambda i: 0)
    return torch.tensor([-1] + [int(torch.randint(low(i), i, (1,), generator=gen)) for i in range(1, n)])


def path_to(parents: torch.Tensor, i: int) -> list:
    path = [i]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return path[::-1]


def random_state(m, gen: torch.Generator) -> dict:
    """A random state of mixer m: conv [C, K], rec [H, dk, dv] (float64)."""
    C, K = m.conv1d.weight.shape[0], m.conv_kernel_size
    conv = torch.randn(C, K, generator=gen, dtype=torch.float64)
    rec = 0.3 * torch.randn(m.num_v_heads, m.head_k_dim, m.head_v_dim, generator=gen, dtype=torch.float64)
    return {"conv": {0: conv}, "rec": {0: rec}}


@pytest.mark.parametrize("kind", ["chain", "star", "deep", "bushy"])
@pytest.mark.parametrize("case", CASES)
def test_tree_is_fork(case, kind):
    """The one-pass tree (ancestor conv + tree WY) == the per-node fork: outputs, and commit
    of every node's path == fork's state after that node; the input state is untouched."""
    model, gen = model_of(case), torch.Generator().manual_seed(1)
    parents = tree_parents(kind, gen)
    with float64_everywhere(), torch.no_grad():
        for i, (m, fam) in mixers(model).items():
            state = random_state(m, gen)
            frozen = {k: {0: v[0].clone()} for k, v in state.items()}
            h = torch.randn(len(parents), model.config.hidden_size, generator=gen, dtype=torch.float64)
            out, record = fam.tree(m, h, state, parents, ancestor_mask_from_parents(parents))
            ref, states = families.fork(fam, m, h, state, parents)
            assert_close(f"{case} {kind} layer{i} out", ref, out, 1e-12)
            for node in range(len(parents)):
                assert_same_state(f"{case} {kind} layer{i} node{node}", states[node],
                                  fam.commit(m, record, path_to(parents, node)), 1e-12)
            assert all(torch.equal(frozen[k][0], state[k][0]) for k in state), "the input state was modified"


@pytest.mark.parametrize("case", CASES)
def test_fork_node_is_chain_over_its_path(case):
    """The oracle: a fork node's output and state == the chain over its own path."""
    model, gen = model_of(case), torch.Generator().manual_seed(2)
    parents = tree_parents("bushy", gen)
    m, fam = next(iter(mixers(model).values()))
    with float64_everywhere(), torch.no_grad():
        state = random_state(m, gen)
        h = torch.randn(len(parents), model.config.hidden_size, generator=gen, dtype=torch.float64)
        out, states = families.fork(fam, m, h, state, parents)
        for node in (1, 7, 13, len(parents) - 1):
            path = path_to(parents, node)
            ref, end = families.chain(fam, m, h[path], state)
            assert_close(f"{case} node{node} out", ref[-1], out[node], 1e-14)
            assert_same_state(f"{case} node{node}", end, states[node], 1e-14)


# ----------------------------------------------------------------------------- 4. model level

def tree_around(P: int, gen: torch.Generator) -> tuple[torch.Tensor, list]:
    """parents of a tree holding a path of P nodes (its root first), with a decoy before each
    path node after the root (the decoy's parent: any earlier node) -> (parents [2P-1], path)."""
    parents, path = [-1], [0]
    for _ in range(1, P):
        parents.append(int(torch.randint(len(parents), (1,), generator=gen)))  # decoy
        parents.append(path[-1])
        path.append(len(parents) - 1)
    return torch.tensor(parents), path


@pytest.mark.parametrize("source", ["chain", "commit"])
@pytest.mark.parametrize("case", CASES)
def test_state_in_stock_cache_decodes_as_full_forward(case, source):
    """The state after tokens L..T-2 from the prefix's state (by ``chain``, or by ``commit`` of
    that path in a tree with decoy siblings), written (``write_state``) over zeroed recurrent
    states of a stock cache of tokens 0..T-2, then one stock decode step == the stock full
    forward's logits at T-1. The tree's outputs on the path == the stock mixer outputs too."""
    model, ids, L = model_of(case), random_ids(seed=3), 5
    T, gen = ids.shape[1], torch.Generator().manual_seed(4)
    with float64_everywhere(), torch.no_grad():
        logits, _, seen = stock_run(model, ids)
        _, prefix_cache, _ = stock_run(model, ids[:, :L])
        _, cache, _ = stock_run(model, ids[:, :T - 1])
        stock_step = model(ids[:, T - 1:], past_key_values=stock_run(model, ids[:, :T - 1])[1]).logits[0, -1]
        assert_close(f"{case} stock decode step vs full forward", logits[-1], stock_step, 1e-12)
        for i, (m, fam) in mixers(model).items():
            h, ref = seen[i][0][L:T - 1], seen[i][1][L:T - 1]  # the path's mixer inputs / outputs [P, D]
            prefix = families.state_of(fam, prefix_cache, i)
            if source == "chain":
                state = families.chain(fam, m, h, prefix)[1]
            else:
                parents, path = tree_around(h.shape[0], gen)
                nodes = torch.randn(len(parents), h.shape[1], generator=gen, dtype=h.dtype)
                nodes[path] = h
                out, record = fam.tree(m, nodes, prefix, parents, ancestor_mask_from_parents(parents))
                assert_close(f"{case} layer{i} tree out on the path", ref, out[path], 1e-13)
                state = fam.commit(m, record, path)
            for t in (*cache.layers[i].conv_states.values(), *cache.layers[i].recurrent_states.values()):
                t.zero_()
            families.write_state(cache, i, state)
        step = model(ids[:, T - 1:], past_key_values=cache).logits[0, -1]
        assert_close(f"{case} {source} decode step vs full forward", logits[-1], step, 1e-12)
