"""What the tests share, so that no test file imports another: ``assert_close`` (prints the
error it saw), the toy target + drafter pair, a drafter that knows part of the answer (so
losslessness tests really accept draft tokens), the seeded random-tree / random-prefix
factories, the cache comparison, the recurrent-family checks (stock mixer inputs and outputs
caught from one forward, random parent lists, tree == fork == chain, a committed state decoded
by the stock model), the distribution checks of the sampling tests (with their deliberately
wrong rules) and a hand-built results frame."""
import contextlib
import math
import zlib
from typing import NamedTuple

import torch

from ddtree_lab.core import families, harness
from ddtree_lab.core import verify as verify_mod
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig, Draft
from ddtree_lab.core.families.tiny import build_tiny
from ddtree_lab.core.models import build_target
from ddtree_lab.core.tree import DraftTree, ancestor_mask_from_parents
from ddtree_lab.experiments.plumbing import measure


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """Scale-aware closeness: max |ref - out| <= tol * max(1, max |ref|), printed either way.

    ``tol`` is a relative tolerance for tensors larger than 1 and an absolute one below (so a
    BLAS that rounds differently on another CPU stays inside it). A tolerance of 0 is refused:
    where bit-identity is the claim, use ``assert_identical``. Returns the scaled error.
    """
    if tol <= 0:
        raise ValueError(f"{name}: tol must be > 0 (got {tol}); use assert_identical for bit-identity")
    if not ref.numel():
        return 0.0
    diff = (ref.double() - out.double()).abs()
    scale = max(1.0, ref.double().abs().max().item())
    err = diff.max().item() / scale
    rms = diff.square().mean().sqrt().item() / max(ref.double().square().mean().sqrt().item(), 1e-30)
    print(f"{name}: max err {err:.3e} (scale {scale:.2g}, tol {tol:.0e}), relative rms {rms:.2e}")
    assert err <= tol, f"{name}: max err {err:.3e} > tol {tol:.0e} (scale {scale:.2g})"
    return err


def assert_identical(name: str, ref: torch.Tensor, out: torch.Tensor) -> None:
    """Bit-identity (same shape, dtype and bits): only where that is the claim (copies, gathers,
    a result recomputed by the very same kernels). Tests that call it run under 1 and 2 torch
    threads (the ``threads`` fixture)."""
    assert ref.shape == out.shape and ref.dtype == out.dtype, \
        f"{name}: {tuple(ref.shape)}/{ref.dtype} vs {tuple(out.shape)}/{out.dtype}"
    err = (ref.double() - out.double()).abs().max().item() if ref.numel() else 0.0
    print(f"{name}: bit-identical {torch.equal(ref, out)} (max abs err {err:.3e})")
    assert torch.equal(ref, out), f"{name}: not bit-identical, max abs err {err:.3e}"


COMPILE_GROUP = "compile"   # tests that torch.compile share one xdist worker: inductor's disk cache of kernels


def toy_pair(preset: str = "gdn-toy", seed: int = 0, block_size: int = 8):
    """(target, drafter): a random toy target and a 1-layer random drafter (MASK = last id)."""
    target = build_target(preset, seed=seed)
    cfg = DrafterConfig.for_target(target, mask_token_id=target.config.vocab_size - 1, num_layers=1,
                                   block_size=block_size)
    torch.manual_seed(seed + 1)
    return target, DFlashDrafter.from_config(cfg, target).eval()


def toy_dflash2(preset: str = "gdn-toy", seed: int = 0, scale: float = 3.0):
    """(target, DFlash 2 drafter): ``toy_pair``'s drafter as a ``DFlash2DraftModel``
    (``dflash2_from``: top-4 candidates, rank 8), its selector's codebooks randomised (x
    ``scale``) so children depend on the parent."""
    from ddtree_lab.train.drafters import dflash2_from
    target, drafter = toy_pair(preset, seed=seed)
    d2 = dflash2_from(drafter, target, selector_rank=8, selector_top_k=4)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for emb in (d2.selector.predecessor_codebook, d2.selector.successor_codebook):
            emb.weight.copy_(torch.randn(emb.weight.shape, generator=gen) * scale)
    return target, d2.eval()


class HintedDrafter:
    """A real drafter whose proposals are nudged toward a known continuation ``sequence``
    (prompt + the target's AR output) at depths d with (position + d) % 3 != 0, so rounds
    accept several draft tokens and still reject some: both paths of the accept walk run.
    The hint is the target's own output, so a verify bug still shows as output != AR."""

    def __init__(self, drafter: DFlashDrafter, sequence: list[int], boost: float = 30.0):
        self.drafter, self.sequence, self.boost = drafter, list(sequence), boost
        self.cfg = drafter.cfg

    def new_state(self):
        return self.drafter.new_state()

    @property
    def model(self):
        return self.drafter.model

    def draft(self, state, new_features, last_token: int, block_size: int, forward=None) -> Draft:
        logits = self.drafter.draft(state, new_features, last_token, block_size, forward).logits.clone()  # [bs-1, V]
        root = state.length  # position of ``last_token``: every earlier row is in the context
        for d in range(1, block_size):
            if root + d < len(self.sequence) and (root + d) % 3:
                logits[d - 1, self.sequence[root + d]] += self.boost
        return Draft(logits)

    selector = None

    def draft_batch(self, states, new_features, last_tokens, block_size, forward=None) -> list:
        return [self.draft(*args, block_size, forward) for args in zip(states, new_features, last_tokens)]


class BatchHintedDrafter:
    """``HintedDrafter`` per sequence: the k-th ``new_state`` belongs to the k-th prompt."""

    def __init__(self, drafter, sequences):
        self.hinted = [HintedDrafter(drafter, s) for s in sequences]
        self.cfg, self.owner = drafter.cfg, {}

    def new_state(self):
        state = self.hinted[len(self.owner)].new_state()
        self.owner[id(state)] = self.hinted[len(self.owner)]
        return state

    def draft(self, state, new_features, last_token, block_size, forward=None) -> Draft:
        return self.owner[id(state)].draft(state, new_features, last_token, block_size, forward)

    selector = None

    def draft_batch(self, states, new_features, last_tokens, block_size, forward=None) -> list:
        """Each state's own hinted proposal."""
        return [self.draft(*args, block_size, forward) for args in zip(states, new_features, last_tokens)]


# ----------------------------------------------------------------------------- seeded factories

LOGIT_TOL = {torch.float32: 2e-6, torch.float64: 1e-12}  # tree logits vs the full forward, per dtype


def generator(*key) -> torch.Generator:
    """A generator seeded by a stable hash of ``key`` (a case id: the same case, the same draws)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


TREE_KINDS = measure.TREE_KINDS


def random_tree(kind: str, budget: int, vocab: int, gen: torch.Generator) -> DraftTree:
    """``measure.tree_of_kind``: the lab's one random-tree factory (``TREE_KINDS``)."""
    return measure.tree_of_kind(kind, budget, vocab, gen)


def random_prefix(vocab: int, gen: torch.Generator, low: int = 1, high: int = 20) -> list[int]:
    """Token ids of a length drawn uniformly in [low, high] (low == high: that length)."""
    length = int(torch.randint(low, high + 1, (1,), generator=gen))
    return torch.randint(vocab, (length,), generator=gen).tolist()


def root_path(tree: DraftTree, pick: str, gen: torch.Generator) -> list[int]:
    """[0] ("root"), the path to the deepest node ("deepest") or to a random node ("random")."""
    if pick == "root":
        return [0]
    node = int(tree.depths.argmax()) if pick == "deepest" else int(torch.randint(len(tree), (1,), generator=gen))
    return tree.path_to(node)


def precision(dtype: torch.dtype):
    """float64 runs under the harness (dtype-preserving stock modules); float32 runs stock."""
    return harness.float64_harness() if dtype == torch.float64 else contextlib.nullcontext()


def assert_same_cache(name: str, ref, out, tol: float) -> None:
    """Committed attention rows and GDN conv / recurrent states of two caches agree."""
    assert ref.length == out.length
    assert ref.kv.keys() == out.kv.keys() and ref.conv.keys() == out.conv.keys()
    for i in ref.kv:
        for part, a, b in zip("kv", ref.kv[i], out.kv[i]):
            assert a.shape[-2] >= ref.length and b.shape[-2] >= ref.length
            assert_close(f"{name} layer{i} {part}", a[..., :ref.length, :], b[..., :ref.length, :], tol)
    for i in ref.conv:
        assert_close(f"{name} layer{i} conv", ref.conv[i], out.conv[i], tol)
        assert_close(f"{name} layer{i} rec", ref.rec[i], out.rec[i], tol)


# ----------------------------------------------------------------------------- recurrent families
# The family tests (ddtree_lab/core/families/tests): a state is {"conv": {i: tensor}, "rec": {i: tensor}}
# (``families``), a tree a parents list [n] (root -1), a path the node indices root..node.

def assert_rel_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """``assert_close`` of the scaled relative error, max |ref - out| / max |ref|: for tensors far
    below 1 (a tiny model's mixer outputs and states, ~1e-5..1e-1), where ``assert_close``'s
    floor of 1 would make ``tol`` absolute."""
    scale = ref.abs().max().clamp(min=1e-300)
    return assert_close(name, ref / scale, out / scale, tol)


def assert_same_state(name: str, ref: dict, out: dict, tol: float, relative: bool = False) -> None:
    """Two states hold the same parts and agree: ``assert_close`` per tensor (``relative``:
    ``assert_rel_close``)."""
    close = assert_rel_close if relative else assert_close
    for part in ("conv", "rec"):
        assert ref[part].keys() == out[part].keys(), f"{name} {part}: {sorted(ref[part])} vs {sorted(out[part])}"
        for k in ref[part]:
            close(f"{name} {part}{k}", ref[part][k], out[part][k], tol)


def random_parents(n: int, gen: torch.Generator, window: int | None = None) -> torch.Tensor:
    """parents [n] of a random tree: node i's parent uniform among the ``window`` nodes before it
    (None: among all earlier nodes)."""
    low = (lambda i: 0) if window is None else (lambda i: max(0, i - window))
    return torch.tensor([-1] + [int(torch.randint(low(i), i, (1,), generator=gen)) for i in range(1, n)])


def tree_parents(kind: str, n: int, gen: torch.Generator) -> torch.Tensor:
    """parents [n] of a "chain", a "star", a "deep" random tree (each node's parent among the 3
    before it) or a "bushy" one (among all earlier nodes)."""
    if kind == "chain":
        return torch.arange(-1, n - 1)
    if kind == "star":
        return torch.tensor([-1] + [0] * (n - 1))
    return random_parents(n, gen, {"deep": 3, "bushy": None}[kind])


def path_to(parents: torch.Tensor, i: int) -> list[int]:
    """The path root..i (node indices) of a parents list."""
    path = [i]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return path[::-1]


def branched(h_path: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A tree whose path 0..l-1 carries ``h_path`` [l, D], each path node after the root with a
    distractor sibling before it (random inputs at h_path's scale): (h [2l-1, D], parents, path)."""
    h, parents, path = [], [], []
    for t in range(h_path.shape[0]):
        if t:  # a distractor child of the previous path node, before the real one
            h.append(torch.randn(h_path.shape[1], generator=gen, dtype=h_path.dtype) * h_path.std())
            parents.append(path[-1])
        h.append(h_path[t])
        parents.append(path[-1] if path else -1)
        path.append(len(h) - 1)
    return torch.stack(h), torch.tensor(parents), path


def capture_mixers(model, ids: torch.Tensor, **kwargs):
    """One stock forward of ``model`` over ids [1, t] (``kwargs`` passed on: a cache, positions),
    its recurrent mixers' (``verify.recurrent_mixers``) inputs and outputs caught by hooks:
    ({layer: input [t, D]}, {layer: output [t, D]}, the model's output)."""
    ins, outs = {}, {}

    def hook(i):
        def grab(mod, args, kw, out):
            ins[i] = (args[0] if args else kw["hidden_states"])[0].detach().clone()
            outs[i] = (out[0] if isinstance(out, tuple) else out)[0].detach().clone()  # MiniMax's: (out, state)
        return grab

    handles = [m.register_forward_hook(hook(i), with_kwargs=True)
               for i, (m, _) in verify_mod.recurrent_mixers(model).items()]
    try:
        with torch.no_grad():
            output = model(ids, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return ins, outs, output


class MixerCase(NamedTuple):
    """``mixer_case``: one stock full forward of a model with recurrent layers."""
    model: torch.nn.Module
    ids: torch.Tensor  # [1, t]
    mixers: dict  # {layer: (mixer, family)}
    ins: dict  # {layer: mixer input [t, D]}
    outs: dict  # {layer: mixer output [t, D]}
    logits: torch.Tensor  # [t, V]


def mixer_case(model, ids: torch.Tensor, fam) -> MixerCase:
    """One stock full forward over ids [1, t] (``capture_mixers``); every recurrent mixer of
    ``model`` is of family ``fam``."""
    mixers = verify_mod.recurrent_mixers(model)
    assert mixers and all(f is fam for _, f in mixers.values()), f"not every recurrent mixer is {families.name_of(fam)}"
    ins, outs, output = capture_mixers(model, ids)
    return MixerCase(model, ids, mixers, ins, outs, output.logits[0])


def tiny_case(name: str, fam, t: int, prepare=None) -> MixerCase:
    """``mixer_case`` of ``build_tiny(name)`` (float64; ``prepare``: applied to the model first)
    over t random tokens, drawn by ``generator(<family name>, name)``."""
    model = build_tiny(name)
    model = model if prepare is None else prepare(model)
    ids = torch.randint(model.config.vocab_size, (1, t), generator=generator(families.name_of(fam), name))
    return mixer_case(model, ids, fam)


def stock_cache(model, ids: torch.Tensor):
    """The stock cache after one full forward over ids [1, t]."""
    with torch.no_grad():
        return model(ids, use_cache=True).past_key_values


def prefill_states(model, ids: torch.Tensor) -> dict:
    """{layer: its state (``families.state_of``)} of every recurrent layer in ``stock_cache``."""
    cache = stock_cache(model, ids)
    return {i: families.state_of(fam, cache, i) for i, (_, fam) in verify_mod.recurrent_mixers(model).items()}


def assert_chain_is_stock(case: MixerCase, L: int, tol: float, relative: bool = False, t: int | None = None) -> None:
    """Every recurrent layer of ``case``: the plain step chained from the stock L-prefill state
    over the stock mixer inputs of tokens L..t-1 == the stock mixer outputs of those tokens, and
    its final state == the stock cache's after prefilling t tokens (t: all of case.ids)."""
    close = assert_rel_close if relative else assert_close
    t = case.ids.shape[1] if t is None else t
    start, end = prefill_states(case.model, case.ids[:, :L]), prefill_states(case.model, case.ids[:, :t])
    with torch.no_grad():
        for i, (m, fam) in case.mixers.items():
            out, state = families.chain(fam, m, case.ins[i][L:t], start[i])
            close(f"layer{i} out", case.outs[i][L:t], out, tol)
            assert_same_state(f"layer{i}", end[i], state, tol, relative)


def assert_step_keeps_input_state(case: MixerCase, L: int) -> None:
    """The plain step of the first recurrent layer of ``case``, from the stock L-prefill state,
    returns fresh tensors and leaves its input state untouched."""
    i, (m, fam) = next(iter(case.mixers.items()))
    state = families.state_of(fam, stock_cache(case.model, case.ids[:, :L]), i)
    before = {part: {k: t.clone() for k, t in ts.items()} for part, ts in state.items()}
    with torch.no_grad():
        _, new = fam.step(m, case.ins[i][L], state)
    for part, ts in state.items():
        for k, t in ts.items():
            assert torch.equal(t, before[part][k]), f"the step modified its input state {part}{k}"
            assert new[part][k].data_ptr() != t.data_ptr(), f"the step returned its input state {part}{k}"


def tree_case(case: MixerCase, L: int, kind: str, budget: int, gen: torch.Generator, layer: int = 0):
    """(mixer, h [n, D], state, parents [n]) of the layer-th recurrent layer of ``case``: parents of
    ``random_tree(kind, budget)``, h random at the scale of the mixer's stock inputs, the state of
    the stock L-prefill."""
    i, (m, fam) = list(case.mixers.items())[layer]
    parents = random_tree(kind, budget, 64, gen).parents
    x = case.ins[i]
    h = torch.randn(len(parents), x.shape[-1], generator=gen, dtype=x.dtype) * x.std()
    return m, h, families.state_of(fam, stock_cache(case.model, case.ids[:, :L]), i), parents


def assert_tree_is_fork(name: str, fam, m, h: torch.Tensor, state: dict, parents: torch.Tensor, tol: float,
                        relative: bool = False) -> None:
    """A family's one-pass ``tree`` == the generic per-node ``families.fork`` from ``state``: the
    outputs [n, D], and ``commit`` of the path to every node == fork's state after that node;
    the input state is left untouched."""
    close = assert_rel_close if relative else assert_close
    frozen = {part: {k: t.clone() for k, t in ts.items()} for part, ts in state.items()}
    with torch.no_grad():
        out, record = fam.tree(m, h, state, parents, ancestor_mask_from_parents(parents))
        ref, states = families.fork(fam, m, h, state, parents)
        close(f"{name} out", ref, out, tol)
        for node in range(len(parents)):
            assert_same_state(f"{name} node{node}", states[node], fam.commit(m, record, path_to(parents, node)), tol,
                              relative)
    assert all(torch.equal(frozen[p][k], state[p][k]) for p in state for k in state[p]), f"{name}: input state modified"


def some_nodes(parents: torch.Tensor, *also: int) -> list[int]:
    """The middle node, the last and the deepest of a tree (and ``also``), sorted, once each."""
    n = len(parents)
    return sorted({*also, n // 2, n - 1, max(range(n), key=lambda j: len(path_to(parents, j)))})


def assert_fork_is_chain(name: str, fam, m, h: torch.Tensor, state: dict, parents: torch.Tensor, tol: float,
                         nodes=None, relative: bool = False) -> None:
    """The exactness oracle: ``families.fork``'s output and state at each of ``nodes`` (None:
    ``some_nodes``) == ``families.chain`` over that node's own path root..node."""
    close = assert_rel_close if relative else assert_close
    nodes = some_nodes(parents) if nodes is None else nodes
    with torch.no_grad():
        ref, states = families.fork(fam, m, h, state, parents)
        for node in nodes:
            out, end = families.chain(fam, m, h[path_to(parents, node)], state)
            close(f"{name} node{node} out", ref[node], out[-1], tol)
            assert_same_state(f"{name} node{node}", states[node], end, tol, relative)


def decode_from_states(model, ids: torch.Tensor, P: int, states: dict, gen: torch.Generator | None = None,
                       n: int = 1, positions: bool = False) -> tuple[torch.Tensor, dict]:
    """Stock logits [n, V] of tokens P..P+n-1 (n = 1: one stock decode step) from the stock cache
    of the P-prefill whose recurrent layers hold ``states`` ({layer: state}, written by the
    family's ``write_state``; with ``gen``, each such layer's state is first overwritten by noise,
    so a part the write misses leaves junk), and the recurrent mixers' outputs {layer: [n, D]} of
    that call. ``positions``: pass position_ids P..P+n-1 (a stock decode that reads them from a
    recurrent first layer's cache restarts them at 0: MiniMax's, Bamba's)."""
    cache, mixers = stock_cache(model, ids[:, :P]), verify_mod.recurrent_mixers(model)
    with torch.no_grad():
        for i, state in states.items():
            fam = mixers[i][1]
            write = getattr(fam, "write_state", families.write_state)
            if gen is not None:
                held = families.state_of(fam, cache, i)
                write(cache, i, {part: {k: torch.randn(t.shape, generator=gen, dtype=t.dtype) for k, t in ts.items()}
                                 for part, ts in held.items()})
            write(cache, i, state)
    kwargs = {"position_ids": torch.arange(P, P + n)[None]} if positions else {}
    _, outs, output = capture_mixers(model, ids[:, P:P + n], past_key_values=cache, use_cache=True, **kwargs)
    return output.logits[0], outs


def commit_then_decode(case: MixerCase, L: int, P: int, source: str, gen: torch.Generator | None,
                       positions: bool = False) -> tuple[torch.Tensor, dict]:
    """The model-level check of a family on ``case``: per recurrent layer, the state after the
    stock mixer inputs of tokens L..P-1 from the stock L-prefill state (source "chain": the final
    state of ``families.chain``; "tree": ``commit`` of that path in ``branched``; "stale": the
    L-prefill state itself, the control), written into the stock cache of the P-prefill (over
    noise, with ``gen``), then one stock decode step of token P (``decode_from_states``) ->
    (logits [V], {layer: that step's mixer output [D]})."""
    start, states = prefill_states(case.model, case.ids[:, :L]), {}
    with torch.no_grad():
        for i, (m, fam) in case.mixers.items():
            if source == "stale":
                states[i] = start[i]
            elif source == "chain":
                states[i] = families.chain(fam, m, case.ins[i][L:P], start[i])[1]
            else:
                h, parents, path = branched(case.ins[i][L:P], gen)
                record = fam.tree(m, h, start[i], parents, ancestor_mask_from_parents(parents))[1]
                states[i] = fam.commit(m, record, path)
    logits, outs = decode_from_states(case.model, case.ids, P, states, gen, positions=positions)
    return logits[0], {i: o[0] for i, o in outs.items()}


# ----------------------------------------------------------------------------- distribution checks

def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit, categories with expected < 5 pooled;
    p-value by the Wilson-Hilferty normal approximation."""
    n = counts.sum()
    exp = probs * n
    order = exp.argsort()
    small = exp[order].cumsum(0) < 5
    pooled_c = torch.cat([counts[order][small].sum(0, keepdim=True), counts[order][~small]])
    pooled_e = torch.cat([exp[order][small].sum(0, keepdim=True), exp[order][~small]])
    keep = pooled_e > 0
    stat = float(((pooled_c[keep] - pooled_e[keep]) ** 2 / pooled_e[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def exact_first_two(target, prompt, temperature):
    """Exact P(1st token) [V] and marginal P(2nd token) [V] under target sampling."""
    from ddtree_lab.core.verify import full_forward_logits
    V = target.config.vocab_size
    p1 = torch.softmax(full_forward_logits(target, prompt).double() / temperature, -1)  # [V]
    ext = torch.cat([prompt.expand(V, -1), torch.arange(V)[:, None]], 1)  # [V, T+1]
    with torch.no_grad():
        p2_given = torch.softmax(target(ext).logits[:, -1].double() / temperature, -1)  # [V, V]
    return p1, p1 @ p2_given


def biased_accept(tree, target_choice):
    """Deliberately wrong accept walk: on a mismatch, accept the first child anyway."""
    path, choice = [0], target_choice.tolist()
    while tree.children[path[-1]]:
        match = tree.child_by_token[path[-1]].get(choice[path[-1]])
        path.append(match if match is not None else tree.children[path[-1]][0])
    return path, int(choice[path[-1]])


def no_residual(x, fallback):
    """Deliberately wrong rejection rule: after a rejected draft token the target
    distribution is not replaced by the residual max(0, p - q) (and q keeps the token)."""
    return fallback


def sharp_drafter(drafter, scale=4.0):
    """The toy drafter with sharpened logits: its q differs from p a lot, so a wrong rule
    shows (a flat random q is nearly uniform and rarely accepted)."""
    class Sharp:
        cfg = drafter.cfg
        new_state = drafter.new_state
        selector = None

        def draft(self, state, feats, root, bs, forward=None):
            return self.draft_batch([state], [feats], [root], bs, forward)[0]

        def draft_batch(self, states, feats, roots, bs, forward=None):
            return [Draft(d.logits * scale) for d in drafter.draft_batch(states, feats, roots, bs, forward)]
    return Sharp()


# ----------------------------------------------------------------------------- results

def results_frame():
    """A hand-built results frame: 2 archs, AR / DFlash / DDTree, 3 prompts, 8 new tokens.

    Every prompt gets 8 tokens; a config's seconds per prompt are fixed below, so its
    tokens/s is 8 / seconds, except mla AR (1, 2, 1 s: 24 tokens / 4 s = 6 tok/s, where a
    mean of per-prompt rates would give 6.67). gdn AR: 8 tok/s. Peaks of tokens/s: gdn wy at
    budget 7, gdn naive at 3, mla at 15. gdn naive budget 15 diverges from AR on prompt 1 at
    position 5. One gdn wy 'auto' row (mean tree size 7) and one T = 1 row with no AR twin.
    """
    import pandas as pd

    def row(arch, method, mode, budget, block, prompt, seconds, temperature=0.0, diverge=None, sizes=None):
        tokens = [100 * prompt + i for i in range(8)]
        if diverge is not None:
            tokens[diverge] = 99
        tau = 1.0 if method == "ar" else 1.0 + math.log2(int(block if budget == "auto" else budget) + 1) / 2 + 0.1 * prompt
        metrics = {"tokens": tokens, "acceptance_lengths": [2] * 4, "tree_sizes": sizes if sizes is not None else [],
                   "timings": {"draft": 0.0, "tree": 0.0, "verify": seconds, "accept": 0.0, "commit": 0.0,
                               "prefill": 0.0, "total": seconds},
                   "tau": tau, "tokens_per_s": 8 / seconds, "rounds": 4, "prompt_len": 10}
        return {"arch": arch, "method": method, "gdn_mode": mode, "budget": budget, "block_size": block,
                "temperature": temperature, "max_new_tokens": 8, "prompt": prompt, "tau": tau,
                "tokens_per_s": 8 / seconds, "rounds": 4, "prompt_len": 10, "_metrics": metrics}

    ddtree_seconds = {("gdn", "wy"): {1: 0.5, 3: 0.4, 7: 0.25, 15: 0.32},
                      ("gdn", "naive"): {1: 0.8, 3: 0.5, 7: 0.64, 15: 1.0},
                      ("mla", "wy"): {1: 0.5, 3: 0.4, 7: 0.32, 15: 0.25}}
    dflash_seconds = {("gdn", "wy"): 0.5, ("gdn", "naive"): 0.8, ("mla", "wy"): 0.4}
    auto_sizes = {0: [5, 9], 1: [7], 2: [7, 7]}
    rows = []
    for p in range(3):
        rows.append(row("gdn", "ar", "wy", 0, 0, p, 1.0))
        rows.append(row("mla", "ar", "wy", 0, 0, p, [1.0, 2.0, 1.0][p]))
        for (arch, mode), secs in dflash_seconds.items():
            rows.append(row(arch, "dflash", mode, 3, 4, p, secs, sizes=[3] * 4))
        for (arch, mode), by_budget in ddtree_seconds.items():
            for budget, secs in by_budget.items():
                diverge = 5 if (mode, budget, p) == ("naive", 15, 1) else None
                rows.append(row(arch, "ddtree", mode, budget, 4, p, secs, diverge=diverge, sizes=[budget] * 4))
        rows.append(row("gdn", "ddtree", "wy", "auto", 4, p, 0.2, sizes=auto_sizes[p]))
        rows.append(row("gdn", "ddtree", "wy", 7, 4, p, 0.5, temperature=1.0, sizes=[7] * 4))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- reference twins

@torch.no_grad()
def generate_reference(target, drafter, prompt_ids, *, method: str, budget: int = 32, block_size: int = 8,
                       max_new_tokens: int = 128, temperature: float = 0.0, gdn_mode: str = "wy", seed: int = 0,
                       accept_rule: str = "rejection", tree: str | None = None):
    """``decode.generate``'s plain twin: the batch-1 speculative loop, one sequence, one round
    at a time, built from the public pieces (``start``, ``drafter.draft``, the tree rule,
    ``verify``, ``accept_round``, ``commit``). -> Generation (tokens, acceptance lengths, tree
    sizes, entropies; no timings)."""
    from ddtree_lab.core import decode
    from ddtree_lab.core.verify import commit
    from ddtree_lab.core.verify import verify
    rule, layers = decode.round_rule(decode.tree_rule(drafter, tree), method), tuple(drafter.cfg.target_layer_ids)
    sampling = decode.Sampling(temperature, accept_rule, seed)
    rng = torch.Generator().manual_seed(seed) if temperature > 0 else None
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long)
    cache, features, root = decode.start(target, drafter, prompt)
    state, gen = drafter.new_state(), decode.Generation()
    while len(gen.tokens) < max_new_tokens:
        draft = drafter.draft(state, features, root, block_size)
        proposal = rule.proposal(draft)
        t = decode.sampled(rule(draft, root, block_size - 1 if method == "dflash" else budget), proposal, sampling, rng)
        out = verify(target, cache, t, gdn_mode, feature_layers=layers)
        path, bonus, _ = decode.accept_round(t, out.logits, proposal, sampling, rng)
        commit(target, cache, out.pending, path)
        features, root = out.features[path], bonus
        gen.tokens += t.tokens[path[1:]].tolist() + [bonus]
        gen.entropies += decode.entropies(out.logits[path], temperature)
        gen.acceptance_lengths.append(len(path))
        gen.tree_sizes.append(t.num_nodes)
    gen.tokens, gen.entropies = gen.tokens[:max_new_tokens], gen.entropies[:max_new_tokens]
    return gen
