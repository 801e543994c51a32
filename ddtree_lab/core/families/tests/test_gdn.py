"""The Gated DeltaNet family (``families/gdn``) against the stock transformers layers, float64.

Classes: Qwen3.5 (``build_tiny``), Qwen3.5-MoE and Qwen3-Next (small configs here, linear heads
1 key : 2 value so the key-head expansion and Qwen3-Next's per-group fusion are exercised), and
OLMo-hybrid (``build_tiny``; plus a 1 : 2 variant without negative eigenvalues, so both beta
branches run).

Precision: the stock GDN kernels and gated norms cast to float32 even in a float64 model, so the
float64 comparisons run under ``harness.float64_harness`` (the stock float32 casts swapped for
dtype-preserving twins, and ``wy.kernel_dtype`` with them; OLMo-hybrid's modeling module
among them). The harness replaces the stock chunk / recurrent kernels by the lab's sequential
twin, so one test also runs WITHOUT it: the step (mirroring the float32 casts through
``kernel_dtype``) against the untouched stock kernels. The checks themselves are the shared family
checks of ``helpers``.
"""
import contextlib

import pytest
import torch
import transformers as hf
from helpers import (assert_chain_is_stock, assert_close, assert_fork_is_chain, assert_tree_is_fork, capture_mixers,
                     decode_from_states, mixer_case, prefill_states, tree_parents)

from ddtree_lab.core import families, harness
from ddtree_lab.core import verify
from ddtree_lab.core.families import gdn
from ddtree_lab.core.families.tiny import build_tiny, tiny_config
from ddtree_lab.core.tree import ancestor_mask_from_parents

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


def mixers(model) -> dict:
    mods = verify.recurrent_mixers(model)
    assert len(mods) == 3 and all(fam is gdn for _, fam in mods.values())
    return mods


def random_ids(T: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 64, (1, T), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- 1. step == stock

# absolute: the tiny models' mixer outputs are ~1e-3. float64 (harness): <= 4e-18 seen; the stock
# float32 kernels: <= 1e-9 seen (relative rms ~1e-7: float32 rounding in another order)
PRECISIONS = {"float64": (harness.float64_harness, 1e-13), "stock_float32_kernels": (contextlib.nullcontext, 1e-8)}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_step_is_the_stock_layer(case, precision):
    """chain(step) from the stock prefill's state over the remaining tokens' mixer inputs ==
    the stock mixer outputs of one full forward; its final state == the stock cache's."""
    context, tol = PRECISIONS[precision]
    model, ids = model_of(case), random_ids()
    with context():
        assert len(mixers(model)) == 3
        assert all(s["conv"].keys() == s["rec"].keys() == {0} for s in prefill_states(model, ids).values())
        assert_chain_is_stock(mixer_case(model, ids, gdn), 5, tol)


# ----------------------------------------------------------------------------- 2, 3. tree == fork == chain

N_NODES = {"chain": 12, "star": 10, "deep": 20, "bushy": 20}  # deep: each node's parent among the 3 before it


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
    parents = tree_parents(kind, N_NODES[kind], gen)
    with harness.float64_harness():
        for i, (m, fam) in mixers(model).items():
            state = random_state(m, gen)
            h = torch.randn(len(parents), model.config.hidden_size, generator=gen, dtype=torch.float64)
            assert state["conv"].keys() == state["rec"].keys() == {0}
            assert_tree_is_fork(f"{case} {kind} layer{i}", fam, m, h, state, parents, 1e-12)


@pytest.mark.parametrize("case", CASES)
def test_fork_node_is_chain_over_its_path(case):
    """The oracle: a fork node's output and state == the chain over its own path."""
    model, gen = model_of(case), torch.Generator().manual_seed(2)
    parents = tree_parents("bushy", 20, gen)
    m, fam = next(iter(mixers(model).values()))
    with harness.float64_harness():
        state = random_state(m, gen)
        h = torch.randn(len(parents), model.config.hidden_size, generator=gen, dtype=torch.float64)
        assert_fork_is_chain(case, fam, m, h, state, parents, 1e-14, nodes=(1, 7, 13, len(parents) - 1))


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
    that path in a tree with decoy siblings), written (``write_state``) over noise in the
    recurrent states of a stock cache of tokens 0..T-2, then one stock decode step == the stock
    full forward's logits at T-1. The tree's outputs on the path == the stock mixer outputs too."""
    model, ids, L = model_of(case), random_ids(seed=3), 5
    T, gen = ids.shape[1], torch.Generator().manual_seed(4)
    with harness.float64_harness(), torch.no_grad():
        ins, outs, full = capture_mixers(model, ids)
        logits = full.logits[0]
        stock_step = decode_from_states(model, ids, T - 1, {})[0][0]
        assert_close(f"{case} stock decode step vs full forward", logits[-1], stock_step, 1e-12)
        prefix = prefill_states(model, ids[:, :L])
        states = {}
        for i, (m, fam) in mixers(model).items():
            h, ref = ins[i][L:T - 1], outs[i][L:T - 1]  # the path's mixer inputs / outputs [P, D]
            if source == "chain":
                states[i] = families.chain(fam, m, h, prefix[i])[1]
            else:
                parents, path = tree_around(h.shape[0], gen)
                nodes = torch.randn(len(parents), h.shape[1], generator=gen, dtype=h.dtype)
                nodes[path] = h
                out, record = fam.tree(m, nodes, prefix[i], parents, ancestor_mask_from_parents(parents))
                assert_close(f"{case} layer{i} tree out on the path", ref, out[path], 1e-13)
                states[i] = fam.commit(m, record, path)
        step = decode_from_states(model, ids, T - 1, states, gen)[0][0]
        assert_close(f"{case} {source} decode step vs full forward", logits[-1], step, 1e-12)
