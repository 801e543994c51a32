"""The Mamba1 family (``families.mamba1``, Jamba's ``JambaMambaMixer``) against the stock layer:
the plain step vs the stock full forward and its cache, the fast depth-level ``tree`` vs the
generic ``fork``, a fork node vs ``chain`` over its path, and a committed state written into a
stock cache vs the stock full forward's logits. float64, tiny random models (``build_tiny``)."""
import pytest
import torch
from helpers import assert_close, generator, random_tree

from ddtree_lab.core import families
from ddtree_lab.core.families import mamba1
from ddtree_lab.core.families.tiny import HYBRIDS, build_tiny
from ddtree_lab.core.tree import ancestor_mask_from_parents

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
    """(model, ids [1, T], {layer: (mixer, family)}, {layer: mixer input [T, D]},
    {layer: mixer output [T, D]}, full-forward logits [T, V]) of one class."""
    model = build_tiny(request.param)
    ids = torch.randint(model.config.vocab_size, (1, T), generator=generator("mamba1", request.param))
    mixers = families.recurrent_mixers(model)
    assert mixers and all(fam is mamba1 for _, fam in mixers.values())
    ins, outs = {}, {}

    def hook(i):
        def fn(mod, args, kwargs, out):
            ins[i] = (args[0] if args else kwargs["hidden_states"])[0].clone()
            outs[i] = out[0].clone()
        return fn

    handles = [m.register_forward_hook(hook(i), with_kwargs=True) for i, (m, _) in mixers.items()]
    with torch.no_grad():
        logits = model(ids).logits[0]
    for h in handles:
        h.remove()
    return model, ids, mixers, ins, outs, logits


def prefill(model, ids):
    """The stock cache after a full forward over ids [1, t]."""
    with torch.no_grad():
        return model(ids, use_cache=True).past_key_values


def rel_close(name, ref, out, tol):
    """``assert_close`` relative to max |ref| (the tiny model's mixer outputs and states are
    ~1e-5..1e-2, where ``assert_close``'s floor of 1 would make its tolerance absolute)."""
    scale = ref.abs().max().clamp(min=1e-300)
    return assert_close(name, ref / scale, out / scale, tol)


def assert_same_state(name, ref, out, tol):
    """Both parts of two states agree (relative to each tensor's max |ref|)."""
    for part in ("conv", "rec"):
        for k in ref[part]:
            rel_close(f"{name} {part}{k}", ref[part][k], out[part][k], tol)


def test_step_is_stock(setup):
    """chain of the plain step from the stock L-prefill cache == the stock full forward's mixer
    outputs of tokens L..T-1, and its final state == the stock cache after prefilling all T."""
    model, ids, mixers, ins, outs, _ = setup
    cache_l, cache_t = prefill(model, ids[:, :L]), prefill(model, ids)
    with torch.no_grad():
        for i, (m, fam) in mixers.items():
            out, state = families.chain(fam, m, ins[i][L:], families.state_of(fam, cache_l, i))
            rel_close(f"layer{i} out", outs[i][L:], out, STEP_TOL)
            assert_same_state(f"layer{i}", families.state_of(fam, cache_t, i), state, STEP_TOL)


def tree_case(setup, kind, budget):
    """(mixer, h [n, D], state: the stock L-prefill state, parents [n]) of layer 0."""
    model, ids, mixers, ins, _, _ = setup
    i, (m, fam) = next(iter(mixers.items()))
    gen = generator("mamba1 tree", kind, budget)
    parents = random_tree(kind, budget, 64, gen).parents
    h = torch.randn(len(parents), ins[i].shape[-1], generator=gen, dtype=ins[i].dtype) * ins[i].std()
    return m, h, families.state_of(fam, prefill(model, ids[:, :L]), i), parents


@pytest.mark.parametrize("kind,budget", [("chain", 12), ("star", 10), ("deep", 19), ("random", 19)])
def test_tree_is_fork(setup, kind, budget):
    """The fast depth-level tree == the generic per-node fork: outputs, and commit of every node."""
    m, h, state, parents = tree_case(setup, kind, budget)
    with torch.no_grad():
        ref, states = families.fork(mamba1, m, h, state, parents)
        out, record = mamba1.tree(m, h, state, parents, ancestor_mask_from_parents(parents))
        rel_close(f"{kind} out", ref, out, TREE_TOL)
        for node, path in enumerate(paths(parents)):
            assert_same_state(f"{kind} node{node}", states[node], mamba1.commit(m, record, path), TREE_TOL)


@pytest.mark.parametrize("kind", ["deep", "random"])
def test_fork_node_is_chain(setup, kind):
    """A fork node == chain over its own path root..node (the exactness oracle)."""
    m, h, state, parents = tree_case(setup, kind, 19)
    with torch.no_grad():
        ref, states = families.fork(mamba1, m, h, state, parents)
        ps = paths(parents)
        deepest = max(range(len(ps)), key=lambda j: len(ps[j]))
        for node in sorted({len(ps) // 2, len(ps) - 1, deepest}):
            path = ps[node]
            out, s = families.chain(mamba1, m, h[path], state)
            rel_close(f"{kind} node{node} out", ref[node], out[-1], TREE_TOL)
            assert_same_state(f"{kind} node{node}", states[node], s, TREE_TOL)


def paths(parents):
    """Path root..i of every node i (lists of node indices)."""
    out = []
    for p in parents.tolist():
        out.append((out[p] if p >= 0 else []) + [len(out)])
    return out


def branched(h_path, gen):
    """A tree whose path 0..len-1 is ``h_path`` [l, D], each path node with a random sibling
    branch: (h [n, D], parents [n], the path's node indices)."""
    h, parents, path = [], [], []
    for t in range(h_path.shape[0]):
        if t:  # a distractor child of the previous path node, before the real one
            h.append(torch.randn(h_path.shape[1], generator=gen, dtype=h_path.dtype) * h_path.std())
            parents.append(path[-1])
        h.append(h_path[t])
        parents.append(path[-1] if path else -1)
        path.append(len(h) - 1)
    return torch.stack(h), torch.tensor(parents), path


@pytest.mark.parametrize("source", ["chain", "tree"])
def test_commit_in_stock_cache(setup, source):
    """The state after tokens L..P-1 (chain's final state, or commit of that path in a tree with
    distractor branches), written into a stock cache whose recurrent layers were left at the
    L-prefill, then one stock decode step == the stock full forward's logits at P."""
    model, ids, mixers, ins, outs, logits = setup
    P, gen = T - 3, generator("mamba1 commit", source)
    cache_l, cache = prefill(model, ids[:, :L]), prefill(model, ids[:, :P])  # attention rows 0..P-1
    with torch.no_grad():
        for i, (m, fam) in mixers.items():
            start = families.state_of(fam, cache_l, i)
            if source == "chain":
                state = families.chain(fam, m, ins[i][L:P], start)[1]
            else:
                h, parents, path = branched(ins[i][L:P], gen)
                state = fam.commit(m, fam.tree(m, h, start, parents, ancestor_mask_from_parents(parents))[1], path)
            getattr(fam, "write_state", families.write_state)(cache, i, state)
        got = {}
        handles = [m.register_forward_hook(lambda mod, a, out, i=i: got.update({i: out[0, -1]}))
                   for i, (m, _) in mixers.items()]
        out = model(ids[:, P:P + 1], past_key_values=cache, use_cache=True).logits[0, -1]
        for h in handles:
            h.remove()
    for i in mixers:  # the tiny model's mixers add ~5e-5 to the residual: check them directly too
        rel_close(f"{source} layer{i} stock decode mixer out at {P}", outs[i][P], got[i], DECODE_TOL)
    assert_close(f"{source} logits at {P}", logits[P], out, DECODE_TOL)


def test_stale_state_is_caught(setup):
    """The control of ``test_commit_in_stock_cache``: leaving the recurrent layers at the
    L-prefill state departs from the full forward by far more than DECODE_TOL."""
    model, ids, mixers, _, _, logits = setup
    P = T - 3
    cache_l, cache = prefill(model, ids[:, :L]), prefill(model, ids[:, :P])
    with torch.no_grad():
        for i, (m, fam) in mixers.items():
            families.write_state(cache, i, families.state_of(fam, cache_l, i))
        out = model(ids[:, P:P + 1], past_key_values=cache, use_cache=True).logits[0, -1]
    err = (out - logits[P]).abs().max().item()
    print(f"stale state: max err {err:.3e}")
    assert err > 100 * DECODE_TOL
